package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// transitionAudit is an audit_log row of a transition: its target state and
// whether an earlier holder's effect fence supplied its result.
type transitionAudit struct {
	ToState         string
	EffectRecovered bool
}

func readTransitionAudit(t *testing.T, db *sql.DB, k string) []transitionAudit {
	return queryAll(t, db, func(a *transitionAudit) []any { return []any{&a.ToState, &a.EffectRecovered} },
		`SELECT to_state, effect_recovered FROM audit_log WHERE key = ? AND op = 'transition' ORDER BY id`, k)
}

// queryAll runs query and scans each row into a T through the pointers
// fields gives for it.
func queryAll[T any](t *testing.T, db *sql.DB, fields func(*T) []any, query string, args ...any) []T {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(fields(&v)...); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAuditRowsEffectRecovered: a settle whose result came from an earlier
// holder's effect fence says so in its audit row; its repeat writes no row,
// and every other transition's row says false.
func TestAuditRowsEffectRecovered(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	settle := func(k string, now time.Time, recovered bool) bool {
		t.Helper()
		_, changed, err := s.Transition(ctx, tiers.TransitionParams{Key: key(k), Now: now, Token: 1, SecretHash: ownerHash,
			To: tiers.StateSettled, Result: []byte("stored"), EffectRecovered: recovered})
		if err != nil {
			t.Fatalf("Transition(%q, →SETTLED, effect recovered %v) error = %v", k, recovered, err)
		}
		return changed
	}
	for _, k := range []string{"evt_recovered", "evt_plain"} {
		mustClaim(t, s, claimAt(k, t0))
		mustTransition(t, s, k, 1, t0.Add(time.Second), tiers.StateProcessing, nil)
	}
	if !settle("evt_recovered", t0.Add(2*time.Second), true) {
		t.Fatal("Transition(evt_recovered →SETTLED) changed = false, want true")
	}
	if settle("evt_recovered", t0.Add(3*time.Second), true) {
		t.Fatal("Transition(evt_recovered →SETTLED) repeated: changed = true, want false")
	}
	settle("evt_plain", t0.Add(2*time.Second), false)

	tests := []struct {
		desc string
		key  string
		want []transitionAudit
	}{
		{"recovered: the settle's row says so, its repeat adds none", "evt_recovered",
			[]transitionAudit{{"PROCESSING", false}, {"SETTLED", true}}},
		{"a settle of the holder's own result", "evt_plain",
			[]transitionAudit{{"PROCESSING", false}, {"SETTLED", false}}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, readTransitionAudit(t, s.r, tc.key)); diff != "" {
				t.Errorf("transition rows of %s in audit_log (-want +got):\n%s", tc.key, diff)
			}
		})
	}
}

// TestUpgradeAuditRowsNotRecovered: audit rows written before
// 0004_effect_recovered read false after it, and the column refuses
// anything but 0 and 1 (audit_log is STRICT: no boolean type of its own).
func TestUpgradeAuditRowsNotRecovered(t *testing.T) {
	path := tempPath(t)
	ctx := context.Background()
	db, err := sql.Open("sqlite", dsn(path, nil))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "0004_effect_recovered" {
			break
		}
		if _, err := applyMigration(ctx, conn, m); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO audit_log (at, namespace, provider, key, op, outcome, from_state, to_state, token, holder)
		VALUES (?, 'billing', 'stripe', 'evt_v3', 'transition', 'CHANGED', 'PROCESSING', 'SETTLED', 1, 'pod-a')`, t0.UnixMicro()); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	db.Close()

	s := newStore(t, path)
	if got := s.Migrated().Version; got != SchemaVersion() {
		t.Fatalf("migrated to %d, want %d", got, SchemaVersion())
	}
	if diff := cmp.Diff([]transitionAudit{{"SETTLED", false}}, readTransitionAudit(t, s.r, "evt_v3")); diff != "" {
		t.Errorf("audit row written before the migration (-want +got):\n%s", diff)
	}
	if _, err := s.w.Exec(`INSERT INTO audit_log (at, namespace, provider, key, op, outcome, effect_recovered)
		VALUES (?, 'billing', 'stripe', 'evt_bad', 'transition', 'CHANGED', 2)`, t0.UnixMicro()); err == nil {
		t.Error("audit_log accepted effect_recovered = 2, want the CHECK to refuse it")
	}
}
