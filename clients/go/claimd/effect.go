package claimd

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"
)

// The effect fence (clients/GUARD.md, "Exactly-once effects"): a handler's
// writes to its own database commit in one transaction with a row of
// claimd_effects for the delivery, and the first transaction to commit that
// row wins. This file speaks database/sql and imports no driver: the caller
// opens the *sql.DB with the PostgreSQL or SQLite driver of its choice.

// Dialect is the SQL dialect of the database that holds the fence.
type Dialect string

// Dialects. Effect speaks PostgreSQL and SQLite; EffectsSchema also prints
// MySQL's DDL for migration tools, but no guard speaks MySQL yet.
const (
	DialectPostgres Dialect = "postgres"
	DialectSQLite   Dialect = "sqlite"
	DialectMySQL    Dialect = "mysql"
)

// effectsSchema is the DDL of claimd_effects per dialect, byte for byte the
// contract's (clients/guardspec/scenarios.json, effects.schema).
var effectsSchema = map[Dialect]string{
	DialectPostgres: "CREATE TABLE IF NOT EXISTS claimd_effects (\n" +
		"    namespace     text        NOT NULL,\n" +
		"    provider      text        NOT NULL,\n" +
		"    key           text        NOT NULL,\n" +
		"    fencing_token bigint      NOT NULL,\n" +
		"    result        bytea,\n" +
		"    created_at    timestamptz NOT NULL DEFAULT now(),\n" +
		"    PRIMARY KEY (namespace, provider, key)\n" +
		")",
	DialectSQLite: "CREATE TABLE IF NOT EXISTS claimd_effects (\n" +
		"    namespace     TEXT    NOT NULL,\n" +
		"    provider      TEXT    NOT NULL,\n" +
		"    key           TEXT    NOT NULL,\n" +
		"    fencing_token INTEGER NOT NULL,\n" +
		"    result        BLOB,\n" +
		"    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n" +
		"    PRIMARY KEY (namespace, provider, key)\n" +
		")",
	DialectMySQL: "CREATE TABLE IF NOT EXISTS claimd_effects (\n" +
		"    namespace     VARCHAR(63)     NOT NULL,\n" +
		"    provider      VARCHAR(63)     NOT NULL,\n" +
		"    `key`         VARCHAR(255)    NOT NULL,\n" +
		"    fencing_token BIGINT UNSIGNED NOT NULL,\n" +
		"    result        MEDIUMBLOB,\n" +
		"    created_at    TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n" +
		"    PRIMARY KEY (namespace, provider, `key`)\n" +
		") CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
}

// EffectsSchema returns the DDL of the claimd_effects table in dialect d
// (without a trailing semicolon), or "" for a dialect it does not know. It is
// what Effect executes on first use, for teams that migrate with their own
// tools.
func EffectsSchema(d Dialect) string { return effectsSchema[d] }

// The fence's statements, in the order of the contract. SQLite takes "?"
// placeholders, PostgreSQL "$n".
type effectSQL struct{ insert, selectDone, setResult, prune string }

var effectStatements = map[Dialect]effectSQL{
	DialectPostgres: {
		insert: "INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES ($1, $2, $3, $4) " +
			"ON CONFLICT (namespace, provider, key) DO NOTHING",
		selectDone: "SELECT fencing_token, result FROM claimd_effects WHERE namespace = $1 AND provider = $2 AND key = $3",
		setResult:  "UPDATE claimd_effects SET result = $1 WHERE namespace = $2 AND provider = $3 AND key = $4",
		prune:      "DELETE FROM claimd_effects WHERE created_at < $1",
	},
	DialectSQLite: {
		insert: "INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES (?, ?, ?, ?) " +
			"ON CONFLICT (namespace, provider, key) DO NOTHING",
		selectDone: "SELECT fencing_token, result FROM claimd_effects WHERE namespace = ? AND provider = ? AND key = ?",
		setResult:  "UPDATE claimd_effects SET result = ? WHERE namespace = ? AND provider = ? AND key = ?",
		prune:      "DELETE FROM claimd_effects WHERE created_at < ?",
	},
}

