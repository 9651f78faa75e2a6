package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/tiers/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// loadMigrations lists the embedded migrations in version order.
func loadMigrations() ([]migrations.Migration, error) {
	ms, err := migrations.Load(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return ms, nil
}

// SchemaVersion is the highest migration version embedded in this binary.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Migrate brings db's schema up to SchemaVersion, applying each embedded
// migration not yet recorded in schema_migrations. Each migration runs in its
// own BEGIN IMMEDIATE transaction together with its schema_migrations row, so
// two processes migrating one file at once apply every migration exactly once,
// and a failed migration leaves no half-applied schema. Migrate refuses a
// database migrated by a newer binary (downgrades are not supported).
func Migrate(ctx context.Context, db *sql.DB) error {
	_, err := migrate(ctx, db)
	return err
}

// migrate is Migrate, reporting which migrations it applied.
func migrate(ctx context.Context, db *sql.DB) (migrations.Result, error) {
	var res migrations.Result
	ms, err := loadMigrations()
	if err != nil {
		return res, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("sqlite: migrate: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return res, fmt.Errorf("sqlite: migrate: create schema_migrations: %w", err)
	}
	var have sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT max(version) FROM schema_migrations`).Scan(&have); err != nil {
		return res, fmt.Errorf("sqlite: migrate: read schema version: %w", err)
	}
	if int(have.Int64) > len(ms) {
		return res, fmt.Errorf("sqlite: migrate: database schema version %d is newer than this binary's %d", have.Int64, len(ms))
	}
	for _, m := range ms {
		applied, err := applyMigration(ctx, conn, m)
		if err != nil {
			return res, fmt.Errorf("sqlite: migrate %s: %w", m.Name, err)
		}
		if applied {
			res.Applied = append(res.Applied, m)
		}
	}
	res.Version = ms[len(ms)-1].Version
	return res, nil
}

// applyMigration applies m unless it is already recorded, and reports
// whether it did; the check and the change happen under one write lock.
func applyMigration(ctx context.Context, conn *sql.Conn, m migrations.Migration) (applied bool, err error) {
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return false, err
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
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		_, err := conn.ExecContext(ctx, "COMMIT")
		return false, err
	}
	if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
		return false, err
	}
	// applied_at is bookkeeping for operators, not a decision: the wall clock
	// is the right one here.
	if _, err := conn.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, time.Now().UnixMicro()); err != nil {
		return false, err
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err == nil, err
}
