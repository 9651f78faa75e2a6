package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// queuedCall is one caller of a write batch test.
type queuedCall struct {
	desc string
	run  func(ctx context.Context) (tiers.Record, bool, error)
	done chan struct{}
	rec  tiers.Record
	ch   bool
	err  error
}

// flushQueued runs every call of calls against s's paused write batcher
// until all of them are queued, ends left's context with leave, and then
// starts the flusher and waits for every answer.
func flushQueued(ctx context.Context, s *Store, calls []*queuedCall, leave func(), left *queuedCall) {
	for _, c := range calls {
		c.done = make(chan struct{})
		go func() {
			defer close(c.done)
			c.rec, c.ch, c.err = c.run(ctx)
		}()
	}
	for s.writes.queue.Len() < len(calls) {
		runtime.Gosched() // the callers are about to enqueue; nothing else to wait on
	}
	leave()
	<-left.done // it answers at once, before the flush
	s.writes.start()
	for _, c := range calls {
		<-c.done
	}
}

// pausedWrites returns a store whose write batcher is not started (calls
// queue until the test starts it), its clock, and claim, which claims a key
// and moves it through states without the batcher. With partitions > 0 the
// claims table is hash-partitioned first (docs/scaling.md).
func pausedWrites(t *testing.T, partitions int) (*Store, *clock.Fake, func(k string, states ...tiers.State) tiers.Record) {
	t.Helper()
	url := testenv.Postgres(t, Migrate)
	ctx := context.Background()
	if partitions > 0 {
		if err := PartitionClaims(ctx, Config{URL: url}, partitions); err != nil {
			t.Fatalf("PartitionClaims() error = %v", err)
		}
	}
	s, err := New(ctx, Config{URL: url, MaxBatch: 1})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	s.writes = newWriteBatcher(s, defaultMaxBatch) // not started: paused
	t.Cleanup(func() { s.Close() })
	clk := clock.NewFake(time.Now())
	claim := func(k string, states ...tiers.State) tiers.Record {
		t.Helper()
		res, err := s.Claim(ctx, batchParams(clk, k, "pod-a"))
		if err != nil || res.Outcome != tiers.OutcomeAcquired {
			t.Fatalf("setup Claim(%q) = %v, %v", k, res.Outcome, err)
		}
		rec := res.Record
		for _, to := range states {
			if rec, err = s.durableTransitionNow(ctx, tp(clk, k, rec.Token, to)); err != nil {
				t.Fatalf("setup Transition(%q, →%v) = %v", k, to, err)
			}
		}
		return rec
	}
	return s, clk, claim
}

// TestWriteBatchOneTransaction queues fenced updates of every kind in a
// paused write batcher, then lets one flusher take them: they run as one
// pipeline, and each caller gets the answer it would get alone (the
// update's record, the repeat, the stale token), while a caller that left
// before the flush writes nothing.
func TestWriteBatchOneTransaction(t *testing.T) {
	ctx := context.Background()
	s, clk, claim := pausedWrites(t, 0)
	recv := claim("evt_recv")
	proc := claim("evt_proc", tiers.StateProcessing)
	renew := claim("evt_renew", tiers.StateProcessing)
	stale := claim("evt_stale")
	left := claim("evt_left")

	transition := func(k string, token uint64, to tiers.State) func(context.Context) (tiers.Record, bool, error) {
		return func(ctx context.Context) (tiers.Record, bool, error) { return s.Transition(ctx, tp(clk, k, token, to)) }
	}
	leftCtx, leave := context.WithCancel(ctx)
	calls := []*queuedCall{
		{desc: "RECEIVED → PROCESSING", run: transition("evt_recv", recv.Token, tiers.StateProcessing)},
		{desc: "PROCESSING → SETTLED", run: transition("evt_proc", proc.Token, tiers.StateSettled)},
		{desc: "renew", run: func(ctx context.Context) (tiers.Record, bool, error) {
			rec, err := s.Renew(ctx, tiers.RenewParams{Key: batchKey("evt_renew"), Now: clk.Now(), Token: renew.Token, SecretHash: testHash, Lease: 5 * time.Minute})
			return rec, err == nil, err
		}},
		{desc: "stale token", run: transition("evt_stale", stale.Token+1, tiers.StateProcessing)},
		{desc: "caller left", run: func(context.Context) (tiers.Record, bool, error) {
			return s.Transition(leftCtx, tp(clk, "evt_left", left.Token, tiers.StateProcessing))
		}},
	}
	flushQueued(ctx, s, calls, leave, calls[4])

	if n, tn := s.writes.batches.Load(), s.writes.transitionBatches.Load(); n != 1 || tn != 0 {
		t.Errorf("write batches = %d (%d of transitions only), want 1 pipeline for %d updates of three kinds queued together", n, tn, len(calls)-1)
	}
	if c := calls[0]; c.err != nil || !c.ch || c.rec.State != tiers.StateProcessing {
		t.Errorf("%s = %v changed %v, %v; want PROCESSING, changed", c.desc, c.rec.State, c.ch, c.err)
	}
	if c := calls[1]; c.err != nil || !c.ch || c.rec.State != tiers.StateSettled || string(c.rec.Result) != "result" {
		t.Errorf("%s = %v %q changed %v, %v; want SETTLED \"result\", changed", c.desc, c.rec.State, c.rec.Result, c.ch, c.err)
	}
	if c := calls[2]; c.err != nil || !c.rec.LeaseExpiresAt.Equal(clk.Now().Add(5*time.Minute)) {
		t.Errorf("%s = lease %v, %v; want %v", c.desc, c.rec.LeaseExpiresAt, c.err, clk.Now().Add(5*time.Minute))
	}
	if c := calls[3]; !errors.Is(c.err, tiers.ErrStaleToken) {
		t.Errorf("%s error = %v, want ErrStaleToken", c.desc, c.err)
	}
	if c := calls[4]; !errors.Is(c.err, context.Canceled) {
		t.Errorf("%s error = %v, want context.Canceled", c.desc, c.err)
	}
	for k, want := range map[string]tiers.State{"evt_recv": tiers.StateProcessing, "evt_proc": tiers.StateSettled, "evt_stale": tiers.StateReceived, "evt_left": tiers.StateReceived} {
		if got, err := s.Get(ctx, batchKey(k)); err != nil || got.State != want {
			t.Errorf("Get(%q) = %v, %v; want %v", k, got.State, err, want)
		}
	}
}

