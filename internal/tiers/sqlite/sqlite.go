// Package sqlite is the embedded durable tier of claimd: a tiers.Durable on a
// single SQLite file, through the pure-Go driver modernc.org/sqlite.
//
// Every method that may write runs in one BEGIN IMMEDIATE transaction on a
// pool of one connection: SQLite allows one writer, so claims of any keys
// serialize, and the read of the current record, the decision (the pure
// functions of package tiers) and the write of the record and its audit row
// commit together or not at all. Reads (Get, Stats, Ping) use a second,
// read-only pool so that on-call debugging never queues behind claims.
package sqlite

import (
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

// Config configures a Store. The zero value of each field but Path means its
// default.
type Config struct {
	// Path is the database file. Its directory must exist; the file is
	// created and migrated when missing.
	Path string
	// BusyTimeout bounds the wait for a lock held by another process; zero
	// means DefaultBusyTimeout.
	BusyTimeout time.Duration
}

// Store is the SQLite durable tier. It is safe for concurrent use.
type Store struct {
	w      *sql.DB // one connection: the only writer
	wst    *stmts  // prepared on w
	r      *sql.DB // read-only connections
	rst    *sql.Stmt
	closed atomic.Bool

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
	// SQLite counts in milliseconds, and 0 would mean "do not wait at all".
	busy := strconv.FormatInt(max(cfg.BusyTimeout.Milliseconds(), 1), 10)

	// WAL with synchronous=NORMAL: a commit is appended to the WAL file and
	// reaches the OS before COMMIT returns, so it survives a crash or kill of
	// the claimd process — which is what a restart needs. Only an OS crash or
	// power loss may lose the last commits (NORMAL skips the fsync per commit;
	// the WAL is fsynced at checkpoints), and the database stays consistent
	// either way. FULL would fsync every claim for protection against power
	// loss, at several times the latency. WAL also lets the read pool read
	// while the writer writes.
	//
	// _txlock=immediate makes every BeginTx a BEGIN IMMEDIATE: the write lock
	// is taken before the current record is read, so a decision is never made
	// on a row another writer is about to change.
	w, err := sql.Open("sqlite", dsn(cfg.Path, url.Values{
		"_pragma": {
			"busy_timeout(" + busy + ")",
			"journal_mode(WAL)",
			"synchronous(NORMAL)",
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
	r, err := sql.Open("sqlite", dsn(cfg.Path, url.Values{
		"_pragma": {
			"busy_timeout(" + busy + ")",
			"query_only(1)",
		},
	}))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	s := &Store{w: w, r: r, migrated: migrated}
	if s.wst, err = prepare(ctx, w); err == nil {
		s.rst, err = r.PrepareContext(ctx, selectRecord)
	}
	if err != nil {
		s.Close()
		return nil, openError(ctx, cfg.Path, err)
	}
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

// Close closes both pools. Once the last connection closes, SQLite
// checkpoints the WAL into the database file.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
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
// the provider retries); anything else is reported as it is.
func translate(ctx context.Context, op string, err error) error {
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
