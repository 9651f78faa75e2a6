package twotier_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/tierstest"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// TestRedisClusterPostgresPair runs the conformance suite, unchanged, with a
// real Redis Cluster (three primaries, three replicas) as the fast tier.
func TestRedisClusterPostgresPair(t *testing.T) {
	redisURL := testenv.RedisCluster(t)
	pgURL := testenv.Postgres(t, postgres.Migrate)
	tierstest.Run(t, func(t *testing.T) tierstest.Opener {
		return func(t *testing.T) tiers.Store {
			return openPair(t, redisURL, pgURL, twotier.Config{})
		}
	})
}

// TestRedisSentinelPostgresPair runs the conformance suite, unchanged, with a
// primary watched by three sentinels as the fast tier.
func TestRedisSentinelPostgresPair(t *testing.T) {
	redisURL := testenv.RedisSentinel(t)
	pgURL := testenv.Postgres(t, postgres.Migrate)
	tierstest.Run(t, func(t *testing.T) tierstest.Opener {
		return func(t *testing.T) tiers.Store {
			return openPair(t, redisURL, pgURL, twotier.Config{})
		}
	})
}

// TestReshardDuringLoad moves the hash slots that every key of a running
// load lives in from one primary to another, step by step, and requires
// that no claim was answered wrongly: each key ACQUIRED exactly once, its
// racers told IN_PROGRESS, its duplicates told DUPLICATE with its result,
// and the fast tier never failing (MOVED and ASK followed, not fallen back
// from), which the nodes' own error counters show happened.
func TestReshardDuringLoad(t *testing.T) {
	cluster := testenv.StartRedisCluster(t)
	pgURL := testenv.Postgres(t, postgres.Migrate)
	obs := &counter{}
	store := openPair(t, cluster.URL(), pgURL, twotier.Config{LocalEntries: -1, Observer: obs})
	t.Cleanup(func() { store.Close() })
	// A second replica of claimd, idle during the reshard: its map of the
	// slots goes stale, so its first calls after it are answered MOVED
	// (the loaded replica may have reloaded its map before it sent one).
	staleObs := &counter{}
	stale := openPair(t, cluster.URL(), pgURL, twotier.Config{LocalEntries: -1, Observer: staleObs})
	t.Cleanup(func() { stale.Close() })

	// Sixteen consecutive slots: one primary owns them (redis-cli gives each
	// primary one range), and every key of the load hashes into them.
	var slots []int
	inSlots := map[int]bool{}
	for s := 100; s < 116; s++ {
		slots = append(slots, s)
		inSlots[s] = true
	}
	l := startLoad(t, store, func(i int64) string {
		for j := 0; ; j++ {
			k := fmt.Sprintf("evt_%d_%d", i, j)
			if inSlots[testenv.KeySlot("idem:{billing:stripe:"+k+"}")] {
				return k
			}
		}
	})
	ctx := testContext(t)
	l.waitKeys(20)
	m, err := cluster.BeginSlotMigration(ctx, slots)
	if err != nil {
		t.Fatalf("BeginSlotMigration: %v", err)
	}
	l.waitKeys(20) // new keys live on the target now: ASK
	if _, err := m.MoveKeys(ctx); err != nil {
		t.Fatalf("MoveKeys: %v", err)
	}
	l.waitKeys(20) // old keys too
	moved, err := m.Finish(ctx)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	l.waitKeys(20) // the client's slot map is stale: MOVED
	finished := l.stop()

	if moved == 0 {
		t.Fatal("the migration moved no key: the load did not reach the moving slots")
	}
	l.verify(stale, finished, nil)
	if n := staleObs.fastErrors.Load(); n != 0 {
		t.Fatalf("fast-tier errors of the stale replica = %d, want 0: a MOVED was not followed (last: %v)", n, staleObs.lastFastError.Load())
	}
	stats, err := cluster.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats["ASK"] == 0 || stats["MOVED"] == 0 {
		t.Fatalf("cluster error replies = %v, want both ASK and MOVED: the load missed a step of the reshard", stats)
	}
	if n := obs.fastErrors.Load(); n != 0 {
		t.Fatalf("fast-tier errors during the reshard = %d, want 0: a redirect was not followed (last: %v)", n, obs.lastFastError.Load())
	}
	if n := obs.falseNegatives.Load() + staleObs.falseNegatives.Load(); n != 0 {
		t.Fatalf("fast-tier false negatives = %d, want 0: a record was lost in the move", n)
	}
	t.Logf("%d keys claimed during the reshard; %d keys moved; nodes answered %d ASK and %d MOVED",
		len(finished), moved, stats["ASK"], stats["MOVED"])
}

