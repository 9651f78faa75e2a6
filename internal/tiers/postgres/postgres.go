// Package postgres is claimd's durable tier on PostgreSQL (pgx/v5, pgxpool):
// the source of truth of every record, and the audit log of every decision.
//
// Every operation is one conditional statement that decides and writes
// atomically (INSERT … ON CONFLICT … DO UPDATE … WHERE for a claim, a fenced
// UPDATE for the others), with its audit row written by the same statement.
// The state machine is package tiers' (Decide, Takeover, Apply*): the
// statements encode its success conditions, and when a statement writes
// nothing the row is read back and the pure functions name the answer or the
// error, so both paths give tiers' answers exactly.
//
// Claims that carry an entity event (tiers.EntityEvent) are the exception:
// each runs a short transaction that locks the entity's row, decides the
// key as above, and orders the event against the entity (entity.go); the
// settle, failure or release of such a record locks the entity too, in the
// same order, and advances or frees it in the same transaction.
//
// Time is never PostgreSQL's: every decision compares the times carried by
// the call's params (the service's injected clock). The server's now()
// appears only in bookkeeping columns (claimd_schema_migrations.applied_at,
// audit_log.logged_at).
//
// The tables live in a schema of their own (Config.Schema, default claimd),
// which is the only schema on every connection's search_path. The schema
// lives in migrations/*.sql, the statements in queries/*.sql, both embedded
// in the binary.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimd/claimd/internal/tiers"
)

var _ tiers.Durable = (*Store)(nil)

// defaultConnectTimeout bounds one connection attempt when Config leaves it
// zero: a dead server must turn into ErrUnavailable well within a caller's
// deadline, not after the kernel's TCP retries.
const defaultConnectTimeout = 5 * time.Second

// partitionsAhead is how many months of audit partitions beyond the current
// one Migrate and New create, so a process may run that long without a
// restart before a write has to create its month's partition itself.
const partitionsAhead = 3

// DefaultSchema is the schema of claimd's tables when Config.Schema is
// empty. claimd 0.1 put its tables in the database's default schema,
// public: a deployment made with it keeps them by setting Schema "public".
const DefaultSchema = "claimd"

// Config configures New. Zero values mean the defaults.
type Config struct {
	// URL is a libpq URL or key=value string (postgres://user@host/db).
	URL string
	// Schema is the PostgreSQL schema that holds claimd's tables; empty
	// means DefaultSchema. It is the search_path of every connection, so
	// claimd sees no other schema's tables and two deployments in two
	// schemas of one database never see each other's rows. Migrate creates
	// it when it is missing.
	Schema string
	// MaxConns caps the pool. Zero means max(8, 4×GOMAXPROCS): every claim
	// holds a connection for a round trip or two, and pgxpool's own default
	// (max(4, NumCPU): 4 on a small machine) queues claims behind each other
	// under a burst of retries.
	MaxConns int32
	// ConnectTimeout bounds one connection attempt; zero means 5s.
	ConnectTimeout time.Duration
	// Migrate applies pending migrations (Migrate) before the pool opens.
	// Without it New refuses a database whose schema is older than this
	// binary's.
	Migrate bool
	// MaxBatch bounds how many concurrent first claims one statement
	// inserts (group commit, batch.go), and how many fenced updates
	// (Transition, Renew, Release) one transaction commits together
	// (writebatch.go). Zero means 64; 1 turns batching
	// off, so that every claim runs its own statement.
	MaxBatch int
	// BatchFlushers is how many batch statements may be in flight at once.
	// Zero means 1: the next batch fills while one commits. More flushers
	// split the same claims into smaller batches whose commits queue on
	// the same WAL flush, which costs the server more for no more claims a
	// second (measured in BENCHMARKS.md's setup).
	BatchFlushers int
	// Step, when set, is called at named steps inside the transaction of
	// an entity settle (entityWrite): "entity-settle-before" once the
	// record is written and before the entity row is updated,
	// "entity-settle-after" once the entity row is updated and before the
	// commit. It is the fault suite's crash points (cmd/claimd's
	// crashpoint_chaos.go, built with -tags chaos); nil in every
	// production build.
	Step func(step string, k tiers.Key)
}

// Store is the PostgreSQL durable tier. It is safe for concurrent use.
type Store struct {
	pool       *pgxpool.Pool
	batch      *batcher      // nil when batching is off
	writes     *writeBatcher // nil when batching is off
	reads      *reader       // nil when batching is off
	schema     string
	janitorKey int64                   // JanitorLockKey(schema)
	step       func(string, tiers.Key) // Config.Step
}