// tp is a transition of k by the holder of token, with a result for a
// terminal target.
func tp(clk *clock.Fake, k string, token uint64, to tiers.State) tiers.TransitionParams {
	p := tiers.TransitionParams{Key: batchKey(k), Now: clk.Now(), Token: token, SecretHash: testHash, To: to}
	if to.Terminal() {
		p.Result = []byte("result")
	}
	return p
}

// durableTransitionNow transitions without the write batcher (paused in
// the test above).
func (s *Store) durableTransitionNow(ctx context.Context, p tiers.TransitionParams) (tiers.Record, error) {
	w := s.writes
	s.writes = nil
	defer func() { s.writes = w }()
	rec, _, err := s.Transition(ctx, p)
	return rec, err
}

// TestWriteBatchTransitionsOneStatement queues Transitions only, of distinct
// keys, in a paused write batcher: they run as one transition_batch.sql,
// and each caller gets the answer it would get alone (the update's record,
// the repeat, the stale token, the wrong owner, the refused transition),
// with an audit row for each update and none for the others.
// Both claims layouts run it.
func TestWriteBatchTransitionsOneStatement(t *testing.T) {
	for _, partitions := range []int{0, 8} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) { testTransitionsOneStatement(t, partitions) })
	}
}

func testTransitionsOneStatement(t *testing.T, partitions int) {
	ctx := context.Background()
	s, clk, claim := pausedWrites(t, partitions)
	recv := claim("evt_recv")
	proc := claim("evt_proc", tiers.StateProcessing)
	repeat := claim("evt_repeat", tiers.StateProcessing)
	stale := claim("evt_stale")
	stranger := claim("evt_stranger")
	settled := claim("evt_settled", tiers.StateProcessing, tiers.StateSettled)
	left := claim("evt_left")

	transition := func(p tiers.TransitionParams) func(context.Context) (tiers.Record, bool, error) {
		return func(ctx context.Context) (tiers.Record, bool, error) { return s.Transition(ctx, p) }
	}
	notOwner := tp(clk, "evt_stranger", stranger.Token, tiers.StateProcessing)
	notOwner.SecretHash = sha("someone else")
	leftCtx, leave := context.WithCancel(ctx)
	calls := []*queuedCall{
		{desc: "RECEIVED → PROCESSING", run: transition(tp(clk, "evt_recv", recv.Token, tiers.StateProcessing))},
		{desc: "PROCESSING → SETTLED", run: transition(tp(clk, "evt_proc", proc.Token, tiers.StateSettled))},
		{desc: "PROCESSING → PROCESSING (repeat)", run: transition(tp(clk, "evt_repeat", repeat.Token, tiers.StateProcessing))},
		{desc: "stale token", run: transition(tp(clk, "evt_stale", stale.Token+1, tiers.StateProcessing))},
		{desc: "not the owner", run: transition(notOwner)},
		{desc: "SETTLED → PROCESSING", run: transition(tp(clk, "evt_settled", settled.Token, tiers.StateProcessing))},
		{desc: "caller left", run: func(context.Context) (tiers.Record, bool, error) {
			return s.Transition(leftCtx, tp(clk, "evt_left", left.Token, tiers.StateProcessing))
		}},
	}
	flushQueued(ctx, s, calls, leave, calls[6])

	if n, tn := s.writes.batches.Load(), s.writes.transitionBatches.Load(); n < 1 || tn != n {
		t.Errorf("write batches = %d (%d of transitions only), want every batch one transition_batch.sql", n, tn)
	}
	if c := calls[0]; c.err != nil || !c.ch || c.rec.State != tiers.StateProcessing || c.rec.Key != batchKey("evt_recv") || c.rec.Version != recv.Version+1 {
		t.Errorf("%s = %+v changed %v, %v; want PROCESSING at version %d, changed", c.desc, c.rec, c.ch, c.err, recv.Version+1)
	}
	if c := calls[1]; c.err != nil || !c.ch || c.rec.State != tiers.StateSettled || string(c.rec.Result) != "result" || c.rec.Key != batchKey("evt_proc") {
		t.Errorf("%s = %v %q changed %v, %v; want SETTLED \"result\", changed", c.desc, c.rec.State, c.rec.Result, c.ch, c.err)
	}
	if c := calls[2]; c.err != nil || c.ch || c.rec.State != tiers.StateProcessing || c.rec.Version != repeat.Version {
		t.Errorf("%s = %v version %d changed %v, %v; want the unchanged PROCESSING record", c.desc, c.rec.State, c.rec.Version, c.ch, c.err)
	}
	if c := calls[3]; !errors.Is(c.err, tiers.ErrStaleToken) {
		t.Errorf("%s error = %v, want ErrStaleToken", c.desc, c.err)
	}
	if c := calls[4]; !errors.Is(c.err, tiers.ErrNotOwner) {
		t.Errorf("%s error = %v, want ErrNotOwner", c.desc, c.err)
	}
	var te *tiers.TransitionError
	if c := calls[5]; !errors.As(c.err, &te) {
		t.Errorf("%s error = %v, want a *tiers.TransitionError", c.desc, c.err)
	}
	if c := calls[6]; !errors.Is(c.err, context.Canceled) {
		t.Errorf("%s error = %v, want context.Canceled", c.desc, c.err)
	}
	for k, want := range map[string]tiers.State{"evt_recv": tiers.StateProcessing, "evt_proc": tiers.StateSettled, "evt_repeat": tiers.StateProcessing,
		"evt_stale": tiers.StateReceived, "evt_stranger": tiers.StateReceived, "evt_settled": tiers.StateSettled, "evt_left": tiers.StateReceived} {
		if got, err := s.Get(ctx, batchKey(k)); err != nil || got.State != want {
			t.Errorf("Get(%q) = %v, %v; want %v", k, got.State, err, want)
		}
	}
	for k, want := range map[string]int{"evt_recv": 1, "evt_proc": 2, "evt_repeat": 1, "evt_stale": 0, "evt_stranger": 0, "evt_left": 0} {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE key = $1 AND op = 'transition'`, k).Scan(&n); err != nil || n != want {
			t.Errorf("transition audit rows of %q = %d, %v; want %d", k, n, err, want)
		}
	}
}

// TestTransitionBatchPlan checks what transitionBatchPlan is for: with
// claimd's session settings and the batch's own, the generic plan
// PostgreSQL caches for transition_batch.sql reads claims by its primary
// key, row by row (not a hash or merge join over the whole table, nor a scan
// of it), on an empty claims table and on one of a few hundred rows, never
// analyzed and analyzed: a new database before and after autovacuum's first
// ANALYZE. And the settings end with the transaction.
func TestTransitionBatchPlan(t *testing.T) {
	ctx := context.Background()
	s, clk, _ := pausedWrites(t, 0)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c := conn.Conn()
	claimed := 0
	for _, table := range []struct {
		rows     int
		analyzed bool
	}{{0, false}, {300, false}, {300, true}} {
		for ; claimed < table.rows; claimed++ {
			if _, err := s.Claim(ctx, batchParams(clk, fmt.Sprintf("evt_%d", claimed), "pod-a")); err != nil {
				t.Fatal(err)
			}
		}
		if table.analyzed {
			if _, err := c.Exec(ctx, `ANALYZE claims`); err != nil {
				t.Fatal(err)
			}
		}
		p := genericPlan(t, c, transitionBatchSQL, transitionBatchPlan)
		if !strings.Contains(p, "Index Scan using claims_pkey") || strings.Contains(p, "Hash Join") || strings.Contains(p, "Merge Join") || strings.Contains(p, "Seq Scan on claims") {
			t.Errorf("generic plan of transition_batch.sql on a claims table of %d rows (analyzed: %v):\n%s\nwant claims read through claims_pkey, no hash or merge join, no sequential scan", table.rows, table.analyzed, p)
		}
	}
	var hashJoin string
	if err := c.QueryRow(ctx, `SHOW enable_hashjoin`).Scan(&hashJoin); err != nil || hashJoin != "on" {
		t.Errorf("enable_hashjoin after the batch = %q, %v; want on (set for its transaction only)", hashJoin, err)
	}
}
