// Package sqlite is the embedded durable tier of claimd: a tiers.Durable on a
// single SQLite file, through the pure-Go driver modernc.org/sqlite.
//
// SQLite allows one writer, so every method that may write hands its work to
// one committer goroutine (batch.go), which owns the single write connection:
// the read of the current record, the decision (the pure functions of package
// tiers) and the write of the record and its audit row run together under
// the write lock, in a savepoint of a transaction that commits the writes of
// every caller queued meanwhile at once (group commit), and no caller hears
// its answer before that COMMIT has returned. A claim of a lifecycle event
// is ordered against its entity, and a settle advances the entity, inside
// that same write (entity.go). Reads (Get, Stats, Ping) use a
// second, read-only pool so that on-call debugging never queues behind
// claims.
//
// By default every COMMIT is fsynced (synchronous=FULL): an answered claim
// survives an OS crash or power loss, as a PostgreSQL commit does.
// DurabilityRelaxed trades that for less I/O; see Durability.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/claimd/claimd/internal/textclip"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/migrations"
)

// DefaultBusyTimeout is how long a write waits for another process's lock on
// the file (claimd prune or migrate run alongside the server) before the
// operation fails with tiers.ErrUnavailable.
const DefaultBusyTimeout = 5 * time.Second

// readConns bounds the read-only pool: Get and Stats are on-call tools, not a
// hot path, and each connection holds its own page cache.
const readConns = 4

// Durability is how far a commit has gone when a write returns: SQLite's
// synchronous pragma on every connection of the Store. The database file
// stays consistent in every mode; the modes differ in which answered writes
// a failure may take back.
type Durability int

const (
	// DurabilityFull (synchronous=FULL, the default) fsyncs the WAL at every
	// COMMIT before the write returns: an answered write survives a killed
	// process, an OS crash and a power loss (on a disk that honours fsync).
	// Group commit (batch.go) shares one fsync among the writes queued
	// while the previous one ran.
	DurabilityFull Durability = iota
	// DurabilityRelaxed (synchronous=NORMAL) returns once the WAL frames
	// reached the OS, and fsyncs the WAL only at checkpoints: an answered
	// write survives a killed process, but an OS crash or power loss may
	// take back the last commits — an ACQUIRED or SETTLED answer then
	// forgotten, so that the provider's retry runs the side effect again.
	DurabilityRelaxed
)

// String is the name --sqlite-durability takes.
func (d Durability) String() string {
	switch d {
	case DurabilityFull:
		return "full"
	case DurabilityRelaxed:
		return "relaxed"
	}
	return "Durability(" + strconv.Itoa(int(d)) + ")"
}

// ParseDurability reads a Durability by its name: full or relaxed.
func ParseDurability(s string) (Durability, error) {
	for _, d := range []Durability{DurabilityFull, DurabilityRelaxed} {
		if s == d.String() {
			return d, nil
		}
	}
	return 0, fmt.Errorf("sqlite durability %q: want full or relaxed", textclip.Cut(s, maxEcho))
}

// synchronous is the pragma value of d.
func (d Durability) synchronous() (string, error) {
	switch d {
	case DurabilityFull:
		return "FULL", nil
	case DurabilityRelaxed:
		return "NORMAL", nil
	}
	return "", fmt.Errorf("sqlite: Config.Durability: unknown %v", d)
}

// maxEcho bounds a value quoted back in an error: it may be hostile.
const maxEcho = 32

// Config configures a Store. The zero value of each field but Path means its
// default.
type Config struct {
	// Path is the database file. Its directory must exist; the file is
	// created and migrated when missing.
	Path string
	// BusyTimeout bounds the wait for a lock held by another process; zero
	// means DefaultBusyTimeout.
	BusyTimeout time.Duration
	// Durability is what a returned write survives; the zero value is
	// DurabilityFull.
	Durability Durability
	// MaxBatch bounds how many writes one transaction commits (group
	// commit, batch.go). Zero means 64; 1 gives every write its own
	// transaction and fsync.
	MaxBatch int
	// Step, when set, is called at named steps inside the transaction of
	// an entity settle (moveEntity): "entity-settle-before" before the
	// entity row is updated, "entity-settle-after" once it is and before
	// the record's write and the commit. It is the fault suite's crash
	// points (cmd/claimd's crashpoint_chaos.go, built with -tags chaos);
	// nil in every production build.
	Step func(step string, k tiers.Key)
}

// Store is the SQLite durable tier. It is safe for concurrent use.
type Store struct {
	w      *sql.DB    // one connection: the only writer, used by commit
	wst    *stmts     // prepared on w
	commit *committer // runs every write; nil until New has prepared wst
	r      *sql.DB    // read-only connections
	rst    *sql.Stmt
	closed atomic.Bool
	step   func(string, tiers.Key) // Config.Step

	migrated migrations.Result // what New's migration run did
}

// Migrated reports what the migration run of New applied (`claimd migrate`
// on the embedded tier prints it).
func (s *Store) Migrated() migrations.Result { return s.migrated }

