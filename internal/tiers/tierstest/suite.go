package tierstest

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// Run runs the Store conformance suite against the stores f makes. The
// cases run in parallel (t.Parallel): each calls f for an environment of
// its own and works in a namespace of its own, so f may hand every case the
// same server (but see the entity cases, entity.go, for CountDeferred).
func Run(t *testing.T, f Factory) {
	for _, tc := range slices.Concat(storeCases, entityCases, inspectCases) {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newEnv(t, f))
		})
	}
}

var storeCases = []struct {
	desc string
	run  func(t *testing.T, e *env)
}{
	{"new key is acquired with token 1 and the provider window", testNewKey},
	{"64 concurrent claims of one key acquire it once", testConcurrentClaims},
	{"duplicate while in progress", testInProgress},
	{"duplicate of a settled key returns its result", testSettledDuplicate},
	{"failed is terminal and answers duplicates", testFailedDuplicate},
	{"window boundary at ttl-1s and ttl+1s", testWindowBoundary},
	{"lease is never taken over before it ends", testLeaseNotBeforeEnd},
	{"lease takeover fences the old holder", testLeaseTakeover},
	{"expired lease without takeover keeps the token valid", testExpiredLeaseTokenValid},
	{"repeat transition is a no-op success, with another result an error", testRepeatTransition},
	{"every transition is checked against the state machine", testTransitionMatrix},
	{"unknown key is not found", testNotFound},
	{"renew extends the lease and is fenced", testRenew},
	{"release lets the next claim acquire", testRelease},
	{"release of a terminal record or with a stale token fails", testReleaseRefused},
	{"attempt_id retry returns the same acquisition", testAttemptID},
	{"only the owner's secret may write, even with the current token", testNotOwner},
	{"every takeover stores the new owner's salt and secret hash", testTakeoverNewOwner},
	{"payload mismatch", testPayloadMismatch},
	{"wait returns the result when the holder settles in time", testWaitSettled},
	{"wait acquires when the holder releases", testWaitReleased},
	{"wait gives up with in-progress", testWaitTimeout},
	{"records survive a restart", testRestart},
	{"namespaces and providers are isolated", testIsolation},
	{"get reads the record", testGet},
	{"a claim with start acquires in PROCESSING, and SETTLED follows at once", testStart},
}

func testNewKey(t *testing.T, e *env) {
	p := e.params("evt_new")
	p.PayloadHash = sha("a")
	res := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	now := e.clk.Now()
	r := res.Record
	if r.Token != 1 || r.Attempt != 1 || r.State != tiers.StateReceived {
		t.Errorf("Claim(new) token/attempt/state = %d/%d/%v, want 1/1/RECEIVED", r.Token, r.Attempt, r.State)
	}
	if !r.FirstSeenAt.Equal(now) || !r.WindowExpiresAt.Equal(now.Add(stripeTTL)) || !r.LeaseExpiresAt.Equal(now.Add(lease)) {
		t.Errorf("Claim(new) first_seen/window/lease = %v/%v/%v, want %v/%v/%v",
			r.FirstSeenAt, r.WindowExpiresAt, r.LeaseExpiresAt, now, now.Add(stripeTTL), now.Add(lease))
	}
	if r.Holder != "pod-a" || !bytes.Equal(r.PayloadHash, p.PayloadHash) {
		t.Errorf("Claim(new) holder/payload = %q/%x, want pod-a/%x", r.Holder, r.PayloadHash, p.PayloadHash)
	}
	wantOwner(t, "Claim(new)", r, p)
	got, err := e.store.Get(e.ctx(), e.key("evt_new"))
	if err != nil {
		t.Fatal(err)
	}
	wantOwner(t, "Get(new)", got, p)
}

// wantOwner checks that r carries the ownership fields of claim p.
func wantOwner(t *testing.T, call string, r tiers.Record, p tiers.ClaimParams) {
	t.Helper()
	if !bytes.Equal(r.Salt, p.Salt) || !bytes.Equal(r.SecretHash, p.SecretHash) || r.AttemptID != p.AttemptID {
		t.Errorf("%s salt/secret hash/attempt = %x/%x/%q, want the claimant's %x/%x/%q",
			call, r.Salt, r.SecretHash, r.AttemptID, p.Salt, p.SecretHash, p.AttemptID)
	}
}