// TestSentinelFailoverDuringLoad fails the primary over, under load, to a
// replica that lost everything (it was down and came back empty: the worst
// failover there is). No decision is lost: every key settled before, during
// and after the failover still answers DUPLICATE with its result, and the
// keys the new primary never saw are answered by the durable tier, which
// also repairs the fast tier.
func TestSentinelFailoverDuringLoad(t *testing.T) {
	s := testenv.StartRedisSentinel(t, testenv.SentinelOptions{DownAfter: time.Second})
	obs := &counter{}
	store := openPair(t, s.URL(), testenv.Postgres(t, postgres.Migrate), twotier.Config{LocalEntries: -1, Observer: obs})
	t.Cleanup(func() { store.Close() })

	l := startLoad(t, store, func(i int64) string { return fmt.Sprintf("evt_%d", i) })
	before := l.waitKeys(20)
	s.Replica().Stop(t)
	l.waitKeys(10) // only the primary has these
	s.Primary().Stop(t)
	during := l.waitKeys(10) // no fast tier at all: PostgreSQL alone
	s.Replica().Start(t)     // empty, and the only candidate
	ctx := testContext(t)
	if err := s.WaitPrimary(ctx, s.Replica()); err != nil {
		t.Fatalf("failover: %v", err)
	}
	// Until the failover client reaches the new primary, answers still come
	// from PostgreSQL alone; wait for a duplicate the fast tier answered.
	l.waitFor("a duplicate answered by the new primary", func(r loadKey) bool { return r.dupServedBy == tiers.TierFast })
	finished := l.stop()

	if obs.fastErrors.Load() == 0 {
		t.Fatal("no fast-tier error observed: the primary's outage went unseen")
	}
	negativesBefore := obs.falseNegatives.Load()
	// The keys settled before the failover are on no Redis node now: the
	// durable tier answers each, then the fast tier knows it again.
	l.verify(store, append(before, during...), func(r loadKey, first tiers.ClaimResult) {
		if first.ServedBy != tiers.TierDurable {
			t.Errorf("Claim(%q) after failing over to an empty replica served by %v, want DURABLE", r.key, first.ServedBy)
		}
	})
	if n := obs.falseNegatives.Load() - negativesBefore; n != int64(len(before)+len(during)) {
		t.Errorf("fast-tier false negatives = %d, want %d (one per key the new primary never saw)", n, len(before)+len(during))
	}
	// Repaired: the fast tier answers them now.
	l.verify(store, append(before, during...), func(r loadKey, again tiers.ClaimResult) {
		if again.ServedBy != tiers.TierFast {
			t.Errorf("Claim(%q) after its repair served by %v, want FAST", r.key, again.ServedBy)
		}
	})
	l.verify(store, finished, nil)
	t.Logf("%d keys claimed across the failover; %d fast-tier errors absorbed; %d records repaired from PostgreSQL",
		len(finished), obs.fastErrors.Load(), obs.falseNegatives.Load())
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Shape of the load: each worker takes a new key, has racers claim it at
// once, settles it as the one that acquired it, and claims it once more.
const (
	loadWorkers = 4
	loadRacers  = 3
)

// load drives a Store the way webhook retries do, and checks every answer
// as it comes.
type load struct {
	t      *testing.T
	store  tiers.Store
	clk    *clock.Fake
	keyFor func(i int64) string
	next   atomic.Int64

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	done     chan loadKey
	failed   chan error
	finished []loadKey
}

// loadKey is one key the load claimed, settled and saw answered DUPLICATE.
type loadKey struct {
	key         string
	token       uint64
	result      string
	dupServedBy tiers.Tier // which tier answered the DUPLICATE
}

func startLoad(t *testing.T, store tiers.Store, keyFor func(i int64) string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	// A fixed clock: no lease or window ends during the test, so every
	// answer has one right value.
	l := &load{t: t, store: store, clk: clock.NewFake(time.Now()), keyFor: keyFor, cancel: cancel,
		done: make(chan loadKey), failed: make(chan error, loadWorkers)}
	for range loadWorkers {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				r, err := l.one(ctx)
				if err != nil {
					if ctx.Err() == nil {
						l.failed <- err
					}
					return
				}
				select {
				case l.done <- r:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *load) params(k string) tiers.ClaimParams {
	return tiers.ClaimParams{
		Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: k},
		Now: l.clk.Now(), Lease: time.Minute, TTL: 84 * time.Hour, Holder: "load",
		Salt: bytes.Repeat([]byte{1}, tiers.SaltBytes), SecretHash: ownerHash,
	}
}

// one claims, settles and re-claims one new key; any answer but the one
// right answer is an error.
func (l *load) one(ctx context.Context) (loadKey, error) {
	k := l.keyFor(l.next.Add(1))
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	results := make([]tiers.ClaimResult, loadRacers)
	errs := make([]error, loadRacers)
	var wg sync.WaitGroup
	for i := range loadRacers {
		wg.Go(func() { results[i], errs[i] = l.store.Claim(ctx, l.params(k)) })
	}
	wg.Wait()
	var owner *tiers.ClaimResult
	for i, res := range results {
		if errs[i] != nil {
			return loadKey{}, fmt.Errorf("Claim(%q) error = %w", k, errs[i])
		}
		switch res.Outcome {
		case tiers.OutcomeAcquired:
			if owner != nil {
				return loadKey{}, fmt.Errorf("Claim(%q): two racers ACQUIRED (tokens %d and %d)", k, owner.Record.Token, res.Record.Token)
			}
			owner = &results[i]
		case tiers.OutcomeInProgress:
		default:
			return loadKey{}, fmt.Errorf("Claim(%q) racer = %v/%v, want ACQUIRED or IN_PROGRESS", k, res.Outcome, res.Reason)
		}
	}
	if owner == nil {
		return loadKey{}, fmt.Errorf("Claim(%q): %d racers and none ACQUIRED", k, loadRacers)
	}
	if owner.Reason != tiers.ReasonNew || owner.Record.Token != 1 {
		return loadKey{}, fmt.Errorf("Claim(%q) = ACQUIRED/%v token %d, want NEW token 1", k, owner.Reason, owner.Record.Token)
	}
	r := loadKey{key: k, token: owner.Record.Token, result: "receipt-" + k}
	for _, to := range []tiers.State{tiers.StateProcessing, tiers.StateSettled} {
		p := tiers.TransitionParams{Key: owner.Record.Key, Now: l.clk.Now(), Token: r.token, SecretHash: ownerHash, To: to}
		if to == tiers.StateSettled {
			p.Result = []byte(r.result)
		}
		if _, _, err := l.store.Transition(ctx, p); err != nil {
			return loadKey{}, fmt.Errorf("Transition(%q, →%v) error = %w", k, to, err)
		}
	}
	err := l.checkDuplicate(ctx, l.store, r, func(_ loadKey, dup tiers.ClaimResult) { r.dupServedBy = dup.ServedBy })
	if err != nil {
		return loadKey{}, err
	}
	return r, nil
}

// checkDuplicate claims r's key again and requires DUPLICATE with its
// result; seen, when set, sees the answer.
func (l *load) checkDuplicate(ctx context.Context, store tiers.Store, r loadKey, seen func(loadKey, tiers.ClaimResult)) error {
	dup, err := store.Claim(ctx, l.params(r.key))
	if err != nil {
		return fmt.Errorf("Claim(%q, settled) error = %w", r.key, err)
	}
	if dup.Outcome != tiers.OutcomeDuplicate || string(dup.Record.Result) != r.result || dup.Record.Token != r.token {
		return fmt.Errorf("Claim(%q, settled) = %v result %q token %d, want DUPLICATE result %q token %d",
			r.key, dup.Outcome, dup.Record.Result, dup.Record.Token, r.result, r.token)
	}
	if seen != nil {
		seen(r, dup)
	}
	return nil
}

// waitKeys blocks until the load has finished n more keys and returns them;
// a wrong answer fails the test at once.
func (l *load) waitKeys(n int) []loadKey {
	l.t.Helper()
	var got []loadKey
	timeout := time.After(2 * time.Minute)
	for len(got) < n {
		select {
		case r := <-l.done:
			got = append(got, r)
		case err := <-l.failed:
			l.t.Fatal(err)
		case <-timeout:
			l.t.Fatalf("the load finished %d of %d keys within 2 minutes", len(got), n)
		}
	}
	l.finished = append(l.finished, got...)
	return got
}

// waitFor blocks until the load finishes a key for which ok holds, and
// fails the test if none does within 2 minutes.
func (l *load) waitFor(what string, ok func(loadKey) bool) {
	l.t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case r := <-l.done:
			l.finished = append(l.finished, r)
			if ok(r) {
				return
			}
		case err := <-l.failed:
			l.t.Fatal(err)
		case <-timeout:
			l.t.Fatalf("no %s within 2 minutes", what)
		}
	}
}

// stop ends the load and returns every key it finished. It is safe to call
// twice.
func (l *load) stop() []loadKey {
	l.t.Helper()
	l.cancel()
	l.wg.Wait()
	select {
	case err := <-l.failed:
		l.t.Fatal(err)
	default:
	}
	return l.finished
}

// verify claims each key once more through store: DUPLICATE with its
// result, every time.
func (l *load) verify(store tiers.Store, keys []loadKey, seen func(loadKey, tiers.ClaimResult)) {
	l.t.Helper()
	ctx := testContext(l.t)
	for _, r := range keys {
		if err := l.checkDuplicate(ctx, store, r, seen); err != nil {
			l.t.Fatal(err)
		}
	}
}