// sqliteTime is the text form of created_at in SQLite, the DDL's
// strftime('%Y-%m-%dT%H:%M:%fZ'): it sorts as the time does.
const sqliteTime = "2006-01-02T15:04:05.000Z"

// Errors of Effect.
var (
	// ErrEffectOutsideGuard: Effect was called with a context that is not
	// the one Guard passed to a running GuardFunc (or one derived from it).
	ErrEffectOutsideGuard = errors.New("claimd: Effect outside a guarded handler")
	// ErrEffectTwice: the delivery already opened its effect; a delivery has
	// at most one.
	ErrEffectTwice = errors.New("claimd: a second Effect in one delivery")
)

// Fx is a delivery's effect: what its function sees and what Effect returns.
type Fx struct {
	// Done is true when an earlier holder of the claim already committed
	// this delivery's effect: the function was not called, and Result and
	// Token are that holder's.
	Done bool
	// Result is stored in the fence row with the effect's writes when the
	// function sets it (non-nil), and is the stored result when Done. Return
	// it from the GuardFunc so that a recovery answers the same bytes.
	Result []byte
	// Token is the fencing token of the holder whose fence stands: the
	// guard's own when the function ran, the earlier holder's when Done.
	Token uint64
}

// EffectTx is the transaction the function of an Effect writes through: a
// *sql.Tx on PostgreSQL; on SQLite the connection that holds BEGIN
// IMMEDIATE (a *sql.Conn, since database/sql's BeginTx cannot say
// IMMEDIATE). Do every write of the effect through it, and do not commit,
// roll back or end the transaction yourself.
type EffectTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

var (
	_ EffectTx = (*sql.Tx)(nil)
	_ EffectTx = (*sql.Conn)(nil)
)

// EffectFunc does an effect's writes through tx. Setting fx.Result stores
// it with the fence. An error (or a panic) rolls every write back.
type EffectFunc func(ctx context.Context, tx EffectTx, fx *Fx) error

// EffectOption configures Effect and PruneEffects.
type EffectOption func(*effectConfig)

type effectConfig struct{ dialect Dialect }

// EffectDialect sets the database's dialect instead of detecting it from the
// driver's package (detection knows pgx, lib/pq, modernc.org/sqlite and
// mattn/go-sqlite3, and any driver whose package path names postgres or
// sqlite).
func EffectDialect(d Dialect) EffectOption { return func(c *effectConfig) { c.dialect = d } }

// Effect runs fn exactly once per delivery across every holder of its claim,
// for writes to db done through fn's tx (clients/GUARD.md, "Exactly-once
// effects"). ctx must be the context Guard passed to the GuardFunc (or one
// derived from it): Effect finds the claim there, and fails with
// ErrEffectOutsideGuard elsewhere and with ErrEffectTwice when the delivery
// already opened its effect.
//
// In one transaction on db (SQLite: BEGIN IMMEDIATE), Effect inserts the
// fence row (namespace, provider, key, this holder's fencing token) with ON
// CONFLICT DO NOTHING. When a row is inserted, fn runs, fx.Result (when set)
// is stored in the fence row, and the transaction commits; the returned Fx
// has Done false. When the row exists, an earlier holder committed this
// delivery's effect: fn is not called, the transaction rolls back, and the
// returned Fx has Done true with that holder's Result and Token. The guard
// then settles the event with that stored result, whatever the GuardFunc
// returns, and tells claimd it was recovered.
//
// An error from fn, or a failed commit, rolls back and is returned: the
// handler failed, with no writes and no fence (a commit that failed but did
// commit after all leaves a fence the next holder finds). The table is
// created on first use per *sql.DB (CREATE TABLE IF NOT EXISTS).
func Effect(ctx context.Context, db *sql.DB, fn EffectFunc, opts ...EffectOption) (*Fx, error) {
	st, _ := ctx.Value(effectCtxKey{}).(*effectState)
	if st == nil {
		return nil, ErrEffectOutsideGuard
	}
	if err := st.open(); err != nil {
		return nil, err
	}
	d, err := effectDialect(db, opts)
	if err != nil {
		return nil, err
	}
	if err := ensureEffectsSchema(ctx, db, d); err != nil {
		return nil, err
	}
	fx, err := runEffect(ctx, db, d, st.lease, fn)
	if err != nil {
		return nil, err
	}
	st.commit(fx)
	return fx, nil
}