var _ tiers.Durable = (*Store)(nil)

// New opens (creating if needed) the database at cfg.Path, applies pending
// migrations and returns a Store over it.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Path == "" {
		return nil, errors.New("sqlite: Config.Path is required")
	}
	if cfg.BusyTimeout < 0 {
		return nil, fmt.Errorf("sqlite: Config.BusyTimeout: %v is negative", cfg.BusyTimeout)
	}
	if cfg.BusyTimeout == 0 {
		cfg.BusyTimeout = DefaultBusyTimeout
	}
	if cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("sqlite: Config.MaxBatch: %d is negative", cfg.MaxBatch)
	}
	synchronous, err := cfg.Durability.synchronous()
	if err != nil {
		return nil, err
	}
	// SQLite counts in milliseconds, and 0 would mean "do not wait at all".
	busy := strconv.FormatInt(max(cfg.BusyTimeout.Milliseconds(), 1), 10)

	// WAL: a commit is appended to the WAL file, which lets the read pool
	// read while the writer writes; synchronous says whether COMMIT also
	// waits for the WAL's fsync (Durability).
	//
	// _txlock=immediate makes every BeginTx a BEGIN IMMEDIATE: the write lock
	// is taken before the current record is read, so a decision is never made
	// on a row another writer is about to change.
	w, err := sql.Open("sqlite", dsn(cfg.Path, url.Values{
		"_pragma": {
			"busy_timeout(" + busy + ")",
			"journal_mode(WAL)",
			"synchronous(" + synchronous + ")",
			"foreign_keys(1)",
		},
		"_txlock": {"immediate"},
	}))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	// Ping opens the file (and applies the pragmas), so that a bad path is
	// reported as such rather than as a failed migration.
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, openError(ctx, cfg.Path, err)
	}
	migrated, err := migrate(ctx, w)
	if err != nil {
		w.Close()
		return nil, openError(ctx, cfg.Path, err)
	}

	// The read pool opens after the writer has switched the file to WAL (a
	// persistent setting); query_only makes any write through it an error.
	// It never commits, but the connection that closes last checkpoints the
	// WAL into the database file, with its own synchronous setting.
	r, err := sql.Open("sqlite", dsn(cfg.Path, url.Values{
		"_pragma": {
			"busy_timeout(" + busy + ")",
			"synchronous(" + synchronous + ")",
			"query_only(1)",
		},
	}))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s := &Store{w: w, r: r, migrated: migrated, step: cfg.Step}
	if s.wst, err = prepare(ctx, w); err == nil {
		s.rst, err = r.PrepareContext(ctx, selectRecord)
	}
	if err != nil {
		s.Close()
		return nil, openError(ctx, cfg.Path, err)
	}
	s.commit = newCommitter(s, cmp.Or(cfg.MaxBatch, defaultMaxBatch))
	s.commit.start()
	return s, nil
}

// dsn is a SQLite URI for path with the driver's query parameters. The path
// is escaped so that a '?' or '#' in a file name stays part of it.
func dsn(path string, q url.Values) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Ping reports whether the database answers a query.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return tiers.Unavailable("sqlite", errClosed)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		return translate(ctx, "ping", err)
	}
	return nil
}

// Stats returns the number of claims rows (records within or awaiting prune).
func (s *Store) Stats(ctx context.Context) (claims int64, err error) {
	if s.closed.Load() {
		return 0, tiers.Unavailable("sqlite", errClosed)
	}
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM claims`).Scan(&claims); err != nil {
		return 0, translate(ctx, "stats", err)
	}
	return claims, nil
}

// Close closes both pools, after the writes already queued have committed
// and been answered. Once the last connection closes, SQLite checkpoints the
// WAL into the database file.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.commit != nil {
		s.commit.queue.Close()
	}
	var errs []error
	if s.rst != nil {
		errs = append(errs, s.rst.Close())
	}
	if s.wst != nil {
		errs = append(errs, s.wst.close())
	}
	return errors.Join(append(errs, s.r.Close(), s.w.Close())...)
}

var errClosed = errors.New("store is closed")

// openError reports a failure of New. Nothing is being decided yet, so it is
// not mapped to ErrUnavailable: the caller is starting up and needs the cause.
func openError(ctx context.Context, path string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("sqlite: open %s: %w", path, err)
}

// translate maps a driver error to the contract's errors: a done context
// passes through unwrapped; lock timeouts, I/O failures and a full disk mean
// the tier cannot serve now (ErrUnavailable, so the service fails closed and
// the provider retries); anything else is reported as it is. A nil err
// stays nil.
func translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		// The driver reports an interrupted statement as SQLITE_INTERRUPT;
		// the caller wants to see its own cancellation.
		return cerr
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff { // primary result code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_NOMEM,
			sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_READONLY:
			return tiers.Unavailable("sqlite", fmt.Errorf("%s: %w", op, err))
		}
	}
	if errors.Is(err, sql.ErrConnDone) {
		return tiers.Unavailable("sqlite", fmt.Errorf("%s: %w", op, err))
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}
