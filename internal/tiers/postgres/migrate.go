package postgres

import (
	"cmp"
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

// migrationsTable records the migrations applied to a schema, one row
// each. Its name is claimd's own: schema_migrations, the name of claimd 0.1,
// is also Rails's and golang-migrate's, and an application sharing the
// schema would read claimd's rows as its own (or claimd its).
const migrationsTable = "claimd_schema_migrations"

// legacyMigrationsTable is where claimd 0.1 recorded its migrations, with
// the same columns.
const legacyMigrationsTable = "schema_migrations"

// legacySchema is where claimd 0.1 put its tables: the database's default.
const legacySchema = "public"

// Migrate brings the default schema (DefaultSchema) of the database at url
// up to SchemaVersion. See MigrateWith.
func Migrate(ctx context.Context, url string) error {
	_, err := MigrateWith(ctx, Config{URL: url})
	return err
}

// MigrateWith brings cfg.Schema of the database at cfg.URL up to
// SchemaVersion, creating the schema when it is missing, and creates the
// audit partitions of this month and the next three. It reports which
// migrations it applied. It is what `claimd migrate` runs, and what New
// runs with Config.Migrate.
//
// The whole run holds a session-level pg_advisory_lock (schemaLockKey), so
// replicas starting together migrate one after the other: the first applies
// the pending files, the others find them recorded. Each migration runs in
// its own transaction together with its claimd_schema_migrations row, so a
// failed migration leaves no half-applied schema. MigrateWith refuses a
// schema migrated by a newer binary (downgrades are not supported).
//
// A schema that claimd 0.1 migrated (its versions in schema_migrations,
// with claimd's migration names) has those versions carried over to
// claimd_schema_migrations; schema_migrations is left as it is. A schema
// that claimd never migrated is refused while public holds claimd 0.1's
// tables: serving from an empty schema would forget every claim they hold.
func MigrateWith(ctx context.Context, cfg Config) (migrations.Result, error) {
	pcfg, err := poolConfig(cfg)
	if err != nil {
		return migrations.Result{}, err
	}
	return migrate(ctx, pcfg.ConnConfig, cmp.Or(cfg.Schema, DefaultSchema))
}

// migrate is MigrateWith over a parsed configuration whose search_path is
// schema (New passes its own).
func migrate(ctx context.Context, cfg *pgx.ConnConfig, schema string) (migrations.Result, error) {
	var res migrations.Result
	ms, err := loadMigrations()
	if err != nil {
		return res, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return res, fail(ctx, "migrate: connect", err)
	}
	// Closing the session also releases the advisory lock, whatever happened.
	// The close itself is bounded: a dead server must not hold up the caller.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()

	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, schemaLockKey); err != nil {
		return res, fail(ctx, "migrate: lock", err)
	}
	if res.Adopted, err = prepareSchema(ctx, conn, schema, ms); err != nil {
		return res, err
	}
	table := pgx.Identifier{schema, migrationsTable}.Sanitize()
	applied := map[int]bool{}
	rows, _ := conn.Query(ctx, `SELECT version FROM `+table)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return res, fail(ctx, "migrate: read "+migrationsTable, err)
	}
	for _, v := range versions {
		applied[int(v)] = true
		if int(v) > len(ms) {
			return res, fmt.Errorf("postgres: migrate: schema %s is at version %d, newer than this binary's %d", schema, v, len(ms))
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
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		}); err != nil {
			return res, fail(ctx, "migrate "+m.Name, err)
		}
		res.Applied = append(res.Applied, m)
	}
	res.Version = ms[len(ms)-1].Version
	// Wall clock: provisioning storage ahead of time decides nothing.
	return res, ensureAuditPartitions(ctx, conn, time.Now(), partitionsAhead)
}

// prepareSchema makes sure schema and its claimd_schema_migrations exist.
// When it creates the table it carries over the versions claimd 0.1
// recorded in the schema (and returns them), or refuses a new schema while
// public holds claimd 0.1's tables. It runs under the schema lock.
func prepareSchema(ctx context.Context, conn *pgx.Conn, schema string, ms []migrations.Migration) ([]int, error) {
	table := pgx.Identifier{schema, migrationsTable}.Sanitize()
	var schemaExists, tracked bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), to_regclass($2) IS NOT NULL`,
		schema, table).Scan(&schemaExists, &tracked); err != nil {
		return nil, fail(ctx, "migrate: look for schema "+schema, err)
	}
	if tracked {
		return nil, nil
	}
	adopted, err := legacyVersions(ctx, conn, schema, ms)
	if err != nil {
		return nil, err
	}
	if adopted == nil && schema != legacySchema {
		inPublic, err := legacyVersions(ctx, conn, legacySchema, ms)
		if err != nil {
			return nil, err
		}
		if inPublic != nil {
			return nil, fmt.Errorf("postgres: migrate: schema %s has no claimd tables, but schema public has claimd 0.1's (at version %d): "+
				"set the schema to public (claimd --postgres-schema public) to keep serving from them; an empty schema would forget every claim they hold",
				schema, inPublic[len(inPublic)-1])
		}
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Created only when missing: CREATE SCHEMA IF NOT EXISTS needs the
		// database's CREATE privilege even when the schema exists, and a
		// DBA may have made it for a role that lacks that privilege.
		if !schemaExists {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+table+` (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		if adopted == nil {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+table+` (version, name, applied_at)
			SELECT version, name, applied_at FROM `+pgx.Identifier{schema, legacyMigrationsTable}.Sanitize())
		return err
	})
	if err != nil {
		return nil, fail(ctx, "migrate: create "+table, err)
	}
	return adopted, nil
}

// legacyVersions returns the versions claimd 0.1 recorded in schema's
// schema_migrations, or nil when that table is not claimd's: missing, of
// another shape (Rails's has no name column, golang-migrate's neither), or
// holding a row that is not one of this binary's migrations.
func legacyVersions(ctx context.Context, conn *pgx.Conn, schema string, ms []migrations.Migration) ([]int, error) {
	rows, _ := conn.Query(ctx, `SELECT version::integer, name::text FROM `+
		pgx.Identifier{schema, legacyMigrationsTable}.Sanitize()+` ORDER BY version`)
	type row struct {
		Version int32
		Name    string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	switch sqlState(err) {
	case "":
	case codeUndefinedTable, codeUndefinedColumn, codeInvalidSchemaName, codeInsufficientPrivilege,
		codeInvalidTextRepresentation, codeNumericOutOfRange:
		return nil, nil // not claimd's table: nothing to carry over
	default:
		return nil, fail(ctx, "migrate: read "+schema+"."+legacyMigrationsTable, err)
	}
	if len(got) == 0 {
		return nil, nil
	}
	versions := make([]int, len(got))
	for i, r := range got {
		if int(r.Version) != i+1 || i >= len(ms) || ms[i].Name != r.Name {
			return nil, nil
		}
		versions[i] = i + 1
	}
	return versions, nil
}
