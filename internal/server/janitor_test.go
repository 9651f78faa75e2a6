package server

// The janitor's passes on each real durable tier, through the targets the
// wiring builds for it (tier_postgres.go, tier_embedded.go).

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

const (
	claimTTL     = 84 * time.Hour
	claimLease   = time.Minute
	janitorGrace = time.Hour
)

// janitorBackend is one durable tier under test: the store its claims go
// to and the janitor's target over it.
type janitorBackend struct {
	desc string
	open func(t *testing.T) (tiers.Durable, janitor.Target)
}

func janitorBackends() []janitorBackend {
	return []janitorBackend{
		{
			desc: "postgres",
			open: func(t *testing.T) (tiers.Durable, janitor.Target) {
				s := newPostgres(t, testenv.Postgres(t, postgres.Migrate))
				return s, postgresTarget(s)
			},
		},
		{
			desc: "sqlite",
			open: func(t *testing.T) (tiers.Durable, janitor.Target) {
				s, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s, sqliteTarget(s)
			},
		},
	}
}

func newPostgres(t *testing.T, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.New(context.Background(), postgres.Config{URL: url})
	if err != nil {
		t.Fatalf("postgres.New() error = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// claimAt claims key at the instant at (stores take the time from their
// params, so the past is as easy to write as the present).
func claimAt(t *testing.T, d tiers.Durable, key string, at time.Time) {
	t.Helper()
	res, err := d.Claim(testCtx(t), tiers.ClaimParams{
		Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: key},
		Now: at, Lease: claimLease, TTL: claimTTL,
	})
	if err != nil || res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim(%q at %v) = %v, %v; want ACQUIRED", key, at, res.Outcome, err)
	}
}

func claimExists(t *testing.T, d tiers.Durable, key string) bool {
	t.Helper()
	_, err := d.Get(testCtx(t), tiers.Key{Namespace: "billing", Provider: "stripe", Key: key})
	if err != nil && !errors.Is(err, tiers.ErrNotFound) {
		t.Fatalf("Get(%q) error = %v", key, err)
	}
	return err == nil
}

// TestPassDeletesExpiredKeepsLive is the janitor's promise on each durable
// tier: claims past window+grace go, in bounded batches; claims within
// their window or within the grace period stay; audit entries older than
// the retention go; a dry run counts exactly that and changes nothing.
func TestPassDeletesExpiredKeepsLive(t *testing.T) {
	for _, b := range janitorBackends() {
		t.Run(b.desc, func(t *testing.T) {
			t.Parallel()
			durable, target := b.open(t)
			clk := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
			now := clk.Now()

			expired := []string{"evt_old1", "evt_old2", "evt_old3", "evt_old4", "evt_old5"}
			for i, k := range expired { // windows ended 2h to 6h ago: past the grace
				claimAt(t, durable, k, now.Add(-claimTTL-2*time.Hour-time.Duration(i)*time.Hour))
			}
			claimAt(t, durable, "evt_in_grace", now.Add(-claimTTL-30*time.Minute)) // window ended 30m ago
			claimAt(t, durable, "evt_live", now.Add(-time.Hour))                   // window ends in 83h
			claimAt(t, durable, "evt_ancient", now.Add(-500*24*time.Hour))         // audit row past retention
			expired = append(expired, "evt_ancient")
			// Two deferrals: one of an entity whose windows ended past the
			// grace, one of an entity still within its window. A deferral
			// creates no entity row, so each holds one entity only when it
			// had some claim acquire it: none here.
			for k, at := range map[string]time.Time{"evt_early_old": now.Add(-claimTTL - 2*time.Hour), "evt_early_live": now.Add(-time.Hour)} {
				res, err := durable.Claim(testCtx(t), tiers.ClaimParams{
					Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: k}, Now: at, Lease: claimLease, TTL: claimTTL,
					Entity: &tiers.EntityEvent{Lifecycle: "payment_intent", EntityID: "pi_" + k, EventType: "charge.refunded",
						Initial: "created", From: []string{"succeeded"}, Wait: []string{"created"}, To: "refunded"},
				})
				if err != nil || res.Outcome != tiers.OutcomeDeferred {
					t.Fatalf("Claim(%s) = %v, %v; want DEFERRED", k, res.Outcome, err)
				}
			}

			counting := &countingTarget{Target: target}
			j, err := janitor.New(janitor.Config{Target: counting, Clock: clk, Grace: janitorGrace, BatchSize: 2, Retention: 400 * 24 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}

			dry, err := j.Pass(testCtx(t), true)
			if err != nil {
				t.Fatalf("Pass(dry run) error = %v", err)
			}
			if dry.Claims != int64(len(expired)) || dry.Deferrals != 1 {
				t.Errorf("Pass(dry run) claims, deferrals = %d, %d; want %d, 1", dry.Claims, dry.Deferrals, len(expired))
			}
			for _, k := range expired {
				if !claimExists(t, durable, k) {
					t.Fatalf("dry run deleted %q", k)
				}
			}
			if counting.locks != 0 || counting.prunes != 0 {
				t.Errorf("dry run took %d locks and ran %d prunes, want none", counting.locks, counting.prunes)
			}

			rep, err := j.Pass(testCtx(t), false)
			if err != nil {
				t.Fatalf("Pass() error = %v", err)
			}
			if rep.Skipped || rep.Claims != int64(len(expired)) || rep.Deferrals != 1 {
				t.Errorf("Pass() = skipped %v, claims %d, deferrals %d; want not skipped, %d, 1", rep.Skipped, rep.Claims, rep.Deferrals, len(expired))
			}
			// 6 rows in batches of 2: three full batches and the empty one
			// that says there is no more.
			if counting.prunes != 4 || counting.maxLimit != 2 {
				t.Errorf("PruneClaims calls = %d with limit up to %d, want 4 with limit 2", counting.prunes, counting.maxLimit)
			}
			for _, k := range expired {
				if claimExists(t, durable, k) {
					t.Errorf("after Pass(): %q (window+grace over) still there", k)
				}
			}
			for _, k := range []string{"evt_in_grace", "evt_live"} {
				if !claimExists(t, durable, k) {
					t.Errorf("after Pass(): %q (window or grace running) deleted", k)
				}
			}
			if diff := cmp.Diff(dry.Audit, rep.Audit); diff != "" {
				t.Errorf("dry run audit expiry differs from the pass's (-dry +pass):\n%s", diff)
			}
			ancient := now.Add(-500 * 24 * time.Hour)
			switch b.desc {
			case "postgres":
				want := fmt.Sprintf("audit_log_y%04dm%02d", ancient.Year(), int(ancient.Month()))
				if !slices.Contains(rep.Audit.Partitions, want) {
					t.Errorf("Pass().Audit.Partitions = %v, want %s among them", rep.Audit.Partitions, want)
				}
			case "sqlite":
				if rep.Audit.Rows != 1 {
					t.Errorf("Pass().Audit.Rows = %d, want 1 (evt_ancient's claim)", rep.Audit.Rows)
				}
			}

			again, err := j.Pass(testCtx(t), false)
			if err != nil || again.Claims != 0 || again.Audit.Rows != 0 || len(again.Audit.Partitions) != 0 {
				t.Errorf("second Pass() = %+v, %v; want nothing left to do", again, err)
			}
		})
	}
}

// countingTarget counts what a pass asks of its target.
type countingTarget struct {
	janitor.Target
	mu                      sync.Mutex
	locks, prunes, maxLimit int
}

func (c *countingTarget) TryLock(ctx context.Context) (func(), bool, error) {
	c.mu.Lock()
	c.locks++
	c.mu.Unlock()
	return c.Target.TryLock(ctx)
}

func (c *countingTarget) PruneClaims(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	c.mu.Lock()
	c.prunes++
	c.maxLimit = max(c.maxLimit, limit)
	c.mu.Unlock()
	return c.Target.PruneClaims(ctx, cutoff, limit)
}

// TestCreatesAuditPartitionsAhead: a pass prepares the audit partitions of
// the janitor clock's month and PartitionsAhead more.
func TestCreatesAuditPartitionsAhead(t *testing.T) {
	s := newPostgres(t, testenv.Postgres(t, postgres.Migrate))
	clk := clock.NewFake(time.Date(2031, 5, 10, 0, 0, 0, 0, time.UTC))
	j, err := janitor.New(janitor.Config{Target: postgresTarget(s), Clock: clk, PartitionsAhead: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Pass(testCtx(t), false); err != nil {
		t.Fatal(err)
	}
	// Partitions of June and July 2031 exist iff dropping everything up to
	// August drops them.
	dropped, err := s.AuditPartitionsBefore(testCtx(t), time.Date(2031, 8, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"audit_log_y2031m05", "audit_log_y2031m06", "audit_log_y2031m07"} {
		if !slices.Contains(dropped, want) {
			t.Errorf("after a pass at 2031-05-10 with PartitionsAhead 2: partitions %v, missing %s", dropped, want)
		}
	}
}

// TestTwoJanitorsOneActive: two replicas' janitors on one PostgreSQL
// database; while one is in its pass, the other's pass is skipped and
// deletes nothing; once it is done, the other may run.
func TestTwoJanitorsOneActive(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
	a, b := newPostgres(t, url), newPostgres(t, url) // two replicas: two pools
	clk := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	claimAt(t, a, "evt_old", clk.Now().Add(-claimTTL-2*time.Hour))

	entered, proceed := make(chan struct{}), make(chan struct{})
	held := &blockingTarget{Target: postgresTarget(a), entered: entered, proceed: proceed}
	ja, err := janitor.New(janitor.Config{Target: held, Clock: clk, Grace: janitorGrace})
	if err != nil {
		t.Fatal(err)
	}
	jb, err := janitor.New(janitor.Config{Target: postgresTarget(b), Clock: clk, Grace: janitorGrace})
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		rep janitor.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := ja.Pass(context.Background(), false)
		done <- result{rep, err}
	}()
	<-entered // A holds the lock and is about to prune

	rb, err := jb.Pass(testCtx(t), false)
	if err != nil || !rb.Skipped || rb.Claims != 0 {
		t.Errorf("B.Pass() while A is active = skipped %v, claims %d, %v; want skipped, 0", rb.Skipped, rb.Claims, err)
	}
	close(proceed)
	ra := <-done
	if ra.err != nil || ra.rep.Skipped || ra.rep.Claims != 1 {
		t.Errorf("A.Pass() = skipped %v, claims %d, %v; want active, 1", ra.rep.Skipped, ra.rep.Claims, ra.err)
	}

	rb, err = jb.Pass(testCtx(t), false)
	if err != nil || rb.Skipped {
		t.Errorf("B.Pass() after A's = skipped %v, %v; want active (A released the lock)", rb.Skipped, err)
	}
}

// blockingTarget stops a pass at its first prune until told to proceed, so
// a test can act while the pass holds the janitor lock.
type blockingTarget struct {
	janitor.Target
	entered, proceed chan struct{}
	once             sync.Once
}

func (b *blockingTarget) PruneClaims(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	b.once.Do(func() {
		close(b.entered)
		<-b.proceed
	})
	return b.Target.PruneClaims(ctx, cutoff, limit)
}

// TestLockGoesWithTheSession: a replica whose session dies mid-pass (a
// crash, a network failure) does not keep the lock, and releasing a lock
// whose session is gone neither fails nor pools a broken connection.
func TestLockGoesWithTheSession(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
	a, b := newPostgres(t, url), newPostgres(t, url)
	release, ok, err := a.TryJanitorLock(testCtx(t))
	if err != nil || !ok {
		t.Fatalf("TryJanitorLock() = %v, %v; want the lock", ok, err)
	}
	if _, ok, err := b.TryJanitorLock(testCtx(t)); err != nil || ok {
		t.Fatalf("second TryJanitorLock() while held = %v, %v; want false", ok, err)
	}

	admin, err := pgx.Connect(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	key := postgres.JanitorLockKey(postgres.DefaultSchema)
	var killed bool
	// A bigint advisory key is (classid, objid) = (high, low 32 bits);
	// the 5s timeout makes pg_terminate_backend wait for the exit.
	err = admin.QueryRow(testCtx(t), `SELECT bool_and(pg_terminate_backend(pid, 5000)) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 1`,
		uint32(key>>32), uint32(key)).Scan(&killed)
	if err != nil || !killed {
		t.Fatalf("terminating the lock holder's session = %v, %v", killed, err)
	}

	rb, ok, err := b.TryJanitorLock(testCtx(t))
	if err != nil || !ok {
		t.Fatalf("TryJanitorLock() after the holder's session died = %v, %v; want the lock", ok, err)
	}
	rb()
	release() // its session is gone: must close, not pool, the connection
	if err := a.Ping(testCtx(t)); err != nil {
		t.Errorf("Ping() after releasing a dead lock session = %v", err)
	}
}

// TestSweepsLocalFastTier: every pass drops the expired entries of the
// process-local fast tier, lock or no lock.
func TestSweepsLocalFastTier(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	fast := memory.New(memory.Config{})
	for i, window := range []time.Duration{-time.Minute, time.Hour} {
		rec := tiers.Record{
			Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: fmt.Sprint("evt_", i)}, State: tiers.StateSettled,
			Token: 1, Version: 1, Attempt: 1, Reason: tiers.ReasonNew,
			FirstSeenAt: clk.Now().Add(-claimTTL), LeaseExpiresAt: clk.Now().Add(-claimTTL + claimLease), WindowExpiresAt: clk.Now().Add(window), UpdatedAt: clk.Now().Add(-claimTTL),
		}
		if err := fast.Put(testCtx(t), rec); err != nil {
			t.Fatal(err)
		}
	}
	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	j, err := janitor.New(janitor.Config{Target: sqliteTarget(lite), Fast: fast, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := j.Pass(testCtx(t), false)
	if err != nil || rep.FastSwept != 1 || fast.Len() != 1 {
		t.Errorf("Pass() = swept %d, %v; fast tier holds %d; want 1 swept, 1 left", rep.FastSwept, err, fast.Len())
	}
}
