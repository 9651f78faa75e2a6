package postgres

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/tiers/migrations"

	"github.com/jackc/pgx/v5"
)

// schemaLockKey is the pg_advisory_lock key under which claimd changes its
// schema: Migrate holds it for its whole run, and audit partitions are
// created and dropped under it. It is the ASCII bytes of "claimd" read as a
// big-endian integer (0x636c61696d64 = 109330621638244). Advisory locks are
// per database; nothing else sharing claimd's database may use this key.
const schemaLockKey int64 = 0x636c61696d64

//go:embed migrations/*.sql
var migrationFS embed.FS

// loadMigrations lists the embedded migrations in version order.
func loadMigrations() ([]migrations.Migration, error) {
	ms, err := migrations.Load(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return ms, nil
}

// SchemaVersion is the highest migration version embedded in this binary.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Migrate brings the schema of the database at url up to SchemaVersion and
// creates the audit partitions of this month and the next three. It is what
// `claimd migrate` runs, and what New runs with Config.Migrate.
//
// The whole run holds a session-level pg_advisory_lock (schemaLockKey), so
// replicas starting together migrate one after the other: the first applies
// the pending files, the others find them recorded. Each migration runs in
// its own transaction together with its schema_migrations row, so a failed
// migration leaves no half-applied schema. Migrate refuses a database
// migrated by a newer binary (downgrades are not supported).
func Migrate(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return migrate(ctx, cfg)
}

// migrate is Migrate over a parsed configuration (New passes its own, with
// its connect timeout).
func migrate(ctx context.Context, cfg *pgx.ConnConfig) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fail(ctx, "migrate: connect", err)
	}
	// Closing the session also releases the advisory lock, whatever happened.
	// The close itself is bounded: a dead server must not hold up the caller.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()

	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, schemaLockKey); err != nil {
		return fail(ctx, "migrate: lock", err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fail(ctx, "migrate: create schema_migrations", err)
	}
	applied := map[int]bool{}
	rows, _ := conn.Query(ctx, `SELECT version FROM schema_migrations`)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fail(ctx, "migrate: read schema_migrations", err)
	}
	for _, v := range versions {
		applied[int(v)] = true
		if int(v) > len(ms) {
			return fmt.Errorf("postgres: migrate: database schema version %d is newer than this binary's %d", v, len(ms))
		}
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		}); err != nil {
			return fail(ctx, "migrate "+m.Name, err)
		}
	}
	// Wall clock: provisioning storage ahead of time decides nothing.
	return ensureAuditPartitions(ctx, conn, time.Now(), partitionsAhead)
}
