package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one versioned schema change: migrations/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations lists the embedded migrations in version order. Versions must
// run 1, 2, 3 … without gaps, so that a database's highest applied version
// says exactly which files it has seen.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("sqlite: migration %s: name must be NNNN_name.sql", base)
		}
		body, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("sqlite: migration %s: version %d, want %d (no gaps or repeats)", m.name, m.version, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the highest migration version embedded in this binary.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate brings db's schema up to SchemaVersion, applying each embedded
// migration not yet recorded in schema_migrations. Each migration runs in its
// own BEGIN IMMEDIATE transaction together with its schema_migrations row, so
// two processes migrating one file at once apply every migration exactly once,
// and a failed migration leaves no half-applied schema. Migrate refuses a
// database migrated by a newer binary (downgrades are not supported).
func Migrate(ctx context.Context, db *sql.DB) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("sqlite: migrate: create schema_migrations: %w", err)
	}
	var have sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("sqlite: migrate: read schema version: %w", err)
	}
	if int(have.Int64) > len(ms) {
		return fmt.Errorf("sqlite: migrate: database schema version %d is newer than this binary's %d", have.Int64, len(ms))
	}
	for _, m := range ms {
		if err := applyMigration(ctx, conn, m); err != nil {
			return fmt.Errorf("sqlite: migrate %s: %w", m.name, err)
		}
	}
	return nil
}

// applyMigration applies m unless it is already recorded; the check and the
// change happen under one write lock.
func applyMigration(ctx context.Context, conn *sql.Conn, m migration) (err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// A cancelled ctx must not leave the connection inside the
			// transaction. The rollback's own error adds nothing: either the
			// transaction is gone already or the connection is broken, and
			// the pool discards a broken connection.
			conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}()
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		_, err := conn.ExecContext(ctx, "COMMIT")
		return err
	}
	if _, err := conn.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	// applied_at is bookkeeping for operators, not a decision: the wall clock
	// is the right one here.
	if _, err := conn.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.version, m.name, time.Now().UnixMicro()); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}