// runEffect is the fence's transaction.
func runEffect(ctx context.Context, db *sql.DB, d Dialect, l Lease, fn EffectFunc) (fx *Fx, err error) {
	q := effectStatements[d]
	t, err := beginEffect(ctx, db, d)
	if err != nil {
		return nil, fmt.Errorf("claimd: effect: begin: %w", err)
	}
	ended := false
	defer func() {
		// Every way out but a commit, a panic in fn included, rolls back.
		if !ended {
			err = errors.Join(err, t.rollback())
		}
	}()

	res, err := t.tx.ExecContext(ctx, q.insert, l.Namespace, l.Provider, l.Key, int64(l.FencingToken))
	if err != nil {
		return nil, fmt.Errorf("claimd: effect: insert fence: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, fmt.Errorf("claimd: effect: insert fence: %w", err)
	}
	if n == 0 {
		// A fence is committed: the insert waited for its holder's
		// transaction (PostgreSQL) or for the write lock (SQLite), so what
		// is read now is committed. Nothing was written here.
		var token int64
		done := &Fx{Done: true}
		if err := t.tx.QueryRowContext(ctx, q.selectDone, l.Namespace, l.Provider, l.Key).Scan(&token, &done.Result); err != nil {
			return nil, fmt.Errorf("claimd: effect: read fence: %w", err)
		}
		done.Token = uint64(token)
		return done, nil
	}

	fx = &Fx{Token: l.FencingToken}
	if err := fn(ctx, t.tx, fx); err != nil {
		return nil, err
	}
	if fx.Result != nil {
		if _, err := t.tx.ExecContext(ctx, q.setResult, fx.Result, l.Namespace, l.Provider, l.Key); err != nil {
			return nil, fmt.Errorf("claimd: effect: store result: %w", err)
		}
	}
	ended = true
	if err := t.commit(); err != nil {
		// May have committed after all: then the next holder finds the fence.
		return nil, fmt.Errorf("claimd: effect: commit: %w", err)
	}
	return fx, nil
}

// effectTxn is an open transaction of either dialect. After commit or
// rollback, whether or not it failed, nothing is left open.
type effectTxn struct {
	tx       EffectTx
	commit   func() error
	rollback func() error
}

func beginEffect(ctx context.Context, db *sql.DB, d Dialect) (*effectTxn, error) {
	if d == DialectPostgres {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		rollback := func() error {
			if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
				return err
			}
			return nil
		}
		return &effectTxn{tx: tx, commit: tx.Commit, rollback: rollback}, nil
	}
	// SQLite: BEGIN IMMEDIATE takes the write lock at once, so writers queue
	// here (under the connection's busy timeout) instead of failing at
	// commit. It needs a connection of its own and raw statements.
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	end := func(ctx context.Context, stmt string) error {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			// The connection may still be inside the transaction: never hand
			// it back to the pool. Raw's ErrBadConn closes it, and closing a
			// SQLite connection rolls its transaction back.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			return err
		}
		return conn.Close()
	}
	return &effectTxn{
		tx:       conn,
		commit:   func() error { return end(ctx, "COMMIT") },
		rollback: func() error { return end(context.WithoutCancel(ctx), "ROLLBACK") },
	}, nil
}

// effectDialect is the option's dialect, or the one of db's driver.
func effectDialect(db *sql.DB, opts []EffectOption) (Dialect, error) {
	var cfg effectConfig
	for _, o := range opts {
		o(&cfg)
	}
	d := cfg.dialect
	if d == "" {
		t := reflect.TypeOf(db.Driver())
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		name := strings.ToLower(t.PkgPath() + "." + t.Name())
		switch {
		case strings.Contains(name, "sqlite"):
			d = DialectSQLite
		case strings.Contains(name, "postgres"), strings.Contains(name, "pgx"), strings.Contains(name, "lib/pq"):
			d = DialectPostgres
		default:
			return "", fmt.Errorf("claimd: effect: cannot tell the dialect of driver %s.%s; pass EffectDialect", t.PkgPath(), t.Name())
		}
	}
	if _, ok := effectStatements[d]; !ok {
		return "", fmt.Errorf("claimd: effect: dialect %q is not supported (postgres and sqlite are)", d)
	}
	return d, nil
}

