package postgres_test

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// A write, once sent, answers even when its caller leaves while it runs:
// the fast tier in front learns of a write only from that answer. Before,
// a Release cancelled while its UPDATE was in the group commit committed
// unheard and left the fast tier answering IN_PROGRESS by the released
// holder for the rest of its lease (make chaos, lost-replies).

// TestSentWriteOutlivesItsCaller releases a PROCESSING record while its
// row is locked, and its holder gives up while the UPDATE waits: once the
// lock goes, the statement commits, and the holder must get the released
// record, not its context's error.
func TestSentWriteOutlivesItsCaller(t *testing.T) {
	for _, tc := range []struct {
		desc     string
		maxBatch int
	}{{"group commit", 0}, {"one statement per write", 1}} {
		t.Run(tc.desc, func(t *testing.T) {
			url := testenv.Postgres(t, postgres.Migrate)
			s, err := postgres.New(context.Background(), postgres.Config{URL: url, MaxBatch: tc.maxBatch})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			e := &env{t: t, url: url, store: s, db: openDB(t, url, postgres.DefaultSchema), clk: clock.NewFake(time.Now())}
			a := e.claim(e.params("evt_held"))
			wantOutcome(t, "Claim", a, tiers.OutcomeAcquired)
			e.transition("evt_held", a.Record.Token, tiers.StateProcessing)

			var rec tiers.Record
			err = whileLocked(t, e.db, `SELECT 1 FROM claims WHERE namespace = 'billing' AND provider = 'stripe' AND key = 'evt_held' FOR UPDATE`,
				func(ctx context.Context) (err error) {
					rec, err = s.Release(ctx, tiers.ReleaseParams{Key: key("evt_held"), Now: e.clk.Now(), Token: a.Record.Token, SecretHash: ownerHash})
					return err
				})
			if err != nil || !rec.Released || rec.Version != 3 {
				t.Fatalf("Release (its caller gone while the UPDATE ran) = released %v version %d, %v; want the released record at version 3, no error",
					rec.Released, rec.Version, err)
			}
			if got, err := s.Get(context.Background(), key("evt_held")); err != nil || !got.Released || got.Version != rec.Version {
				t.Fatalf("Get = released %v version %d, %v; want what Release answered", got.Released, got.Version, err)
			}
		})
	}
}

// TestEntitySettleOutlivesItsCaller settles an event in PROCESSING while
// its entity is locked, and its holder gives up while the settle waits:
// begun, the settle's transaction runs to its end, so the holder gets
// SETTLED and the entity advances, rather than a context error whose
// transaction might or might not have committed.
func TestEntitySettleOutlivesItsCaller(t *testing.T) {
	e := newEnv(t)
	a := e.claim(e.entityParams("evt_created", "pi_held", "created"))
	wantOutcome(t, "Claim(created)", a, tiers.OutcomeAcquired)
	e.transition("evt_created", a.Record.Token, tiers.StateProcessing)

	var rec tiers.Record
	err := whileLocked(t, e.db, `SELECT 1 FROM entities WHERE namespace = 'billing' AND provider = 'stripe'
		AND lifecycle = 'payment' AND entity_id = 'pi_held' FOR UPDATE`,
		func(ctx context.Context) (err error) {
			rec, _, err = e.store.Transition(ctx, tiers.TransitionParams{Key: key("evt_created"), Now: e.clk.Now(),
				Token: a.Record.Token, SecretHash: ownerHash, To: tiers.StateSettled, Result: []byte("done")})
			return err
		})
	if err != nil || rec.State != tiers.StateSettled {
		t.Fatalf("Transition(SETTLED) (its caller gone while it waited) = %v, %v; want SETTLED, no error", rec.State, err)
	}
	if applied := e.applied("pi_held"); !slices.Equal(applied, []string{"created"}) {
		t.Fatalf("payment pi_held applied %v, want [created]", applied)
	}
}

// whileLocked takes the lock of lockSQL in a transaction of db, runs call,
// cancels call's context once a session waits on a lock (call's statement,
// on that one), then lets the lock go and returns call's error.
func whileLocked(t *testing.T, db *pgxpool.Pool, lockSQL string, call func(ctx context.Context) error) error {
	t.Helper()
	ctx := context.Background()
	lock, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, lockSQL); err != nil {
		t.Fatal(err)
	}
	callerCtx, leave := context.WithCancel(ctx)
	defer leave()
	done := make(chan error, 1)
	go func() { done <- call(callerCtx) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no session waited on the lock within 10s")
		}
		runtime.Gosched() // the call's statement is on its way to the lock
	}
	leave() // the caller gives up while its statement waits
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return <-done
}
