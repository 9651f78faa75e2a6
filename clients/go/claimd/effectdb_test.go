package claimd_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"

	"github.com/claimd/claimd/clients/go/claimd"
)

// The databases of the effect tests: a SQLite file of the test's own, and a
// PostgreSQL database cloned for the test from the binary's shared server
// (testenv starts it, or uses $CLAIMD_TEST_POSTGRES_URL; without a
// PostgreSQL the test fails, it never skips).

// effectDialects are the dialects every effect test runs on.
var effectDialects = []claimd.Dialect{claimd.DialectSQLite, claimd.DialectPostgres}

// openEffectDB opens a new, empty database of dialect d, closed when the
// test ends. The driver is one a caller of Effect would use; Effect finds
// the dialect from it.
func openEffectDB(t *testing.T, d claimd.Dialect) *sql.DB {
	t.Helper()
	var driver, dsn string
	switch d {
	case claimd.DialectSQLite:
		driver = "sqlite"
		dsn = "file:" + filepath.Join(t.TempDir(), "effects.db") + "?" +
			url.Values{"_pragma": {"busy_timeout(10000)", "journal_mode(WAL)"}}.Encode()
	case claimd.DialectPostgres:
		driver, dsn = "pgx", postgres(t)
	default:
		t.Fatalf("no test database for dialect %q", d)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after testenv's DROP DATABASE, so it runs before it.
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(context.Background()); err != nil {
		t.Fatalf("%s: %v", d, err)
	}
	return db
}

// ph is the n-th placeholder (from 1) of dialect d.
func ph(d claimd.Dialect, n int) string {
	if d == claimd.DialectPostgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// fenceRow is a row of claimd_effects.
type fenceRow struct {
	Token  uint64
	Result []byte
}

// readFence reads the fence of (namespace, provider, key); nil when there is
// none.
func readFence(ctx context.Context, db *sql.DB, d claimd.Dialect, namespace, provider, key string) (*fenceRow, error) {
	var (
		token  int64
		result []byte
	)
	err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT fencing_token, result FROM claimd_effects WHERE namespace = %s AND provider = %s AND key = %s",
		ph(d, 1), ph(d, 2), ph(d, 3)), namespace, provider, key).Scan(&token, &result)
	switch {
	case err == sql.ErrNoRows:
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &fenceRow{Token: uint64(token), Result: result}, nil
}
