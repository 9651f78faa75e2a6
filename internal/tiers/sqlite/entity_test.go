package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

func lifecycleClaim(k string, now time.Time, ev tiers.EntityEvent) tiers.ClaimParams {
	p := claimAt(k, now)
	p.Entity = &ev
	return p
}

var (
	evProcessing = tiers.EntityEvent{Lifecycle: "payment_intent", EntityID: "pi_1", EventType: "payment_intent.processing",
		Initial: "created", From: []string{"created"}, To: "processing"}
	evSucceeded = tiers.EntityEvent{Lifecycle: "payment_intent", EntityID: "pi_1", EventType: "payment_intent.succeeded",
		Initial: "created", From: []string{"processing"}, Wait: []string{"created"}, To: "succeeded"}
)

// TestEntityAuditRows: a DEFERRED or SUPERSEDED claim is audited like any
// other claim outcome, with no state after it (there is no record), and the
// settle that advances the entity is the transition's usual row.
func TestEntityAuditRows(t *testing.T) {
	s := newStore(t, tempPath(t))
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	if res := mustClaim(t, s, lifecycleClaim("evt_s", at(0), evSucceeded)); res.Outcome != tiers.OutcomeDeferred {
		t.Fatalf("Claim(succeeded first) = %v, want DEFERRED", res.Outcome)
	}
	p := mustClaim(t, s, lifecycleClaim("evt_p", at(time.Second), evProcessing))
	mustTransition(t, s, "evt_p", p.Record.Token, at(2*time.Second), tiers.StateProcessing, nil)
	mustTransition(t, s, "evt_p", p.Record.Token, at(3*time.Second), tiers.StateSettled, []byte("ok"))
	again := evProcessing
	again.EventType = "payment_intent.processing.again"
	if res := mustClaim(t, s, lifecycleClaim("evt_p2", at(4*time.Second), again)); res.Outcome != tiers.OutcomeSuperseded {
		t.Fatalf("Claim(processing again) = %v, want SUPERSEDED", res.Outcome)
	}
	for k, want := range map[string][]auditEntry{
		"evt_s": {{at(0), "claim", "DEFERRED", "", "", "", 0, "pod-a"}},
		"evt_p": {
			{at(time.Second), "claim", "ACQUIRED", "NEW", "", "RECEIVED", 1, "pod-a"},
			{at(2 * time.Second), "transition", "CHANGED", "", "RECEIVED", "PROCESSING", 1, "pod-a"},
			{at(3 * time.Second), "transition", "CHANGED", "", "PROCESSING", "SETTLED", 1, "pod-a"},
		},
		"evt_p2": {{at(4 * time.Second), "claim", "SUPERSEDED", "", "", "", 0, "pod-a"}},
	} {
		if diff := cmp.Diff(want, readAudit(t, s, k)); diff != "" {
			t.Errorf("audit_log of %s (-want +got):\n%s", k, diff)
		}
	}
}