// schemas remembers, per *sql.DB, that claimd_effects exists. It holds the
// DB weakly and forgets it when the DB is collected, so opening and closing
// databases does not grow it.
var schemas sync.Map // weak.Pointer[sql.DB] → *schemaOnce

type schemaOnce struct {
	mu   sync.Mutex
	done bool
}

// ensureEffectsSchema creates claimd_effects once per db. A failure is not
// remembered: the next effect tries again.
func ensureEffectsSchema(ctx context.Context, db *sql.DB, d Dialect) error {
	key := weak.Make(db)
	v, loaded := schemas.LoadOrStore(key, &schemaOnce{})
	if !loaded {
		runtime.AddCleanup(db, func(k weak.Pointer[sql.DB]) { schemas.Delete(k) }, key)
	}
	s := v.(*schemaOnce)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	ddl := EffectsSchema(d)
	_, err := db.ExecContext(ctx, ddl)
	if err != nil && ctx.Err() == nil {
		// Two PostgreSQL sessions that CREATE TABLE IF NOT EXISTS at once:
		// the loser fails on the catalog's unique index. The table exists
		// now; the second try says so.
		_, err = db.ExecContext(ctx, ddl)
	}
	if err != nil {
		return fmt.Errorf("claimd: effect: create claimd_effects: %w", err)
	}
	s.done = true
	return nil
}

// PruneEffects deletes the fence rows created before before and returns how
// many it deleted. A fence matters while claimd may still hand its delivery
// to a new holder, i.e. within the provider's window (its ttl): pass a
// cutoff older than the longest ttl in use, with a margin, taken from your
// own clock. It creates claimd_effects when missing, like Effect.
func PruneEffects(ctx context.Context, db *sql.DB, before time.Time, opts ...EffectOption) (int64, error) {
	d, err := effectDialect(db, opts)
	if err != nil {
		return 0, err
	}
	if err := ensureEffectsSchema(ctx, db, d); err != nil {
		return 0, err
	}
	var cutoff any = before
	if d == DialectSQLite {
		cutoff = before.UTC().Format(sqliteTime)
	}
	res, err := db.ExecContext(ctx, effectStatements[d].prune, cutoff)
	if err != nil {
		return 0, fmt.Errorf("claimd: prune effects: %w", err)
	}
	return res.RowsAffected()
}

// EffectKey is a stable idempotency key for step of the claimed delivery,
// for a downstream API (Stripe's or Adyen's Idempotency-Key): "claimd-" and
// the first 32 hex digits of the SHA-256 of namespace, provider, key and
// step joined by NUL bytes. It is the same across takeovers, replicas and
// claimd's clients in every language, and different per step.
func EffectKey(c Claim, step string) string {
	return effectKey(c.Namespace, c.Provider, c.GetKey(), step)
}

// EffectKey is the package's EffectKey of c.
func (c Claim) EffectKey(step string) string { return EffectKey(c, step) }

func effectKey(namespace, provider, key, step string) string {
	sum := sha256.Sum256([]byte(namespace + "\x00" + provider + "\x00" + key + "\x00" + step))
	return "claimd-" + hex.EncodeToString(sum[:16])
}

// effectCtxKey finds the delivery's effectState in the GuardFunc's context.
type effectCtxKey struct{}

// effectState is what Guard and the delivery's Effect share: whether the
// effect opened, and what it found. Guard reads it after fn returned.
type effectState struct {
	lease Lease

	mu     sync.Mutex
	opened bool
	closed bool // fn returned: no effect may open any more
	fx     *Fx  // set when the effect committed or found its fence done
}

func (s *effectState) open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrEffectOutsideGuard
	case s.opened:
		return ErrEffectTwice
	}
	s.opened = true
	return nil
}

func (s *effectState) commit(fx *Fx) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *fx
	s.fx = &c
}

// close ends the delivery's effect window and returns what its effect did
// (nil when none committed or found done).
func (s *effectState) close() *Fx {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return s.fx
}
