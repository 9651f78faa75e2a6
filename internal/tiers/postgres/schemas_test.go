package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// migrateSchema migrates schema of the database at url and returns what
// MigrateWith reported.
func migrateSchema(t *testing.T, url, schema string) string {
	t.Helper()
	res, err := postgres.MigrateWith(context.Background(), postgres.Config{URL: url, Schema: schema})
	if err != nil {
		t.Fatalf("MigrateWith(schema %q) error = %v", schema, err)
	}
	return res.String()
}

// openSchema opens a Store on schema of the database at url.
func openSchema(t *testing.T, url, schema string) *postgres.Store {
	t.Helper()
	s, err := postgres.New(context.Background(), postgres.Config{URL: url, Schema: schema})
	if err != nil {
		t.Fatalf("New(schema %q) error = %v", schema, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// regclass reports whether the table named (schema-qualified) exists.
func regclass(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string) bool {
	t.Helper()
	var exists bool
	if err := db.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

// TestSchemasSideBySide: two deployments in two schemas of one database
// claim the same keys, through group-commit batches, and each sees only
// its own rows and audit entries; each runs its own janitor.
func TestSchemasSideBySide(t *testing.T) {
	url := freshDatabase(t)
	for _, schema := range []string{"tenant_a", "tenant_b"} {
		if got, want := migrateSchema(t, url, schema), fmt.Sprintf("applied 0001_claims, 0002_audit, 0003_lease_secret, 0004_entities, 0005_effect_recovered, 0006_audit_actor, 0007_audit_key; now at version %d", postgres.SchemaVersion()); got != want {
			t.Errorf("MigrateWith(%s) = %q, want %q", schema, got, want)
		}
	}
	a, b := openSchema(t, url, "tenant_a"), openSchema(t, url, "tenant_b")
	clk := clock.NewFake(time.Now())
	const n = 64
	claimAll := func(s *postgres.Store, holder string) map[tiers.Outcome]int {
		t.Helper()
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			outcomes = map[tiers.Outcome]int{}
		)
		for i := range n {
			wg.Go(func() {
				p := tiers.ClaimParams{Key: key(fmt.Sprintf("evt_%d", i)), Now: clk.Now(), Lease: lease, TTL: ttl, Holder: holder}
				res, err := s.Claim(context.Background(), p)
				if err != nil {
					t.Errorf("Claim(%q) by %s error = %v", p.Key.Key, holder, err)
					return
				}
				mu.Lock()
				outcomes[res.Outcome]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return outcomes
	}
	if got := claimAll(a, "pod-a"); got[tiers.OutcomeAcquired] != n {
		t.Fatalf("claims in tenant_a: %v, want %d ACQUIRED", got, n)
	}
	// The same keys in tenant_b are new there: it sees none of tenant_a's rows.
	if got := claimAll(b, "pod-b"); got[tiers.OutcomeAcquired] != n {
		t.Fatalf("the same claims in tenant_b: %v, want %d ACQUIRED (tenant_a's rows must not be visible)", got, n)
	}
	for schema, s := range map[string]*postgres.Store{"tenant_a": a, "tenant_b": b} {
		rec, err := s.Get(context.Background(), key("evt_0"))
		if err != nil {
			t.Fatalf("%s: Get(evt_0) error = %v", schema, err)
		}
		if want := "pod-" + schema[len(schema)-1:]; rec.Holder != want {
			t.Errorf("%s: Get(evt_0).Holder = %q, want %q", schema, rec.Holder, want)
		}
		if claims, _, err := s.Stats(context.Background()); err != nil || claims != n {
			t.Errorf("%s: Stats() claims = %d, %v; want %d", schema, claims, err, n)
		}
		var audited int
		if err := openDB(t, url, schema).QueryRow(context.Background(),
			`SELECT count(*) FROM audit_log WHERE holder = $1`, "pod-"+schema[len(schema)-1:]).Scan(&audited); err != nil || audited != n {
			t.Errorf("%s: audit rows of its own holder = %d, %v; want %d", schema, audited, err, n)
		}
	}
	if _, err := b.Get(context.Background(), key("evt_only_a")); !errors.Is(err, tiers.ErrNotFound) {
		t.Fatalf("Get before any claim = %v, want ErrNotFound", err)
	}
	if _, err := a.Claim(context.Background(), tiers.ClaimParams{Key: key("evt_only_a"), Now: clk.Now(), Lease: lease, TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(context.Background(), key("evt_only_a")); !errors.Is(err, tiers.ErrNotFound) {
		t.Errorf("tenant_b: Get(a key claimed in tenant_a only) = %v, want ErrNotFound", err)
	}
	db := openDB(t, url, "public")
	if regclass(t, db, "public.claims") || regclass(t, db, "public.claimd_schema_migrations") {
		t.Errorf("public has claimd tables; every table belongs in its deployment's schema")
	}

	// Each schema's janitor lock is its own.
	releaseA, ok, err := a.TryJanitorLock(context.Background())
	if err != nil || !ok {
		t.Fatalf("tenant_a: TryJanitorLock() = %v, %v; want the lock", ok, err)
	}
	defer releaseA()
	releaseB, ok, err := b.TryJanitorLock(context.Background())
	if err != nil || !ok {
		t.Fatalf("tenant_b: TryJanitorLock() while tenant_a's janitor runs = %v, %v; want its own lock", ok, err)
	}
	releaseB()
}

func TestJanitorLockKey(t *testing.T) {
	if got, want := postgres.JanitorLockKey("public"), int64(27985188330759274); got != want {
		t.Errorf("JanitorLockKey(public) = %d, want claimd 0.1's %d so old and new replicas take turns", got, want)
	}
	if postgres.JanitorLockKey("") != postgres.JanitorLockKey(postgres.DefaultSchema) {
		t.Errorf("JanitorLockKey(\"\") is not the default schema's")
	}
	if postgres.JanitorLockKey("tenant_a") == postgres.JanitorLockKey("tenant_b") {
		t.Errorf("two schemas share a janitor lock key")
	}
}

// TestDefaultSchemaIsClaimd: with no schema configured, the tables and the
// migrations table go to schema claimd, never public, and a second run says
// there was nothing to do.
func TestDefaultSchemaIsClaimd(t *testing.T) {
	url := freshDatabase(t)
	res, err := postgres.MigrateWith(context.Background(), postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range res.Applied {
		names = append(names, m.Name)
	}
	if diff := cmp.Diff([]string{"0001_claims", "0002_audit", "0003_lease_secret", "0004_entities", "0005_effect_recovered", "0006_audit_actor", "0007_audit_key"}, names); diff != "" || res.Version != postgres.SchemaVersion() {
		t.Errorf("MigrateWith(fresh) applied (-want +got):\n%s\nversion %d, want %d", diff, res.Version, postgres.SchemaVersion())
	}
	db := openDB(t, url, "public")
	for name, want := range map[string]bool{
		"claimd.claims": true, "claimd.audit_log": true, "claimd.claimd_schema_migrations": true,
		"public.claims": false, "public.schema_migrations": false, "public.claimd_schema_migrations": false,
	} {
		if got := regclass(t, db, name); got != want {
			t.Errorf("table %s exists = %v, want %v", name, got, want)
		}
	}
	if got, want := migrateSchema(t, url, ""), fmt.Sprintf("up to date at version %d", postgres.SchemaVersion()); got != want {
		t.Errorf("MigrateWith(again) = %q, want %q", got, want)
	}
}

// claimd01 lays out public as claimd 0.1 left it (its tables in public, its
// versions in schema_migrations), holding one claim of key evt_01.
func claimd01(t *testing.T, url string) {
	t.Helper()
	migrateSchema(t, url, "public")
	s := openSchema(t, url, "public")
	if _, err := s.Claim(context.Background(), tiers.ClaimParams{Key: key("evt_01"), Now: time.Now(), Lease: lease, TTL: ttl, Holder: "v0.1"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Back to the schema 0.1 left: its two migrations, in its table.
	for _, q := range []string{
		`ALTER TABLE audit_log DROP COLUMN principal, DROP COLUMN transport, DROP COLUMN effect_recovered`,
		`ALTER TABLE claims DROP COLUMN salt, DROP COLUMN secret_hash,
			DROP COLUMN lifecycle, DROP COLUMN entity_id, DROP COLUMN event_type, DROP COLUMN entity_to`,
		`DROP TABLE entity_events, entities, deferrals`,
		`DELETE FROM claimd_schema_migrations WHERE version > 2`,
		`ALTER TABLE claimd_schema_migrations RENAME TO schema_migrations`,
	} {
		if _, err := openDB(t, url, "public").Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestMigrateTakesOverClaimd01: a deployment that keeps its tables in
// public carries claimd 0.1's versions over and keeps serving its claims.
func TestMigrateTakesOverClaimd01(t *testing.T) {
	url := freshDatabase(t)
	claimd01(t, url)
	if _, err := postgres.New(context.Background(), postgres.Config{URL: url, Schema: "public"}); err == nil || !strings.Contains(err.Error(), "run claimd migrate") {
		t.Fatalf("New(public, not migrated since 0.1) error = %v, want one telling to run claimd migrate", err)
	}
	got := migrateSchema(t, url, "public")
	want := fmt.Sprintf("took over versions 1, 2 recorded in schema_migrations by claimd 0.1; applied 0003_lease_secret, 0004_entities, 0005_effect_recovered, 0006_audit_actor, 0007_audit_key; now at version %d", postgres.SchemaVersion())
	if got != want {
		t.Errorf("MigrateWith(public of claimd 0.1) = %q, want %q", got, want)
	}
	s := openSchema(t, url, "public")
	if rec, err := s.Get(context.Background(), key("evt_01")); err != nil || rec.Holder != "v0.1" {
		t.Errorf("Get(evt_01) after the upgrade = %+v, %v; want claimd 0.1's claim", rec, err)
	}
	if !regclass(t, openDB(t, url, "public"), "public.schema_migrations") {
		t.Errorf("the upgrade dropped schema_migrations; it must leave it for the operator")
	}
}

// TestMigrateRefusesNewSchemaBesideClaimd01: upgrading a claimd 0.1
// deployment without naming public must not start an empty schema beside
// the claims it holds: every retry of those events would be ACQUIRED again.
func TestMigrateRefusesNewSchemaBesideClaimd01(t *testing.T) {
	url := freshDatabase(t)
	claimd01(t, url)
	_, err := postgres.MigrateWith(context.Background(), postgres.Config{URL: url})
	if err == nil || !strings.Contains(err.Error(), "--postgres-schema public") {
		t.Fatalf("MigrateWith(default schema beside claimd 0.1's tables) error = %v, want one naming --postgres-schema public", err)
	}
	var exists bool
	if err := openDB(t, url, "public").QueryRow(context.Background(), `SELECT to_regnamespace('claimd') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Errorf("refused migrate created schema claimd (%v, %v); it must create nothing", exists, err)
	}
}

// TestMigrateLeavesOtherToolsTablesAlone: an application's Rails or
// golang-migrate schema_migrations in the same schema is neither taken
// for claimd's nor touched.
func TestMigrateLeavesOtherToolsTablesAlone(t *testing.T) {
	tests := []struct {
		desc, ddl, rows string
	}{
		{"Rails", `CREATE TABLE schema_migrations (version character varying PRIMARY KEY)`,
			`INSERT INTO schema_migrations VALUES ('20240101000000'), ('20240202000000')`},
		{"golang-migrate", `CREATE TABLE schema_migrations (version bigint PRIMARY KEY, dirty boolean NOT NULL)`,
			`INSERT INTO schema_migrations VALUES (1, false), (2, false)`},
		{"claimd's shape, another application's names", `CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
			`INSERT INTO schema_migrations (version, name) VALUES (1, 'create_users'), (2, 'create_orders')`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			url := freshDatabase(t)
			db := openDB(t, url, "public")
			for _, sql := range []string{tc.ddl, tc.rows} {
				if _, err := db.Exec(context.Background(), sql); err != nil {
					t.Fatal(err)
				}
			}
			want := fmt.Sprintf("applied 0001_claims, 0002_audit, 0003_lease_secret, 0004_entities, 0005_effect_recovered, 0006_audit_actor, 0007_audit_key; now at version %d", postgres.SchemaVersion())
			if got := migrateSchema(t, url, "public"); got != want {
				t.Errorf("MigrateWith(public beside %s) = %q, want %q", tc.desc, got, want)
			}
			var n int
			if err := db.QueryRow(context.Background(), `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != 2 {
				t.Errorf("%s's schema_migrations has %d rows (%v), want its own 2", tc.desc, n, err)
			}
			// Nor is it claimd 0.1's: a new schema beside it is not refused.
			migrateSchema(t, url, "claimd")
		})
	}
}