// New opens a pool on cfg.URL, migrates the schema when cfg.Migrate is set,
// checks that the schema is this binary's, and makes sure the audit log has
// partitions for this month and the next three. The database must answer:
// when it cannot be reached the error wraps tiers.ErrUnavailable, so a caller
// may retry.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.MaxBatch < 0 || cfg.BatchFlushers < 0 {
		return nil, fmt.Errorf("postgres: Config.MaxBatch (%d) and Config.BatchFlushers (%d) may not be negative", cfg.MaxBatch, cfg.BatchFlushers)
	}
	pcfg, err := poolConfig(cfg)
	if err != nil {
		return nil, err
	}
	schema := cmp.Or(cfg.Schema, DefaultSchema)
	if cfg.Migrate {
		if _, err := migrate(ctx, pcfg.ConnConfig.Copy(), schema); err != nil {
			return nil, err
		}
	}
	// No connection opened before an outage is used after it (outage.go).
	new(outageWatch).install(pcfg)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open pool: %w", err)
	}
	s := &Store{pool: pool, schema: schema, janitorKey: JanitorLockKey(schema), step: cfg.Step}
	if err := s.checkSchema(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	// Partition provisioning follows the wall clock: it prepares storage
	// and decides nothing, and a write whose (service-clock) month has no
	// partition creates it anyway.
	if err := s.EnsureAuditPartitions(ctx, time.Now(), partitionsAhead); err != nil {
		pool.Close()
		return nil, err
	}
	if maxBatch := cmp.Or(cfg.MaxBatch, defaultMaxBatch); maxBatch > 1 {
		flushers := cmp.Or(cfg.BatchFlushers, defaultBatchFlushers)
		s.batch = newBatcher(s, maxBatch, flushers)
		s.batch.start(flushers)
		s.writes = newWriteBatcher(s, maxBatch)
		s.writes.start()
		s.reads = newReader(s, maxBatch)
		s.reads.start()
	}
	return s, nil
}

// poolConfig turns cfg into a pgxpool configuration, applying the defaults.
func poolConfig(cfg Config) (*pgxpool.Config, error) {
	if cfg.URL == "" {
		return nil, errors.New("postgres: Config.URL is empty")
	}
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("postgres: Config.MaxConns: %d is negative", cfg.MaxConns)
	}
	if cfg.ConnectTimeout < 0 {
		return nil, fmt.Errorf("postgres: Config.ConnectTimeout: %v is negative", cfg.ConnectTimeout)
	}
	schema := cmp.Or(cfg.Schema, DefaultSchema)
	if err := checkSchemaName(schema); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgconn's ParseConfigError masks the password in its text.
		return nil, fmt.Errorf("postgres: Config.URL: %w", err)
	}
	// The schema is a startup parameter of every connection, not a SET run
	// after it: a connection has this search_path from its first statement
	// to its last, so every statement pgx prepares and caches on it, and
	// every group-commit batch it sends, names claimd's tables. A
	// search_path in the URL is overridden.
	pcfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	// Every statement on the hot path reads claims, entities and deferrals
	// by primary key, and pgx prepares it once per connection: the generic
	// plan PostgreSQL then caches is planned against the table as it looked
	// at that moment. Analyzed while it held a few dozen rows (autovacuum's
	// first ANALYZE of a new database), a primary-key lookup is cheapest as
	// a sequential scan, and that plan stays cached while the table grows
	// by thousands of rows a second until the next ANALYZE
	// (TestKeyLookupPlans). Sequential scans off for the session makes the
	// planner take the index whenever there is one; the janitor's and the
	// deferral lists' statements have theirs (window and expiry indexes,
	// audit_log's BRIN), and a statement without one still scans.
	pcfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	pcfg.MaxConns = cfg.MaxConns
	if pcfg.MaxConns == 0 {
		pcfg.MaxConns = int32(max(8, 4*runtime.GOMAXPROCS(0)))
	}
	pcfg.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	return pcfg, nil
}

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN-1: a longer name would be
// truncated, and claimd would use a schema other than the one named.
const maxIdentifierBytes = 63

// checkSchemaName refuses a schema name PostgreSQL would not keep as given.
func checkSchemaName(name string) error {
	switch {
	case len(name) > maxIdentifierBytes:
		return fmt.Errorf("postgres: Config.Schema is %d bytes; PostgreSQL names are at most %d", len(name), maxIdentifierBytes)
	case strings.ContainsRune(name, 0):
		return errors.New("postgres: Config.Schema contains a NUL byte")
	case strings.HasPrefix(name, "pg_"):
		return fmt.Errorf("postgres: Config.Schema %q: names starting with pg_ are PostgreSQL's own", name)
	}
	return nil
}

