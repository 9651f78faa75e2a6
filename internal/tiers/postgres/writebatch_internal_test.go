package postgres

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// TestWriteBatchOneTransaction queues fenced updates of every kind in a
// paused write batcher, then lets one flusher take them: they run as one
// pipeline, and each caller gets the answer it would get alone (the
// update's record, the repeat, the stale token), while a caller that left
// before the flush writes nothing.
func TestWriteBatchOneTransaction(t *testing.T) {
	url := testenv.Postgres(t, Migrate)
	ctx := context.Background()
	s, err := New(ctx, Config{URL: url, MaxBatch: 1})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	s.writes = newWriteBatcher(s, defaultMaxBatch) // not started: paused
	t.Cleanup(func() { s.Close() })
	clk := clock.NewFake(time.Now())

	claim := func(k string, states ...tiers.State) tiers.Record {
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
	recv := claim("evt_recv")
	proc := claim("evt_proc", tiers.StateProcessing)
	renew := claim("evt_renew", tiers.StateProcessing)
	stale := claim("evt_stale")
	left := claim("evt_left")

	type call struct {
		desc string
		run  func(ctx context.Context) (tiers.Record, bool, error)
		done chan struct{}
		rec  tiers.Record
		ch   bool
		err  error
	}
	transition := func(k string, token uint64, to tiers.State) func(context.Context) (tiers.Record, bool, error) {
		return func(ctx context.Context) (tiers.Record, bool, error) { return s.Transition(ctx, tp(clk, k, token, to)) }
	}
	leftCtx, leave := context.WithCancel(ctx)
	calls := []*call{
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
	for _, c := range calls {
		c.done = make(chan struct{})
		go func() {
			defer close(c.done)
			c.rec, c.ch, c.err = c.run(ctx)
		}()
	}
	for len(s.writes.queue) < len(calls) {
		runtime.Gosched() // the callers are about to enqueue; nothing else to wait on
	}
	leave()
	<-calls[4].done // it answers at once, before the flush
	s.writes.start()
	for _, c := range calls {
		<-c.done
	}

	if n := s.writes.batches.Load(); n != 1 {
		t.Errorf("write batches = %d, want 1 for %d updates queued together", n, len(calls)-1)
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
