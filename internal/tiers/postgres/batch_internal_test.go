package postgres

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

const (
	batchTestTTL   = 84 * time.Hour
	batchTestLease = 60 * time.Second
)

// pausedStore returns a Store whose batcher has no flusher yet, so that a
// test can queue claims and then let exactly one flusher take them: the
// batch a test builds is the batch that runs. Its second return value is a
// plain store (no batching) over the same database, for setting records up.
func pausedStore(t *testing.T, url string) (*Store, *Store) {
	t.Helper()
	ctx := context.Background()
	s, err := New(ctx, Config{URL: url, MaxBatch: 1})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	s.batch = newBatcher(s, defaultMaxBatch, 1)
	t.Cleanup(func() { s.Close() })
	plain, err := New(ctx, Config{URL: url, MaxBatch: 1})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { plain.Close() })
	return s, plain
}

// queued is one call (a Claim, a Get) running against a paused queue: its
// argument, its answer, and its end.
type queued[A, R any] struct {
	p      A
	cancel context.CancelFunc
	res    R
	err    error
	done   chan struct{}
}

// claimCall is a Claim against a paused store.
type claimCall = queued[tiers.ClaimParams, tiers.ClaimResult]

// queue starts a Claim of each of ps and returns once every one of them
// waits in s's batcher.
func queue(t *testing.T, s *Store, ps []tiers.ClaimParams) []*claimCall {
	t.Helper()
	return queueCalls(t, ps, s.Claim, s.batch.queue.Len)
}

// queueCalls starts call with each of args, each on a goroutine of its own,
// and returns once length reports every one of them waiting in a paused
// queue. It fails the test when that takes 10 s: the calls do not go
// through the queue at all.
func queueCalls[A, R any](t *testing.T, args []A, call func(context.Context, A) (R, error), length func() int) []*queued[A, R] {
	t.Helper()
	qs := make([]*queued[A, R], len(args))
	for i, a := range args {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		q := &queued[A, R]{p: a, cancel: cancel, done: make(chan struct{})}
		qs[i] = q
		go func() {
			defer close(q.done)
			q.res, q.err = call(ctx, q.p)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for length() < len(args) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls queued after 10s: they do not go through the queue", length(), len(args))
		}
		runtime.Gosched() // the callers are about to enqueue; nothing else to wait on
	}
	return qs
}

// run starts the flusher and waits for every caller's answer.
func run(s *Store, qs []*claimCall) {
	s.batch.start(1)
	for _, q := range qs {
		<-q.done
	}
}

func batchKey(k string) tiers.Key { return tiers.Key{Namespace: "billing", Provider: "stripe", Key: k} }

// testSalt and testHash are the ownership fields of every claim here.
var (
	testSalt = bytes.Repeat([]byte{0x5a}, tiers.SaltBytes)
	testHash = bytes.Repeat([]byte{0xa5}, tiers.SecretHashBytes)
)

func batchParams(clk *clock.Fake, k, holder string) tiers.ClaimParams {
	return tiers.ClaimParams{Key: batchKey(k), Now: clk.Now(), Lease: batchTestLease, TTL: batchTestTTL, Holder: holder,
		Salt: testSalt, SecretHash: testHash}
}

func sha(s string) []byte {
	h := make([]byte, 32)
	copy(h, s)
	return h
}

