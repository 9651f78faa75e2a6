package effects_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite"

	"github.com/claimd/claimd/internal/effects"
	"github.com/claimd/claimd/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// scenarioSchemas reads effects.schema of the guards' shared scenarios.
func scenarioSchemas(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "clients", "guardspec", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Effects struct {
			Schema map[string]string `json:"schema"`
		} `json:"effects"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("scenarios.json: %v", err)
	}
	if len(doc.Effects.Schema) == 0 {
		t.Fatal("scenarios.json has no effects.schema")
	}
	return doc.Effects.Schema
}

// TestSchemaMatchesScenarios: every dialect's DDL is the one the guards
// execute, and the two know the same dialects.
func TestSchemaMatchesScenarios(t *testing.T) {
	want := scenarioSchemas(t)
	names := slices.Sorted(maps.Keys(want))
	if got := slices.Sorted(slices.Values(effects.Dialects())); !slices.Equal(got, names) {
		t.Errorf("Dialects() = %v, want the dialects of scenarios.json %v", got, names)
	}
	for _, d := range names {
		got, err := effects.Schema(d)
		if err != nil {
			t.Errorf("Schema(%q) error = %v", d, err)
			continue
		}
		if diff := cmp.Diff(want[d], got); diff != "" {
			t.Errorf("Schema(%q) differs from scenarios.json's effects.schema.%s (-want +got):\n%s", d, d, diff)
		}
	}
}

func TestSchemaUnknownDialect(t *testing.T) {
	for _, d := range []string{"", "postgresql", "Postgres", "oracle"} {
		_, err := effects.Schema(d)
		var ue *effects.UnknownDialectError
		if !errors.As(err, &ue) || ue.Dialect != d || !strings.Contains(err.Error(), "postgres, sqlite, mysql") {
			t.Errorf("Schema(%q) error = %v, want an UnknownDialectError naming postgres, sqlite, mysql", d, err)
		}
	}
}

// execer is what the DDL checks need of a database.
type execer func(ctx context.Context, sql string, args ...any) (rowsAffected int64, err error)

// checkFence runs the DDL twice (IF NOT EXISTS: a guard runs it once per
// pool), then the guard's fence insert twice for one delivery: the first
// inserts its row, the second none.
func checkFence(t *testing.T, exec execer, ddl, insert string) {
	t.Helper()
	ctx := context.Background()
	for i := range 2 {
		if _, err := exec(ctx, ddl); err != nil {
			t.Fatalf("DDL, run %d: %v", i+1, err)
		}
	}
	for i, want := range []int64{1, 0} {
		n, err := exec(ctx, insert, "billing", "stripe", "evt_1", 7)
		if err != nil || n != want {
			t.Fatalf("fence insert %d = %d rows, %v; want %d", i+1, n, err, want)
		}
	}
}

// TestSchemaRunsOnSQLite: the SQLite DDL creates a fence that admits one
// row per delivery.
func TestSchemaRunsOnSQLite(t *testing.T) {
	ddl, err := effects.Schema("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "handler.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkFence(t, func(ctx context.Context, q string, args ...any) (int64, error) {
		res, err := db.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}, ddl, `INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES (?, ?, ?, ?) ON CONFLICT (namespace, provider, key) DO NOTHING`)
	var createdAt string
	if err := db.QueryRow(`SELECT created_at FROM claimd_effects`).Scan(&createdAt); err != nil || !strings.HasSuffix(createdAt, "Z") {
		t.Errorf("created_at = %q, %v; want an RFC 3339 UTC default", createdAt, err)
	}
}

// TestSchemaRunsOnPostgres: the PostgreSQL DDL creates a fence that admits
// one row per delivery, on a real server.
func TestSchemaRunsOnPostgres(t *testing.T) {
	ddl, err := effects.Schema("postgres")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.Postgres(t, func(context.Context, string) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	checkFence(t, func(ctx context.Context, q string, args ...any) (int64, error) {
		tag, err := conn.Exec(ctx, q, args...)
		return tag.RowsAffected(), err
	}, ddl, `INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, provider, key) DO NOTHING`)
}