// checkSchema refuses a database that Migrate has not brought up to this
// binary's schema: the statements would fail on every call instead.
func (s *Store) checkSchema(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	want := ms[len(ms)-1].Version
	var have int
	err = s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+migrationsTable).Scan(&have)
	if isUndefinedTable(err) {
		return fmt.Errorf("postgres: schema %s has no %s table: run claimd migrate (schema version %d)", s.schema, migrationsTable, want)
	}
	if err != nil {
		return fail(ctx, "check schema", err)
	}
	if have < want {
		return fmt.Errorf("postgres: database schema version %d is older than this binary's %d: run claimd migrate", have, want)
	}
	return nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return fail(ctx, "ping", s.pool.Ping(ctx))
}

// Close closes the pool, waiting for connections in use to be returned
// (and for the claims already queued for a batch to be decided).
func (s *Store) Close() error {
	if s.batch != nil {
		s.batch.queue.Close()
	}
	if s.writes != nil {
		s.writes.queue.Close()
	}
	if s.reads != nil {
		s.reads.queue.Close()
	}
	s.pool.Close()
	return nil
}

// countAuditPartitions is the select-list expression of Stats and
// EstimatedStats that counts audit_log's partitions.
const countAuditPartitions = `(SELECT count(*) FROM pg_inherits WHERE inhparent = 'audit_log'::regclass)`

// Stats reports the number of records and of audit partitions. The record
// count is exact, so it scans claims: call it for operators and tests, never
// periodically (EstimatedStats is the metrics sampler's).
func (s *Store) Stats(ctx context.Context) (claims int64, auditPartitions int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM claims), `+countAuditPartitions).Scan(&claims, &auditPartitions)
	if err != nil {
		return 0, 0, fail(ctx, "stats", err)
	}
	return claims, auditPartitions, nil
}

// EstimatedStats reports the number of records as PostgreSQL's statistics
// estimate it, and the number of audit partitions. It reads catalogs only,
// so its cost does not grow with the table: the metrics sampler calls it on
// every interval, where an exact count(*) scanned the table each time: with
// ten million claims stored that added 11 µs of PostgreSQL's CPU to every
// new claim of a 15 s load (1.8 s in all) and 1.3× to its p99 (bench/NOTES.md,
// "Growth"). The estimate is n_live_tup, the running count of live rows that
// autovacuum works from (summed over the partitions of a claims table
// partitioned by `claimd migrate --partition-claims`, the partitioned parent
// left out: an ANALYZE gives it the partitions' total), behind by the
// transactions of the last second or so; where it reads 0 (its statistics
// were just reset, or lost in a crash) the planner's reltuples from the
// last VACUUM or ANALYZE stands in.
func (s *Store) EstimatedStats(ctx context.Context) (claims int64, auditPartitions int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(CASE WHEN st.n_live_tup > 0 THEN st.n_live_tup ELSE greatest(c.reltuples, 0)::bigint END), 0)::bigint
			FROM pg_stat_all_tables st JOIN pg_class c ON c.oid = st.relid
			WHERE c.relkind = 'r' AND (st.relid = 'claims'::regclass OR st.relid IN (SELECT relid FROM pg_partition_tree('claims')))),
		`+countAuditPartitions).Scan(&claims, &auditPartitions)
	if err != nil {
		return 0, 0, fail(ctx, "estimated stats", err)
	}
	return claims, auditPartitions, nil
}

// Get reads the record of k. With batching on, concurrent Gets share a
// statement (readbatch.go).
func (s *Store) Get(ctx context.Context, k tiers.Key) (tiers.Record, error) {
	get := s.get
	if s.reads != nil {
		get = s.getBatched
	}
	rec, err := get(ctx, k)
	if err != nil && !errors.Is(err, tiers.ErrNotFound) {
		return tiers.Record{}, fail(ctx, "get "+k.String(), err)
	}
	return rec, err
}

// get reads the record of k in a statement of its own, so it sees every row
// committed before it starts. It returns tiers.ErrNotFound or the raw
// database error.
func (s *Store) get(ctx context.Context, k tiers.Key) (tiers.Record, error) {
	return getOn(ctx, s.pool, k)
}

// getOn is get on q, the pool or a transaction.
func getOn(ctx context.Context, q querier, k tiers.Key) (tiers.Record, error) {
	rec, err := scanRecord(q.QueryRow(ctx, getSQL, k.Namespace, k.Provider, k.Key), k)
	if errors.Is(err, pgx.ErrNoRows) {
		return tiers.Record{}, notFound(k)
	}
	return rec, err
}

// notFound is Get's answer for a key without a row.
func notFound(k tiers.Key) error { return fmt.Errorf("postgres: %s: %w", k, tiers.ErrNotFound) }