// TestBatchOneStatement puts claims of every kind into one batch: the
// batch runs one statement, and each caller gets the answer tiers.Decide
// gives its claim alone (NEW for absent keys, the row's answer for stored
// ones, claim.sql's for takeovers and for a key's second claim).
func TestBatchOneStatement(t *testing.T) {
	url := testenv.Postgres(t, Migrate)
	s, plain := pausedStore(t, url)
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	t0 := clk.Now()

	setup := func(k string, payload []byte, states ...tiers.State) {
		t.Helper()
		p := batchParams(clk, k, "pod-a")
		p.PayloadHash = payload
		res, err := plain.Claim(ctx, p)
		if err != nil {
			t.Fatalf("setup Claim(%q) error = %v", k, err)
		}
		for _, to := range states {
			var result []byte
			if to.Terminal() {
				result = []byte("result-of-" + k)
			}
			if _, _, err := plain.Transition(ctx, tiers.TransitionParams{Key: p.Key, Now: clk.Now(), Token: res.Record.Token, SecretHash: testHash, To: to, Result: result}); err != nil {
				t.Fatalf("setup Transition(%q, →%v) error = %v", k, to, err)
			}
		}
	}
	setup("evt_settled", nil, tiers.StateProcessing, tiers.StateSettled)
	setup("evt_live", nil)
	setup("evt_payload", sha("a"))
	setup("evt_expired", nil)
	clk.Advance(batchTestLease) // evt_expired's (and evt_live's) lease is over now

	type want struct {
		outcome tiers.Outcome
		reason  tiers.Reason
		token   uint64
	}
	type claimCase struct {
		desc string
		p    tiers.ClaimParams
		want []want // acceptable answers (either order for a key claimed twice)
	}
	var cases []claimCase
	for _, k := range []string{"evt_new_1", "evt_new_2", "evt_new_3", "evt_new_4", "evt_new_5"} {
		cases = append(cases, claimCase{desc: "absent key " + k, p: batchParams(clk, k, "pod-b"), want: []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}}})
	}
	// A claim that starts the event, at an instant between two
	// microseconds (PostgreSQL keeps microseconds).
	started := batchParams(clk, "evt_new_start", "pod-b")
	started.Start, started.Now = true, started.Now.Add(1500*time.Nanosecond)
	started.PayloadHash = sha("s")
	cases = append(cases, claimCase{desc: "absent key, started, between microseconds", p: started, want: []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}}})
	twice := []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}, {tiers.OutcomeInProgress, 0, 1}}
	sameAttempt := batchParams(clk, "evt_attempt", "pod-b")
	sameAttempt.AttemptID = "att-1"
	mismatch := batchParams(clk, "evt_payload", "pod-b")
	mismatch.PayloadHash = sha("b")
	live := batchParams(clk, "evt_live", "pod-b")
	live.Now = t0 // the lease of evt_live is still running at t0
	cases = append(cases,
		claimCase{"absent key claimed twice, first claim", batchParams(clk, "evt_twice", "pod-b"), twice},
		claimCase{"absent key claimed twice, second claim", batchParams(clk, "evt_twice", "pod-c"), twice},
		claimCase{"same attempt twice, first", sameAttempt, []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}}},
		claimCase{"same attempt twice, second", sameAttempt, []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}}},
		claimCase{"settled key", batchParams(clk, "evt_settled", "pod-b"), []want{{tiers.OutcomeDuplicate, 0, 1}}},
		claimCase{"live lease", live, []want{{tiers.OutcomeInProgress, 0, 1}}},
		claimCase{"payload differs", mismatch, []want{{tiers.OutcomePayloadMismatch, 0, 1}}},
		claimCase{"lease over", batchParams(clk, "evt_expired", "pod-b"), []want{{tiers.OutcomeAcquired, tiers.ReasonLeaseExpired, 2}}},
	)

	ps := make([]tiers.ClaimParams, len(cases))
	for i, c := range cases {
		ps[i] = c.p
	}
	qs := queue(t, s, ps)
	run(s, qs)

	if n := s.batch.statements.Load(); n != 1 {
		t.Errorf("batch statements = %d, want 1 for %d claims queued together", n, len(cases))
	}
	// The statement decides each key once: the second claims of evt_twice
	// and evt_attempt go on to claim.sql.
	if n, want := s.batch.decided.Load(), int64(len(cases)-2); n != want {
		t.Errorf("claims decided by the batch = %d, want %d", n, want)
	}
	seen := map[string][]want{}
	for i, c := range cases {
		q := qs[i]
		if q.err != nil {
			t.Errorf("%s: Claim(%q) error = %v", c.desc, c.p.Key.Key, q.err)
			continue
		}
		got := want{q.res.Outcome, q.res.Reason, q.res.Record.Token}
		ok := false
		for _, w := range c.want {
			ok = ok || w == got
		}
		if !ok {
			t.Errorf("%s: Claim(%q) = %v/%v token %d, want one of %+v", c.desc, c.p.Key.Key, got.outcome, got.reason, got.token, c.want)
		}
		seen[c.p.Key.Key] = append(seen[c.p.Key.Key], got)
		if q.res.ServedBy != tiers.TierDurable {
			t.Errorf("%s: Claim(%q) served by %v, want DURABLE", c.desc, c.p.Key.Key, q.res.ServedBy)
		}
		if q.res.Outcome == tiers.OutcomeAcquired && q.res.Reason == tiers.ReasonNew && c.p.AttemptID == "" {
			// The batch answers the record without reading it back: it
			// must be the row as stored.
			stored, err := plain.Get(ctx, c.p.Key)
			if err != nil {
				t.Fatalf("%s: Get(%q) error = %v", c.desc, c.p.Key.Key, err)
			}
			if diff := cmp.Diff(stored, q.res.Record); diff != "" {
				t.Errorf("%s: Claim(%q) record (-stored +answered):\n%s", c.desc, c.p.Key.Key, diff)
			}
		}
	}
	if got := seen["evt_twice"]; len(got) != 2 || got[0] == got[1] {
		t.Errorf("Claims of evt_twice = %+v, want one ACQUIRED and one IN_PROGRESS", got)
	}

	// Every answer is audited once, the batch's ACQUIRED ones included.
	var audited int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE op = 'claim' AND holder <> 'pod-a'`).Scan(&audited); err != nil {
		t.Fatal(err)
	}
	if audited != len(cases) {
		t.Errorf("audit rows of the batch's claims = %d, want %d (one per claim)", audited, len(cases))
	}
}

// TestBatchCallerLeaves: a caller whose context ends while it waits for
// the batch gets its context's error, is not claimed for, and does not
// fail the others.
func TestBatchCallerLeaves(t *testing.T) {
	url := testenv.Postgres(t, Migrate)
	s, plain := pausedStore(t, url)
	clk := clock.NewFake(time.Now())
	ps := []tiers.ClaimParams{
		batchParams(clk, "evt_stays_1", "pod-a"),
		batchParams(clk, "evt_leaves", "pod-a"),
		batchParams(clk, "evt_stays_2", "pod-a"),
	}
	qs := queue(t, s, ps)
	qs[1].cancel()
	<-qs[1].done // gone before the flusher starts
	run(s, qs)

	if !errors.Is(qs[1].err, context.Canceled) {
		t.Errorf("Claim(%q) after its caller left error = %v, want context.Canceled", ps[1].Key.Key, qs[1].err)
	}
	for _, i := range []int{0, 2} {
		if qs[i].err != nil || qs[i].res.Outcome != tiers.OutcomeAcquired {
			t.Errorf("Claim(%q) = %v, %v; want ACQUIRED", ps[i].Key.Key, qs[i].res.Outcome, qs[i].err)
		}
	}
	if _, err := plain.Get(context.Background(), ps[1].Key); !errors.Is(err, tiers.ErrNotFound) {
		t.Errorf("Get(%q) after its caller left error = %v, want ErrNotFound (not claimed)", ps[1].Key.Key, err)
	}
}

// TestBatchUnavailable: when the statement of a batch fails because the
// database is gone, every caller in it gets an error wrapping
// tiers.ErrUnavailable.
func TestBatchUnavailable(t *testing.T) {
	srv := testenv.StartPostgres(t, Migrate)
	s, _ := pausedStore(t, srv.URL())
	clk := clock.NewFake(time.Now())
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	ps := []tiers.ClaimParams{batchParams(clk, "evt_1", "pod-a"), batchParams(clk, "evt_2", "pod-a"), batchParams(clk, "evt_3", "pod-a")}
	qs := queue(t, s, ps)
	run(s, qs)
	for i, q := range qs {
		if !errors.Is(q.err, tiers.ErrUnavailable) {
			t.Errorf("Claim(%q) with the database stopped error = %v, want one wrapping tiers.ErrUnavailable", ps[i].Key.Key, q.err)
		}
	}
	if n := s.batch.statements.Load(); n != 1 {
		t.Errorf("batch statements = %d, want 1", n)
	}
}

// TestBatchQueueFull: a claim that finds the queue full runs its own
// statement instead of waiting.
func TestBatchQueueFull(t *testing.T) {
	url := testenv.Postgres(t, Migrate)
	s, _ := pausedStore(t, url)
	clk := clock.NewFake(time.Now())
	// Fill the queue with claims waiting for the flusher.
	ps := make([]tiers.ClaimParams, s.batch.queue.Cap())
	for i := range ps {
		ps[i] = batchParams(clk, "evt_filler_"+strconv.Itoa(i), "pod-a")
	}
	fillers := queueCalls(t, ps, s.batch.queue.TrySubmit, s.batch.queue.Len)
	res, err := s.Claim(context.Background(), batchParams(clk, "evt_overflow", "pod-a"))
	if err != nil || res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim(%q) with the queue full = %v, %v; want ACQUIRED from its own statement", "evt_overflow", res.Outcome, err)
	}
	s.batch.start(1)
	for _, q := range fillers {
		if <-q.done; q.err != nil || !q.res.inserted {
			t.Fatalf("filler %q answer = %+v, %v; want inserted", q.p.Key.Key, q.res, q.err)
		}
	}
}

// TestBatchLoneClaim: a claim alone in its batch runs claim.sql, not a
// batch statement.
func TestBatchLoneClaim(t *testing.T) {
	url := testenv.Postgres(t, Migrate)
	s, _ := pausedStore(t, url)
	clk := clock.NewFake(time.Now())
	qs := queue(t, s, []tiers.ClaimParams{batchParams(clk, "evt_alone", "pod-a")})
	run(s, qs)
	if qs[0].err != nil || qs[0].res.Outcome != tiers.OutcomeAcquired || qs[0].res.Reason != tiers.ReasonNew {
		t.Fatalf("Claim(%q) alone = %v/%v, %v; want ACQUIRED/NEW", "evt_alone", qs[0].res.Outcome, qs[0].res.Reason, qs[0].err)
	}
	if n := s.batch.statements.Load(); n != 0 {
		t.Fatalf("batch statements for a lone claim = %d, want 0 (claim.sql decides it)", n)
	}
}

// TestBatchFormsUnderLoad: with many callers, claims wait behind the
// statement in flight and go out together (a flusher that handed lone
// claims back at once would never let a batch form).
func TestBatchFormsUnderLoad(t *testing.T) {
	url := testenv.Postgres(t, Migrate)
	s, err := New(context.Background(), Config{URL: url})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	clk := clock.NewFake(time.Now())
	const callers, each = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				p := batchParams(clk, "evt_load_"+strconv.Itoa(c)+"_"+strconv.Itoa(i), "pod-a")
				res, err := s.Claim(context.Background(), p)
				if err == nil && res.Outcome != tiers.OutcomeAcquired {
					err = errors.New("Claim(" + p.Key.Key + ") = " + res.Outcome.String() + ", want ACQUIRED")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	stmts, decided := s.batch.statements.Load(), s.batch.decided.Load()
	if decided == 0 || stmts >= decided {
		t.Fatalf("%d claims from %d callers: %d batch statements decided %d claims, want batches of more than one claim", callers*each, callers, stmts, decided)
	}
	t.Logf("%d claims from %d callers: %d batch statements decided %d claims", callers*each, callers, stmts, decided)
}

// TestBatchLocksKeysInOrder: two batches of the same keys, queued in
// opposite orders (two replicas given one burst of retries), insert them in
// one order, so neither waits on the other in a cycle. In the order they
// were queued, each inserted its first key, then both stopped at a key held
// by a third transaction; once it rolled back, one took that key and met
// the other's first key, the other met the first's: a deadlock, which
// PostgreSQL broke after deadlock_timeout by failing one statement whole
// (make chaos's baseline answered its claims UNAVAILABLE).
func TestBatchLocksKeysInOrder(t *testing.T) {
	url := testenv.Postgres(t, Migrate)
	s, plain := pausedStore(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := clock.NewFake(time.Now())

	// A third transaction holds evt_c, uncommitted.
	tx, err := plain.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, _, _, err := claimOn(ctx, tx, batchParams(clk, "evt_c", "pod-t")); err != nil {
		t.Fatalf("claim of evt_c in the holding transaction: %v", err)
	}

	// Each batch is queued in the order given, to a paused batcher of its
	// own, whose flusher then runs it whole.
	batch := func(holder string, keys ...string) (*batcher, []*queued[tiers.ClaimParams, batchAnswer]) {
		b := newBatcher(s, defaultMaxBatch, 1)
		var qs []*queued[tiers.ClaimParams, batchAnswer]
		for _, k := range keys {
			n := len(qs)
			qs = append(qs, queueCalls(t, []tiers.ClaimParams{batchParams(clk, k, holder)}, b.queue.TrySubmit, func() int { return b.queue.Len() - n })...)
		}
		return b, qs
	}
	bx, x := batch("pod-x", "evt_a", "evt_c", "evt_b")
	by, y := batch("pod-y", "evt_b", "evt_c", "evt_a")
	bx.start(1)
	by.start(1)
	defer bx.queue.Close()
	defer by.queue.Close()
	// Both statements wait on a lock (on evt_c's holder, or one on the
	// other) before the holder lets go.
	for waiting := 0; waiting < 2; {
		if err := plain.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	inserted := map[string]int{}
	for _, q := range append(x, y...) {
		<-q.done
		if q.err != nil {
			t.Errorf("%s's claim of %q: batch error %v, want an answer", q.p.Holder, q.p.Key.Key, q.err)
		}
		if q.res.inserted {
			inserted[q.p.Key.Key]++
		}
	}
	for _, k := range []string{"evt_a", "evt_b", "evt_c"} {
		if inserted[k] != 1 {
			t.Errorf("%q inserted by %d batches, want 1", k, inserted[k])
		}
	}
}