// TestUpgradeKeepsRecordsWithoutEntities: a database written by a binary
// before lifecycles (schema 2) opens migrated, and its records read back
// and settle as records of no entity.
func TestUpgradeKeepsRecordsWithoutEntities(t *testing.T) {
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
	for _, m := range ms[:2] {
		if _, err := applyMigration(ctx, conn, m); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO claims (namespace, provider, key, state, token, version, attempt, reason,
		holder, first_seen_at, lease_expires_at, window_expires_at, updated_at, salt, secret_hash)
		VALUES ('billing', 'stripe', 'evt_v2', 'PROCESSING', 1, 2, 1, 'NEW', 'pod-a', ?, ?, ?, ?, ?, ?)`,
		t0.UnixMicro(), t0.Add(lease).UnixMicro(), t0.Add(ttl).UnixMicro(), t0.UnixMicro(), ownerSalt, ownerHash); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	db.Close()

	s := newStore(t, path)
	if got := s.Migrated().Version; got != SchemaVersion() {
		t.Fatalf("migrated to %d, want %d", got, SchemaVersion())
	}
	rec, err := s.Get(ctx, key("evt_v2"))
	if err != nil || rec.State != tiers.StateProcessing || rec.Lifecycle != "" || rec.EntityID != "" || rec.EventType != "" {
		t.Fatalf("Get(v2 record) = %+v, %v; want PROCESSING with no entity", rec, err)
	}
	if got := mustTransition(t, s, "evt_v2", 1, t0.Add(time.Second), tiers.StateSettled, []byte("ok")); got.State != tiers.StateSettled {
		t.Fatalf("Transition(v2 record →SETTLED) state = %v", got.State)
	}
}

// TestUpgradeGivesEntityRowsAnExpiry: entities and deferral rows written
// before they had an expiry (schema 5) get one that prunes none of them
// before its window: an entity lives as long as its stored records'
// windows, or goes at once with none left; a deferral row whose window
// was not recorded is kept 400 days past its last delivery.
func TestUpgradeGivesEntityRowsAnExpiry(t *testing.T) {
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
	for _, m := range ms[:5] {
		if _, err := applyMigration(ctx, conn, m); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
	}
	for _, q := range []string{
		`INSERT INTO claims (namespace, provider, key, state, token, version, attempt, reason, holder,
			first_seen_at, lease_expires_at, window_expires_at, updated_at, salt, secret_hash, lifecycle, entity_id, event_type, entity_to)
			VALUES ('billing', 'stripe', 'evt_a', 'SETTLED', 1, 3, 1, 'NEW', 'pod-a', ?1, ?2, ?3, ?1, x'00', x'00', 'payment', 'pi_a', 'created', 'new')`,
		`INSERT INTO entities (namespace, provider, lifecycle, entity_id, state, version, updated_at)
			VALUES ('billing', 'stripe', 'payment', 'pi_a', 'new', 1, ?1), ('billing', 'stripe', 'payment', 'pi_orphan', 'new', 1, ?1)`,
		`INSERT INTO deferrals (namespace, provider, key, lifecycle, entity_id, event_type, superseded, count,
			first_seen_at, last_seen_at, awaiting, entity_state)
			VALUES ('billing', 'stripe', 'evt_d', 'payment', 'pi_b', 'succeeded', 0, 1, ?1, ?1, '["processing"]', 'created')`,
	} {
		if _, err := conn.ExecContext(ctx, q, t0.UnixMicro(), t0.Add(lease).UnixMicro(), t0.Add(ttl).UnixMicro()); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	db.Close()

	s := newStore(t, path)
	for _, tc := range []struct {
		desc   string
		cutoff time.Time
		want   tiers.Pruned
	}{
		{"before every window: the entity with no record left", t0, tiers.Pruned{Entities: 1}},
		{"at the record's window end", t0.Add(ttl), tiers.Pruned{Entities: 1}},
		{"past the record's window", t0.Add(ttl + time.Microsecond), tiers.Pruned{Claims: 1, Entities: 2}},
		{"400 days after the deferral", t0.Add(400*24*time.Hour + time.Microsecond), tiers.Pruned{Claims: 1, Entities: 2, Deferrals: 1}},
	} {
		got, err := s.CountPrunable(ctx, tc.cutoff)
		if err != nil || got != tc.want {
			t.Errorf("%s: CountPrunable() = %+v, %v; want %+v", tc.desc, got, err, tc.want)
		}
	}
}

// TestStepInsideEntitySettle: Config.Step (the fault suite's crash points)
// is called before and after the entity row's update of a settle, both
// inside its transaction: at either step another connection still reads
// the entity as it was. No other write calls it.
func TestStepInsideEntitySettle(t *testing.T) {
	type seen struct {
		Step, Key, State string
		Version          uint64
	}
	var steps []seen
	var s *Store
	path := tempPath(t)
	s, err := New(context.Background(), Config{Path: path, Step: func(step string, k tiers.Key) {
		e, err := s.GetEntity(context.Background(), entityKeyOf(k, evProcessing.Lifecycle, evProcessing.EntityID))
		if err != nil {
			t.Errorf("GetEntity at %s: %v", step, err)
		}
		steps = append(steps, seen{step, k.Key, e.State, e.Version})
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	plain := mustClaim(t, s, claimAt("evt_plain", t0))
	mustTransition(t, s, "evt_plain", plain.Record.Token, t0, tiers.StateProcessing, nil)
	mustTransition(t, s, "evt_plain", plain.Record.Token, t0, tiers.StateSettled, []byte("ok"))
	p := mustClaim(t, s, lifecycleClaim("evt_p", t0, evProcessing))
	mustTransition(t, s, "evt_p", p.Record.Token, t0, tiers.StateProcessing, nil)
	if len(steps) != 0 {
		t.Fatalf("steps before the entity settle: %v", steps)
	}
	mustTransition(t, s, "evt_p", p.Record.Token, t0.Add(time.Second), tiers.StateSettled, []byte("ok"))
	want := []seen{{"entity-settle-before", "evt_p", "created", 0}, {"entity-settle-after", "evt_p", "created", 0}}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	e, err := s.GetEntity(context.Background(), entityKeyOf(p.Record.Key, evProcessing.Lifecycle, evProcessing.EntityID))
	if err != nil || e.State != "processing" || e.Version != 1 {
		t.Errorf("after the commit: %+v, %v; want processing, version 1", e, err)
	}
}