func testConcurrentClaims(t *testing.T, e *env) {
	ClaimRace(t, e.store, 64, func(int) tiers.ClaimParams { return e.params("evt_race") })
	rec, err := e.store.Get(e.ctx(), e.key("evt_race"))
	if err != nil || rec.Token != 1 || rec.Attempt != 1 {
		t.Fatalf("Get after race = token %d attempt %d, %v; want token 1 attempt 1", rec.Token, rec.Attempt, err)
	}
}

func testInProgress(t *testing.T, e *env) {
	e.mustOutcome(e.params("evt_ip"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.clk.Advance(time.Second)
	p := e.params("evt_ip")
	p.Holder = "pod-b"
	res := e.mustOutcome(p, tiers.OutcomeInProgress, tiers.ReasonUnspecified)
	if res.Record.Holder != "pod-a" {
		t.Errorf("Claim(in progress) holder = %q, want pod-a (the owner)", res.Record.Holder)
	}
}

func testSettledDuplicate(t *testing.T, e *env) {
	res := e.mustOutcome(e.params("evt_s"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.mustTransition("evt_s", ownerOf(res.Record), tiers.StateProcessing, tiers.StateSettled)
	for range 2 {
		dup := e.mustOutcome(e.params("evt_s"), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
		if string(dup.Record.Result) != "result-of-evt_s" || dup.Record.State != tiers.StateSettled {
			t.Fatalf("Claim(settled) = result %q state %v, want result-of-evt_s SETTLED", dup.Record.Result, dup.Record.State)
		}
	}
}

func testFailedDuplicate(t *testing.T, e *env) {
	res := e.mustOutcome(e.params("evt_f"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.mustTransition("evt_f", ownerOf(res.Record), tiers.StateFailed)
	dup := e.mustOutcome(e.params("evt_f"), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
	if dup.Record.State != tiers.StateFailed {
		t.Fatalf("Claim(failed) state = %v, want FAILED", dup.Record.State)
	}
}

func testWindowBoundary(t *testing.T, e *env) {
	first := e.clk.Now()
	res := e.mustOutcome(e.params("evt_w"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.mustTransition("evt_w", ownerOf(res.Record), tiers.StateProcessing, tiers.StateSettled)

	e.clk.Set(first.Add(stripeTTL - time.Second))
	e.mustOutcome(e.params("evt_w"), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)

	e.clk.Set(first.Add(stripeTTL + time.Second))
	now := e.clk.Now()
	again := e.mustOutcome(e.params("evt_w"), tiers.OutcomeAcquired, tiers.ReasonWindowExpired)
	r := again.Record
	if r.Token != 2 || r.Attempt != 2 || r.State != tiers.StateReceived || len(r.Result) != 0 {
		t.Errorf("Claim(after window) token/attempt/state/result = %d/%d/%v/%q, want 2/2/RECEIVED/empty", r.Token, r.Attempt, r.State, r.Result)
	}
	if !r.FirstSeenAt.Equal(now) || !r.WindowExpiresAt.Equal(now.Add(stripeTTL)) {
		t.Errorf("Claim(after window) first_seen/window = %v/%v, want a new window from %v", r.FirstSeenAt, r.WindowExpiresAt, now)
	}
}

func testLeaseNotBeforeEnd(t *testing.T, e *env) {
	start := e.clk.Now()
	e.mustOutcome(e.params("evt_l"), tiers.OutcomeAcquired, tiers.ReasonNew)
	for _, at := range []time.Duration{time.Millisecond, lease / 2, lease - time.Millisecond} {
		e.clk.Set(start.Add(at))
		p := e.params("evt_l")
		p.Holder = "pod-b"
		e.mustOutcome(p, tiers.OutcomeInProgress, tiers.ReasonUnspecified)
	}
	e.clk.Set(start.Add(lease))
	e.mustOutcome(e.params("evt_l"), tiers.OutcomeAcquired, tiers.ReasonLeaseExpired)
}

func testLeaseTakeover(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_t"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.mustTransition("evt_t", ownerOf(a.Record), tiers.StateProcessing)
	e.clk.Advance(lease + time.Second)
	p := e.params("evt_t")
	p.Holder = "pod-b"
	b := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonLeaseExpired)
	if b.Record.Token != a.Record.Token+1 || b.Record.State != tiers.StateProcessing || b.Record.Attempt != 2 {
		t.Fatalf("takeover token/state/attempt = %d/%v/%d, want %d/PROCESSING/2", b.Record.Token, b.Record.State, b.Record.Attempt, a.Record.Token+1)
	}
	_, _, err := e.transition("evt_t", ownerOf(a.Record), tiers.StateSettled, []byte("old"))
	wantErr(t, "Transition(old holder)", err, tiers.ErrStaleToken)
	rec := e.mustTransition("evt_t", ownerOf(b.Record), tiers.StateSettled)
	if string(rec.Result) != "result-of-evt_t" {
		t.Fatalf("Transition(new holder) result = %q", rec.Result)
	}
}

func testExpiredLeaseTokenValid(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_x"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.clk.Advance(10 * lease)
	e.mustTransition("evt_x", ownerOf(a.Record), tiers.StateProcessing, tiers.StateSettled)
	e.mustOutcome(e.params("evt_x"), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
}

func testRepeatTransition(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_r"), tiers.OutcomeAcquired, tiers.ReasonNew)
	tok := ownerOf(a.Record)
	if _, changed, err := e.transition("evt_r", tok, tiers.StateValidated, nil); err != nil || !changed {
		t.Fatalf("Transition(→VALIDATED) = changed %v, %v; want true, nil", changed, err)
	}
	if rec, changed, err := e.transition("evt_r", tok, tiers.StateValidated, nil); err != nil || changed || rec.State != tiers.StateValidated {
		t.Fatalf("repeat Transition(→VALIDATED) = %v changed %v, %v; want VALIDATED false nil", rec.State, changed, err)
	}
	e.mustTransition("evt_r", tok, tiers.StateProcessing)
	if _, _, err := e.transition("evt_r", tok, tiers.StateSettled, []byte("first")); err != nil {
		t.Fatal(err)
	}
	rec, changed, err := e.transition("evt_r", tok, tiers.StateSettled, []byte("first"))
	if err != nil || changed || string(rec.Result) != "first" {
		t.Fatalf("repeat Transition(→SETTLED, same result) = result %q changed %v, %v; want first false nil", rec.Result, changed, err)
	}
	// The same target with another result is not a repeat: the caller must
	// learn that its result was not stored.
	_, _, err = e.transition("evt_r", tok, tiers.StateSettled, []byte("second"))
	wantResultMismatch(t, "repeat Transition(→SETTLED, other result)", err, tiers.StateSettled)
	if rec, err := e.store.Get(e.ctx(), e.key("evt_r")); err != nil || string(rec.Result) != "first" {
		t.Fatalf("after a refused result: Get = result %q, %v; want first", rec.Result, err)
	}
	dup := e.mustOutcome(e.params("evt_r"), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
	if string(dup.Record.Result) != "first" {
		t.Fatalf("Claim(after a refused result) result = %q, want first", dup.Record.Result)
	}

	f := e.mustOutcome(e.params("evt_rf"), tiers.OutcomeAcquired, tiers.ReasonNew)
	if _, _, err := e.transition("evt_rf", ownerOf(f.Record), tiers.StateFailed, []byte("declined")); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.transition("evt_rf", ownerOf(f.Record), tiers.StateFailed, nil)
	wantResultMismatch(t, "repeat Transition(→FAILED, no result)", err, tiers.StateFailed)
	if _, changed, err := e.transition("evt_rf", ownerOf(f.Record), tiers.StateFailed, []byte("declined")); err != nil || changed {
		t.Fatalf("repeat Transition(→FAILED, same result) = changed %v, %v; want false nil", changed, err)
	}
}

// pathTo lists the transitions that reach each state from RECEIVED.
var pathTo = map[tiers.State][]tiers.State{
	tiers.StateReceived:   nil,
	tiers.StateValidated:  {tiers.StateValidated},
	tiers.StateProcessing: {tiers.StateProcessing},
	tiers.StateSettled:    {tiers.StateProcessing, tiers.StateSettled},
	tiers.StateFailed:     {tiers.StateFailed},
}

func testTransitionMatrix(t *testing.T, e *env) {
	states := []tiers.State{tiers.StateReceived, tiers.StateValidated, tiers.StateProcessing, tiers.StateSettled, tiers.StateFailed}
	for _, from := range states {
		for _, to := range states {
			if from == to {
				continue // a repeat: covered by testRepeatTransition
			}
			k := "evt_m_" + from.String() + "_" + to.String()
			a := e.mustOutcome(e.params(k), tiers.OutcomeAcquired, tiers.ReasonNew)
			e.mustTransition(k, ownerOf(a.Record), pathTo[from]...)
			_, _, err := e.transition(k, ownerOf(a.Record), to, nil)
			if tiers.CanTransition(from, to) {
				if err != nil {
					t.Errorf("Transition(%v→%v) error = %v, want allowed", from, to, err)
				}
				continue
			}
			wantTransitionError(t, "Transition("+from.String()+"→"+to.String()+")", err, from)
			rec, gerr := e.store.Get(e.ctx(), e.key(k))
			if gerr != nil || rec.State != from {
				t.Errorf("after refused %v→%v: Get = %v, %v; want state unchanged", from, to, rec.State, gerr)
			}
		}
	}
}

func testNotFound(t *testing.T, e *env) {
	k := e.key("evt_none")
	now := e.clk.Now()
	ctx := e.ctx()
	hash := secretHash()
	_, _, err := e.store.Transition(ctx, tiers.TransitionParams{Key: k, Now: now, Token: 1, SecretHash: hash, To: tiers.StateProcessing})
	wantErr(t, "Transition(unknown)", err, tiers.ErrNotFound)
	_, err = e.store.Renew(ctx, tiers.RenewParams{Key: k, Now: now, Token: 1, SecretHash: hash, Lease: lease})
	wantErr(t, "Renew(unknown)", err, tiers.ErrNotFound)
	_, err = e.store.Release(ctx, tiers.ReleaseParams{Key: k, Now: now, Token: 1, SecretHash: hash})
	wantErr(t, "Release(unknown)", err, tiers.ErrNotFound)
	_, err = e.store.Get(ctx, k)
	wantErr(t, "Get(unknown)", err, tiers.ErrNotFound)
}

func testRenew(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_rn"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.clk.Advance(lease - time.Second)
	rec, err := e.renew("evt_rn", ownerOf(a.Record), 5*time.Minute)
	if err != nil || !rec.LeaseExpiresAt.Equal(e.clk.Now().Add(5*time.Minute)) {
		t.Fatalf("Renew = lease %v, %v; want %v", rec.LeaseExpiresAt, err, e.clk.Now().Add(5*time.Minute))
	}
	e.clk.Advance(4 * time.Minute) // past the original lease, within the renewed one
	e.mustOutcome(e.params("evt_rn"), tiers.OutcomeInProgress, tiers.ReasonUnspecified)

	_, err = e.renew("evt_rn", ownerOf(a.Record).stale(), lease)
	wantErr(t, "Renew(wrong token)", err, tiers.ErrStaleToken)

	e.mustTransition("evt_rn", ownerOf(a.Record), tiers.StateProcessing, tiers.StateSettled)
	_, err = e.renew("evt_rn", ownerOf(a.Record), lease)
	wantTransitionError(t, "Renew(settled)", err, tiers.StateSettled)
}

func testRelease(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_rl"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.mustTransition("evt_rl", ownerOf(a.Record), tiers.StateProcessing)
	rec, err := e.release("evt_rl", ownerOf(a.Record))
	if err != nil || !rec.Released {
		t.Fatalf("Release = released %v, %v; want true, nil", rec.Released, err)
	}
	if _, err := e.release("evt_rl", ownerOf(a.Record)); err != nil {
		t.Fatalf("repeat Release error = %v, want nil (handlers retry their own calls)", err)
	}
	_, _, err = e.transition("evt_rl", ownerOf(a.Record), tiers.StateSettled, nil)
	wantErr(t, "Transition(released token)", err, tiers.ErrStaleToken)

	b := e.mustOutcome(e.params("evt_rl"), tiers.OutcomeAcquired, tiers.ReasonReleased)
	if b.Record.Token != a.Record.Token+1 || b.Record.State != tiers.StateReceived || b.Record.Attempt != 2 {
		t.Fatalf("Claim(after release) token/state/attempt = %d/%v/%d, want %d/RECEIVED/2", b.Record.Token, b.Record.State, b.Record.Attempt, a.Record.Token+1)
	}
	e.mustOutcome(e.params("evt_rl"), tiers.OutcomeInProgress, tiers.ReasonUnspecified)
}

func testReleaseRefused(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_rr"), tiers.OutcomeAcquired, tiers.ReasonNew)
	_, err := e.release("evt_rr", ownerOf(a.Record).stale())
	wantErr(t, "Release(stale)", err, tiers.ErrStaleToken)
	e.mustTransition("evt_rr", ownerOf(a.Record), tiers.StateFailed)
	_, err = e.release("evt_rr", ownerOf(a.Record))
	wantTransitionError(t, "Release(failed)", err, tiers.StateFailed)
	e.mustOutcome(e.params("evt_rr"), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
}

func testAttemptID(t *testing.T, e *env) {
	p := e.params("evt_a")
	p.AttemptID = "att-1"
	first := p
	a := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	// The service sends a fresh salt and secret hash with every call; a
	// repeated attempt is answered with the stored ones, so the service
	// can derive the same secret again, and nothing is overwritten. Twice:
	// with a fast tier the second repeat is answered by it.
	for range 2 {
		e.clk.Advance(time.Second)
		p = e.params("evt_a")
		p.AttemptID = "att-1"
		again := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
		if again.Record.Token != a.Record.Token || again.Record.Attempt != 1 {
			t.Fatalf("Claim(same attempt_id) token/attempt = %d/%d, want %d/1", again.Record.Token, again.Record.Attempt, a.Record.Token)
		}
		wantOwner(t, "Claim(same attempt_id)", again.Record, first)
	}
	got, err := e.store.Get(e.ctx(), e.key("evt_a"))
	if err != nil {
		t.Fatal(err)
	}
	wantOwner(t, "Get(after repeated attempts)", got, first)
	e.mustTransition("evt_a", ownerOf(a.Record), tiers.StateValidated)
	other := e.params("evt_a")
	other.AttemptID = "att-2"
	e.mustOutcome(other, tiers.OutcomeInProgress, tiers.ReasonUnspecified)

	// Outside its lease the attempt no longer holds the key: ordinary takeover.
	e.clk.Advance(lease)
	p.Now = e.clk.Now()
	late := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonLeaseExpired)
	if late.Record.Token != a.Record.Token+1 {
		t.Fatalf("Claim(same attempt_id after lease) token = %d, want %d", late.Record.Token, a.Record.Token+1)
	}
}

func testPayloadMismatch(t *testing.T, e *env) {
	p := e.params("evt_p")
	p.PayloadHash = sha("one")
	a := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	other := e.params("evt_p")
	other.PayloadHash = sha("two")
	e.mustOutcome(other, tiers.OutcomePayloadMismatch, tiers.ReasonUnspecified)
	e.mustOutcome(e.params("evt_p"), tiers.OutcomeInProgress, tiers.ReasonUnspecified) // unknown hash matches
	e.mustTransition("evt_p", ownerOf(a.Record), tiers.StateProcessing, tiers.StateSettled)
	e.mustOutcome(other, tiers.OutcomePayloadMismatch, tiers.ReasonUnspecified)
	e.mustOutcome(p, tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
	// A mismatch never takes over an expired lease either.
	e.mustOutcome(e.params("evt_p2"), tiers.OutcomeAcquired, tiers.ReasonNew)
	first := e.params("evt_p2")
	e.clk.Advance(2 * lease)
	first.Now = e.clk.Now()
	first.PayloadHash = sha("one")
	e.mustOutcome(first, tiers.OutcomeAcquired, tiers.ReasonLeaseExpired) // adopts hash "one"
	second := e.params("evt_p2")
	e.clk.Advance(2 * lease)
	second.Now = e.clk.Now()
	second.PayloadHash = sha("two")
	e.mustOutcome(second, tiers.OutcomePayloadMismatch, tiers.ReasonUnspecified)
}

// signalStore reports on a channel the first Claim it answers IN_PROGRESS,
// so a test knows a waiter is waiting without sleeping.
type signalStore struct {
	tiers.Store
	once    sync.Once
	waiting chan struct{}
}

func (s *signalStore) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, p)
	if err == nil && res.Outcome == tiers.OutcomeInProgress {
		s.once.Do(func() { close(s.waiting) })
	}
	return res, err
}

func (e *env) startWaiter(k string, wait time.Duration) (<-chan tiers.ClaimResult, <-chan struct{}) {
	s := &signalStore{Store: e.store, waiting: make(chan struct{})}
	out := make(chan tiers.ClaimResult, 1)
	go func() {
		p := e.params(k)
		p.Holder = "waiter"
		res, err := tiers.ClaimWait(context.Background(), s, p, wait, e.clk.Now)
		if err != nil {
			e.t.Errorf("ClaimWait(%q) error = %v", k, err)
		}
		out <- res
	}()
	return out, s.waiting
}

func testWaitSettled(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_wt"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.mustTransition("evt_wt", ownerOf(a.Record), tiers.StateProcessing)
	done, waiting := e.startWaiter("evt_wt", 20*time.Second)
	<-waiting
	e.mustTransition("evt_wt", ownerOf(a.Record), tiers.StateSettled)
	res := <-done
	if res.Outcome != tiers.OutcomeDuplicate || string(res.Record.Result) != "result-of-evt_wt" {
		t.Fatalf("ClaimWait = %v result %q, want DUPLICATE result-of-evt_wt", res.Outcome, res.Record.Result)
	}
}

func testWaitReleased(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_wr"), tiers.OutcomeAcquired, tiers.ReasonNew)
	done, waiting := e.startWaiter("evt_wr", 20*time.Second)
	<-waiting
	if _, err := e.release("evt_wr", ownerOf(a.Record)); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Outcome != tiers.OutcomeAcquired || res.Reason != tiers.ReasonReleased || res.Record.Holder != "waiter" {
		t.Fatalf("ClaimWait = %v/%v holder %q, want ACQUIRED/RELEASED by waiter", res.Outcome, res.Reason, res.Record.Holder)
	}
}

func testWaitTimeout(t *testing.T, e *env) {
	e.mustOutcome(e.params("evt_wto"), tiers.OutcomeAcquired, tiers.ReasonNew)
	started := time.Now()
	res, err := tiers.ClaimWait(e.ctx(), e.store, e.params("evt_wto"), 50*time.Millisecond, e.clk.Now)
	if err != nil || res.Outcome != tiers.OutcomeInProgress {
		t.Fatalf("ClaimWait(holder never finishes) = %v, %v; want IN_PROGRESS", res.Outcome, err)
	}
	if waited := time.Since(started); waited < 50*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("ClaimWait waited %v, want about 50ms", waited)
	}
}

func testRestart(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_rs"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.mustTransition("evt_rs", ownerOf(a.Record), tiers.StateProcessing, tiers.StateSettled)
	b := e.mustOutcome(e.params("evt_rs_open"), tiers.OutcomeAcquired, tiers.ReasonNew)
	e.restart()
	dup := e.mustOutcome(e.params("evt_rs"), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
	if string(dup.Record.Result) != "result-of-evt_rs" {
		t.Fatalf("Claim(after restart) result = %q", dup.Record.Result)
	}
	e.mustOutcome(e.params("evt_rs_open"), tiers.OutcomeInProgress, tiers.ReasonUnspecified)
	e.mustTransition("evt_rs_open", ownerOf(b.Record), tiers.StateProcessing)
}

func testIsolation(t *testing.T, e *env) {
	e.mustOutcome(e.params("evt_i"), tiers.OutcomeAcquired, tiers.ReasonNew)
	p := e.params("evt_i")
	p.Key.Namespace = e.ns + "-other"
	e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	p = e.params("evt_i")
	p.Key.Provider = "paypal"
	e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	p = e.params("evt_i:settled")
	e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
}

func testGet(t *testing.T, e *env) {
	a := e.mustOutcome(e.params("evt_g"), tiers.OutcomeAcquired, tiers.ReasonNew)
	rec, err := e.store.Get(e.ctx(), e.key("evt_g"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Token != a.Record.Token || rec.State != tiers.StateReceived || !rec.LeaseExpiresAt.Equal(a.Record.LeaseExpiresAt) || rec.Key != e.key("evt_g") {
		t.Fatalf("Get = %+v, want the claimed record %+v", rec, a.Record)
	}
	// Get has no side effects: the holder still owns the key.
	e.mustOutcome(e.params("evt_g"), tiers.OutcomeInProgress, tiers.ReasonUnspecified)
}

// testNotOwner presents the current token with a secret hash that is not its
// owner's, as a caller that read the token with Get would: every write is
// ErrNotOwner and changes nothing, including the repeat of a transition that
// already happened (which the owner gets as a no-op success). A stale token
// is still named stale first.
func testNotOwner(t *testing.T, e *env) {
	const k = "evt_no"
	a := e.mustOutcome(e.params(k), tiers.OutcomeAcquired, tiers.ReasonNew)
	own := ownerOf(a.Record)
	e.mustTransition(k, own, tiers.StateValidated)
	before, err := e.store.Get(e.ctx(), e.key(k))
	if err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	for _, o := range []struct {
		desc string
		who  owner
	}{
		{"another secret", own.stranger()},
		{"no secret", owner{token: own.token}},
		{"a hash of the wrong size", owner{token: own.token, hash: own.hash[:16]}},
	} {
		_, _, err := e.transition(k, o.who, tiers.StateProcessing, nil)
		wantErr(t, "Transition(→PROCESSING, "+o.desc+")", err, tiers.ErrNotOwner)
		_, _, err = e.transition(k, o.who, tiers.StateValidated, nil)
		wantErr(t, "Transition(repeat →VALIDATED, "+o.desc+")", err, tiers.ErrNotOwner)
		_, _, err = e.transition(k, o.who, tiers.StateFailed, []byte("forged"))
		wantErr(t, "Transition(→FAILED, "+o.desc+")", err, tiers.ErrNotOwner)
		_, err = e.renew(k, o.who, 10*time.Minute)
		wantErr(t, "Renew("+o.desc+")", err, tiers.ErrNotOwner)
		_, err = e.release(k, o.who)
		wantErr(t, "Release("+o.desc+")", err, tiers.ErrNotOwner)
	}
	_, _, err = e.transition(k, own.stranger().stale(), tiers.StateProcessing, nil)
	wantErr(t, "Transition(stale token, another secret)", err, tiers.ErrStaleToken)

	after, err := e.store.Get(e.ctx(), e.key(k))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("record changed by refused writes (-before +after):\n%s", diff)
	}
	// The key is still the owner's: another claim is IN_PROGRESS, and the
	// owner's own writes go through.
	e.mustOutcome(e.params(k), tiers.OutcomeInProgress, tiers.ReasonUnspecified)
	if _, _, err := e.transition(k, own, tiers.StateValidated, nil); err != nil {
		t.Fatalf("repeat Transition(→VALIDATED) by the owner error = %v, want a no-op success", err)
	}
	e.mustTransition(k, own, tiers.StateProcessing, tiers.StateSettled)
	// Settled: a stranger's repeat of the settle is still refused as not the
	// owner, never answered as a no-op or by the state machine.
	_, _, err = e.transition(k, own.stranger(), tiers.StateSettled, []byte("forged"))
	wantErr(t, "Transition(repeat →SETTLED, another secret)", err, tiers.ErrNotOwner)
	_, err = e.release(k, own.stranger())
	wantErr(t, "Release(settled, another secret)", err, tiers.ErrNotOwner)

	// A released record: the owner's repeat is a no-op, a stranger's is not.
	b := e.mustOutcome(e.params(k+"_rl"), tiers.OutcomeAcquired, tiers.ReasonNew)
	if _, err := e.release(k+"_rl", ownerOf(b.Record)); err != nil {
		t.Fatal(err)
	}
	_, err = e.release(k+"_rl", ownerOf(b.Record).stranger())
	wantErr(t, "Release(released, another secret)", err, tiers.ErrNotOwner)
	if _, err := e.release(k+"_rl", ownerOf(b.Record)); err != nil {
		t.Fatalf("repeat Release by the owner error = %v, want nil", err)
	}
}

// testTakeoverNewOwner checks that each way ownership changes hands stores
// the new claimant's salt and secret hash: the old owner's secret no longer
// writes, even with the new token, and the new owner's does.
func testTakeoverNewOwner(t *testing.T, e *env) {
	start := e.clk.Now()
	const k = "evt_own"
	a := e.mustOutcome(e.params(k), tiers.OutcomeAcquired, tiers.ReasonNew)
	prev := ownerOf(a.Record)
	takeover := func(reason tiers.Reason) {
		t.Helper()
		p := e.params(k)
		p.Holder = "pod-" + reason.String()
		res := e.mustOutcome(p, tiers.OutcomeAcquired, reason)
		wantOwner(t, "Claim("+reason.String()+")", res.Record, p)
		got, err := e.store.Get(e.ctx(), e.key(k))
		if err != nil {
			t.Fatal(err)
		}
		wantOwner(t, "Get(after "+reason.String()+")", got, p)
		_, err = e.renew(k, owner{token: res.Record.Token, hash: prev.hash}, lease)
		wantErr(t, "Renew(new token, previous owner's secret)", err, tiers.ErrNotOwner)
		if _, err := e.renew(k, ownerOf(res.Record), lease); err != nil {
			t.Fatalf("Renew(new owner) after %v error = %v", reason, err)
		}
		prev = ownerOf(res.Record)
	}
	e.clk.Advance(lease + time.Second)
	takeover(tiers.ReasonLeaseExpired)
	if _, err := e.release(k, prev); err != nil {
		t.Fatal(err)
	}
	takeover(tiers.ReasonReleased)
	e.clk.Set(start.Add(stripeTTL + time.Second))
	takeover(tiers.ReasonWindowExpired)
}

// testStart: ClaimParams.Start records an acquisition in PROCESSING, new key
// or takeover, so that the holder settles straight away; a claim that does
// not acquire writes nothing, start or not.
func testStart(t *testing.T, e *env) {
	p := e.params("evt_start")
	p.Start = true
	a := e.mustOutcome(p, tiers.OutcomeAcquired, tiers.ReasonNew)
	if a.Record.State != tiers.StateProcessing || a.Record.Token != 1 {
		t.Fatalf("Claim(start) state/token = %v/%d, want PROCESSING/1", a.Record.State, a.Record.Token)
	}
	if got, err := e.store.Get(e.ctx(), e.key("evt_start")); err != nil || got.State != tiers.StateProcessing {
		t.Fatalf("Get after Claim(start) = %v, %v; want PROCESSING", got.State, err)
	}

	// A duplicate with start, while the lease runs, changes nothing.
	e.clk.Advance(time.Second)
	dup := e.params("evt_start")
	dup.Start, dup.Holder = true, "pod-b"
	if res := e.mustOutcome(dup, tiers.OutcomeInProgress, tiers.ReasonUnspecified); res.Record.State != tiers.StateProcessing || res.Record.Holder != "pod-a" {
		t.Fatalf("Claim(start, in progress) state/holder = %v/%q, want PROCESSING/pod-a", res.Record.State, res.Record.Holder)
	}

	// A takeover with start of a RECEIVED record whose lease ran out keeps
	// RECEIVED: how far the vanished holder got is the new holder's to read.
	// It moves on to PROCESSING itself.
	b := e.mustOutcome(e.params("evt_start_to"), tiers.OutcomeAcquired, tiers.ReasonNew)
	if b.Record.State != tiers.StateReceived {
		t.Fatalf("Claim(no start) state = %v, want RECEIVED", b.Record.State)
	}
	e.clk.Advance(lease + time.Second)
	to := e.params("evt_start_to")
	to.Start, to.Holder = true, "pod-b"
	c := e.mustOutcome(to, tiers.OutcomeAcquired, tiers.ReasonLeaseExpired)
	if c.Record.State != tiers.StateReceived || c.Record.Token != 2 {
		t.Fatalf("lease-expired takeover(start) state/token = %v/%d, want RECEIVED/2 (the state the vanished holder reached)", c.Record.State, c.Record.Token)
	}
	_, _, err := e.transition("evt_start_to", ownerOf(b.Record), tiers.StateProcessing, nil)
	wantErr(t, "Transition(old holder)", err, tiers.ErrStaleToken)
	e.mustTransition("evt_start_to", ownerOf(c.Record), tiers.StateProcessing)

	// A released key claimed with start starts again in PROCESSING.
	r := e.mustOutcome(e.params("evt_start_rel"), tiers.OutcomeAcquired, tiers.ReasonNew)
	if _, err := e.store.Release(e.ctx(), tiers.ReleaseParams{Key: e.key("evt_start_rel"), Now: e.clk.Now(),
		Token: r.Record.Token, SecretHash: r.Record.SecretHash}); err != nil {
		t.Fatalf("Release(evt_start_rel) = %v", err)
	}
	rel := e.params("evt_start_rel")
	rel.Start = true
	if got := e.mustOutcome(rel, tiers.OutcomeAcquired, tiers.ReasonReleased); got.Record.State != tiers.StateProcessing {
		t.Fatalf("Claim(start) after a release state = %v, want PROCESSING", got.Record.State)
	}

	// The holders settle without a Transition to PROCESSING.
	e.mustTransition("evt_start", ownerOf(a.Record), tiers.StateSettled)
	e.mustTransition("evt_start_to", ownerOf(c.Record), tiers.StateSettled)
	for _, k := range []string{"evt_start", "evt_start_to"} {
		p := e.params(k)
		p.Start = true
		res := e.mustOutcome(p, tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
		if res.Record.State != tiers.StateSettled || string(res.Record.Result) != "result-of-"+k {
			t.Fatalf("Claim(%q, start, settled) = %v %q, want SETTLED result-of-%s", k, res.Record.State, res.Record.Result, k)
		}
	}
}
