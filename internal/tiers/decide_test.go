package tiers

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const (
	ttl   = 84 * time.Hour
	lease = time.Minute
)

// Ownership fields of pod-a, which holds the record, and of pod-b, which
// claims it.
var (
	saltA, secretA = hash(0xa1)[:SaltBytes], hash(0xa2)
	saltB, secretB = hash(0xb1)[:SaltBytes], hash(0xb2)
)

func params(now time.Time) ClaimParams {
	return ClaimParams{Key: Key{"billing", "stripe", "evt_1"}, Now: now, Lease: lease, TTL: ttl, Holder: "pod-b", AttemptID: "att-b",
		Salt: saltB, SecretHash: secretB}
}

// held is a record acquired at t0 by pod-a, token 1.
func held(mod func(*Record)) *Record {
	r := NewRecord(ClaimParams{Key: Key{"billing", "stripe", "evt_1"}, Now: t0, Lease: lease, TTL: ttl, Holder: "pod-a", AttemptID: "att-a",
		Salt: saltA, SecretHash: secretA})
	if mod != nil {
		mod(&r)
	}
	return &r
}

func hash(b byte) []byte {
	h := make([]byte, 32)
	h[0] = b
	return h
}

func TestDecide(t *testing.T) {
	tests := []struct {
		desc       string
		cur        *Record
		p          ClaimParams
		outcome    Outcome
		reason     Reason
		write      bool
		token      uint64
		state      State
		windowFrom time.Time // expected start of the window of the answer's record
	}{
		{desc: "absent key", cur: nil, p: params(t0), outcome: OutcomeAcquired, reason: ReasonNew, write: true, token: 1, state: StateReceived, windowFrom: t0},
		{desc: "live lease", cur: held(nil), p: params(t0.Add(lease - time.Nanosecond)), outcome: OutcomeInProgress, token: 1, state: StateReceived, windowFrom: t0},
		{desc: "lease ends: taken over, state kept", cur: held(func(r *Record) { r.State = StateProcessing }), p: params(t0.Add(lease)),
			outcome: OutcomeAcquired, reason: ReasonLeaseExpired, write: true, token: 2, state: StateProcessing, windowFrom: t0},
		{desc: "released: acquired, state restarts", cur: held(func(r *Record) { r.Released, r.State = true, StateValidated }), p: params(t0.Add(time.Second)),
			outcome: OutcomeAcquired, reason: ReasonReleased, write: true, token: 2, state: StateReceived, windowFrom: t0},
		{desc: "settled within window", cur: held(func(r *Record) { r.State = StateSettled }), p: params(t0.Add(ttl - time.Second)),
			outcome: OutcomeDuplicate, token: 1, state: StateSettled, windowFrom: t0},
		{desc: "failed within window", cur: held(func(r *Record) { r.State = StateFailed }), p: params(t0.Add(time.Hour)),
			outcome: OutcomeDuplicate, token: 1, state: StateFailed, windowFrom: t0},
		{desc: "window over: new window", cur: held(func(r *Record) { r.State = StateSettled }), p: params(t0.Add(ttl)),
			outcome: OutcomeAcquired, reason: ReasonWindowExpired, write: true, token: 2, state: StateReceived, windowFrom: t0.Add(ttl)},
		{desc: "same attempt_id with live lease", cur: held(nil), p: func() ClaimParams { p := params(t0.Add(time.Second)); p.AttemptID = "att-a"; return p }(),
			outcome: OutcomeAcquired, reason: ReasonNew, token: 1, state: StateReceived, windowFrom: t0},
		{desc: "empty attempt_id never matches", cur: held(func(r *Record) { r.AttemptID = "" }), p: func() ClaimParams { p := params(t0.Add(time.Second)); p.AttemptID = ""; return p }(),
			outcome: OutcomeInProgress, token: 1, state: StateReceived, windowFrom: t0},
		{desc: "payload mismatch beats terminal", cur: held(func(r *Record) { r.State, r.PayloadHash = StateSettled, hash(1) }),
			p:       func() ClaimParams { p := params(t0.Add(time.Second)); p.PayloadHash = hash(2); return p }(),
			outcome: OutcomePayloadMismatch, token: 1, state: StateSettled, windowFrom: t0},
		{desc: "payload mismatch never takes over", cur: held(func(r *Record) { r.PayloadHash = hash(1) }),
			p:       func() ClaimParams { p := params(t0.Add(2 * lease)); p.PayloadHash = hash(2); return p }(),
			outcome: OutcomePayloadMismatch, token: 1, state: StateReceived, windowFrom: t0},
		{desc: "unknown hash matches", cur: held(func(r *Record) { r.PayloadHash = hash(1) }), p: params(t0.Add(time.Second)),
			outcome: OutcomeInProgress, token: 1, state: StateReceived, windowFrom: t0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			res, next, write := Decide(tc.cur, tc.p)
			if res.Outcome != tc.outcome || res.Reason != tc.reason || write != tc.write {
				t.Fatalf("Decide(%s) = %v/%v write %v, want %v/%v write %v", tc.desc, res.Outcome, res.Reason, write, tc.outcome, tc.reason, tc.write)
			}
			r := res.Record
			if r.Token != tc.token || r.State != tc.state || !r.FirstSeenAt.Equal(tc.windowFrom) || !r.WindowExpiresAt.Equal(tc.windowFrom.Add(ttl)) {
				t.Fatalf("Decide(%s) record token/state/window = %d/%v/%v, want %d/%v/%v", tc.desc, r.Token, r.State, r.FirstSeenAt, tc.token, tc.state, tc.windowFrom)
			}
			if write {
				if diff := cmp.Diff(res.Record, next); diff != "" {
					t.Fatalf("Decide(%s): answered record differs from the stored one (-answer +stored):\n%s", tc.desc, diff)
				}
				if next.Holder != "pod-b" || !next.LeaseExpiresAt.Equal(tc.p.Now.Add(lease)) || next.Released {
					t.Fatalf("Decide(%s) acquired record holder/lease/released = %q/%v/%v", tc.desc, next.Holder, next.LeaseExpiresAt, next.Released)
				}
				if next.AttemptID != "att-b" || !bytes.Equal(next.Salt, saltB) || !bytes.Equal(next.SecretHash, secretB) {
					t.Fatalf("Decide(%s) acquired record attempt/salt/secret hash = %q/%x/%x, want the claimant's", tc.desc, next.AttemptID, next.Salt, next.SecretHash)
				}
				if tc.cur != nil && (next.Version != tc.cur.Version+1 || next.Attempt != tc.cur.Attempt+1) {
					t.Fatalf("Decide(%s) version/attempt = %d/%d, want +1", tc.desc, next.Version, next.Attempt)
				}
			} else if tc.cur != nil && (!bytes.Equal(r.Salt, tc.cur.Salt) || !bytes.Equal(r.SecretHash, tc.cur.SecretHash)) {
				// A repeated attempt answers with the owner's salt and hash,
				// so the owner's secret can be derived again.
				t.Fatalf("Decide(%s) answered salt/secret hash = %x/%x, want the stored %x/%x", tc.desc, r.Salt, r.SecretHash, tc.cur.Salt, tc.cur.SecretHash)
			}
		})
	}
}

func TestApplyTransition(t *testing.T) {
	states := []State{StateReceived, StateValidated, StateProcessing, StateSettled, StateFailed}
	for _, from := range states {
		for _, to := range states {
			cur := held(func(r *Record) {
				r.State = from
				if from.Terminal() {
					r.Result = []byte("r")
				}
			})
			next, changed, err := ApplyTransition(*cur, TransitionParams{Key: cur.Key, Now: t0.Add(time.Second), Token: 1, SecretHash: secretA, To: to, Result: []byte("r")})
			var te *TransitionError
			switch {
			case from == to:
				if err != nil || changed || next.Version != cur.Version {
					t.Errorf("repeat %v→%v = changed %v, %v; want a no-op success", from, to, changed, err)
				}
				if !to.Terminal() {
					break
				}
				_, _, err := ApplyTransition(*cur, TransitionParams{Key: cur.Key, Now: t0.Add(time.Second), Token: 1, SecretHash: secretA, To: to, Result: []byte("other")})
				var rm *ResultMismatchError
				if !errors.As(err, &rm) || rm.Current != from {
					t.Errorf("repeat %v→%v with another result error = %v, want ResultMismatchError with current %v", from, to, err, from)
				}
			case CanTransition(from, to):
				if err != nil || !changed || next.State != to || next.Version != cur.Version+1 {
					t.Errorf("%v→%v = %v changed %v, %v; want applied", from, to, next.State, changed, err)
				}
				if to.Terminal() != (string(next.Result) == "r") {
					t.Errorf("%v→%v result = %q; stored only with a terminal target", from, to, next.Result)
				}
			case !errors.As(err, &te) || te.Current != from:
				t.Errorf("%v→%v error = %v, want TransitionError with current %v", from, to, err, from)
			}
		}
	}
}

func TestFencing(t *testing.T) {
	taken := held(func(r *Record) { r.Token = 3 })
	released := held(func(r *Record) { r.Released = true })
	settled := held(func(r *Record) { r.State = StateSettled })
	now := t0.Add(time.Hour)
	tests := []struct {
		desc string
		op   func() error
		want error
	}{
		{"transition with an older token", func() error {
			_, _, err := ApplyTransition(*taken, TransitionParams{Now: now, Token: 2, SecretHash: secretA, To: StateProcessing})
			return err
		}, ErrStaleToken},
		{"transition with a token never issued", func() error {
			_, _, err := ApplyTransition(*taken, TransitionParams{Now: now, Token: 4, SecretHash: secretA, To: StateProcessing})
			return err
		}, ErrStaleToken},
		{"transition after release", func() error {
			_, _, err := ApplyTransition(*released, TransitionParams{Now: now, Token: 1, SecretHash: secretA, To: StateProcessing})
			return err
		}, ErrStaleToken},
		{"transition after the lease ran out, no takeover", func() error {
			_, _, err := ApplyTransition(*held(nil), TransitionParams{Now: now, Token: 1, SecretHash: secretA, To: StateProcessing})
			return err
		}, nil},
		{"renew with an older token", func() error {
			_, err := ApplyRenew(*taken, RenewParams{Now: now, Token: 1, SecretHash: secretA, Lease: lease})
			return err
		}, ErrStaleToken},
		{"renew after release", func() error {
			_, err := ApplyRenew(*released, RenewParams{Now: now, Token: 1, SecretHash: secretA, Lease: lease})
			return err
		}, ErrStaleToken},
		{"release with an older token", func() error {
			_, _, err := ApplyRelease(*taken, ReleaseParams{Now: now, Token: 1, SecretHash: secretA})
			return err
		}, ErrStaleToken},
		{"transition with the current token and another secret", func() error {
			_, _, err := ApplyTransition(*held(nil), TransitionParams{Now: now, Token: 1, SecretHash: secretB, To: StateProcessing})
			return err
		}, ErrNotOwner},
		{"repeat of an applied transition with another secret", func() error {
			_, _, err := ApplyTransition(*held(nil), TransitionParams{Now: now, Token: 1, SecretHash: secretB, To: StateReceived})
			return err
		}, ErrNotOwner},
		{"transition without a secret", func() error {
			_, _, err := ApplyTransition(*held(nil), TransitionParams{Now: now, Token: 1, To: StateProcessing})
			return err
		}, ErrNotOwner},
		{"transition of a record that has no secret hash, presenting none", func() error {
			_, _, err := ApplyTransition(*held(func(r *Record) { r.SecretHash = nil }), TransitionParams{Now: now, Token: 1, To: StateProcessing})
			return err
		}, ErrNotOwner},
		{"stale token with another secret is stale first", func() error {
			_, _, err := ApplyTransition(*taken, TransitionParams{Now: now, Token: 2, SecretHash: secretB, To: StateProcessing})
			return err
		}, ErrStaleToken},
		{"renew with another secret", func() error {
			_, err := ApplyRenew(*held(nil), RenewParams{Now: now, Token: 1, SecretHash: secretB, Lease: lease})
			return err
		}, ErrNotOwner},
		{"release with another secret", func() error {
			_, _, err := ApplyRelease(*held(nil), ReleaseParams{Now: now, Token: 1, SecretHash: secretB})
			return err
		}, ErrNotOwner},
		{"release of a settled record with another secret", func() error {
			_, _, err := ApplyRelease(*settled, ReleaseParams{Now: now, Token: 1, SecretHash: secretB})
			return err
		}, ErrNotOwner},
		{"release again with its token", func() error {
			_, changed, err := ApplyRelease(*released, ReleaseParams{Now: now, Token: 1, SecretHash: secretA})
			if changed {
				return errors.New("changed")
			}
			return err
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("%s error = %v, want %v", tc.desc, err, tc.want)
			}
		})
	}
	var te *TransitionError
	if _, err := ApplyRenew(*settled, RenewParams{Now: now, Token: 1, SecretHash: secretA, Lease: lease}); !errors.As(err, &te) || te.Current != StateSettled {
		t.Fatalf("renew of a settled record error = %v, want TransitionError current SETTLED", err)
	}
	if _, _, err := ApplyRelease(*settled, ReleaseParams{Now: now, Token: 1, SecretHash: secretA}); !errors.As(err, &te) || te.Current != StateSettled {
		t.Fatalf("release of a settled record error = %v, want TransitionError current SETTLED", err)
	}
}

func TestAllowedFrom(t *testing.T) {
	tests := []struct {
		to   State
		want []State
	}{
		{StateValidated, []State{StateReceived}},
		{StateProcessing, []State{StateReceived, StateValidated}},
		{StateSettled, []State{StateProcessing}},
		{StateFailed, []State{StateReceived, StateValidated, StateProcessing}},
		{StateReceived, nil},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, AllowedFrom(tc.to)); diff != "" {
			t.Errorf("AllowedFrom(%v) (-want +got):\n%s", tc.to, diff)
		}
	}
}

// TestDecideFast walks every branch of the fast tier's decision, in the
// order of Decide, at the edges of the marker, the lease and the window.
// (The conformance suite holds each fast tier's Reserve to DecideFast.)
func TestDecideFast(t *testing.T) {
	const pendingTTL = 5 * time.Second
	k := Key{"billing", "stripe", "evt_1"}
	marker := &Pending{Nonce: "other", Until: t0.Add(pendingTTL)}
	// claimed is pod-a's record, with a payload hash and attempt att-a.
	claimed := func(mod func(*Record)) *Record {
		return held(func(r *Record) {
			r.PayloadHash = hash(1)
			if mod != nil {
				mod(r)
			}
		})
	}
	settled := func(r *Record) { r.State, r.Version, r.Result = StateSettled, 3, []byte("paid") }
	reserve := func(at time.Duration, nonce string, mod func(*ReserveParams)) ReserveParams {
		p := ReserveParams{Key: k, Now: t0.Add(at), Nonce: nonce, PendingTTL: pendingTTL}
		if mod != nil {
			mod(&p)
		}
		return p
	}
	payload := func(b byte) func(*ReserveParams) { return func(p *ReserveParams) { p.PayloadHash = hash(b) } }
	attempt := func(id string) func(*ReserveParams) { return func(p *ReserveParams) { p.AttemptID = id } }
	decided := func(o Outcome, r Reason, rec *Record) FastResult {
		return FastResult{Verdict: FastDecided, Outcome: o, Reason: r, Record: *rec}
	}
	tests := []struct {
		desc     string
		rec      *Record
		marker   *Pending
		p        ReserveParams
		want     FastResult
		wantMark bool
	}{
		{desc: "absent key is reserved", p: reserve(0, "n", nil), want: FastResult{Verdict: FastReserved}, wantMark: true},
		{desc: "another claim's live marker sends the claim to the durable tier, naming the marker", marker: marker, p: reserve(pendingTTL-time.Millisecond, "n", nil),
			want: FastResult{Verdict: FastAskDurable, Marker: marker.Nonce}},
		{desc: "another claim's live marker sends an attempt_id to the durable tier", marker: marker, p: reserve(time.Second, "n", attempt("att-b")),
			want: FastResult{Verdict: FastAskDurable, Marker: marker.Nonce}},
		{desc: "a lapsed marker is replaced", marker: marker, p: reserve(pendingTTL, "n", attempt("att-b")), want: FastResult{Verdict: FastReserved}, wantMark: true},
		{desc: "our own marker is ours again, and placed anew", marker: marker, p: reserve(time.Second, "other", attempt("att-b")), want: FastResult{Verdict: FastReserved}, wantMark: true},
		{desc: "window over goes to the durable tier, even for a settled record", rec: claimed(settled), p: reserve(ttl, "n", nil), want: FastResult{Verdict: FastTakeover}},
		{desc: "window over comes before a payload mismatch", rec: claimed(nil), p: reserve(ttl, "n", payload(2)), want: FastResult{Verdict: FastTakeover}},
		{desc: "last instant of the window", rec: claimed(settled), p: reserve(ttl-time.Microsecond, "n", nil), want: decided(OutcomeDuplicate, ReasonUnspecified, claimed(settled))},
		{desc: "payload mismatch comes before terminal", rec: claimed(settled), p: reserve(time.Hour, "n", payload(2)), want: decided(OutcomePayloadMismatch, ReasonUnspecified, claimed(settled))},
		{desc: "payload mismatch while in progress", rec: claimed(nil), p: reserve(time.Second, "n", payload(2)), want: decided(OutcomePayloadMismatch, ReasonUnspecified, claimed(nil))},
		{desc: "payload mismatch comes before the same attempt_id", rec: claimed(nil), p: reserve(time.Second, "n", func(p *ReserveParams) { p.PayloadHash, p.AttemptID = hash(2), "att-a" }),
			want: decided(OutcomePayloadMismatch, ReasonUnspecified, claimed(nil))},
		{desc: "an unknown stored hash matches", rec: claimed(func(r *Record) { r.PayloadHash = nil }), p: reserve(time.Second, "n", payload(2)),
			want: decided(OutcomeInProgress, ReasonUnspecified, claimed(func(r *Record) { r.PayloadHash = nil }))},
		{desc: "terminal is a duplicate with its result", rec: claimed(settled), p: reserve(time.Hour, "n", nil), want: decided(OutcomeDuplicate, ReasonUnspecified, claimed(settled))},
		{desc: "terminal comes before the same attempt_id", rec: claimed(settled), p: reserve(time.Second, "n", attempt("att-a")), want: decided(OutcomeDuplicate, ReasonUnspecified, claimed(settled))},
		{desc: "same attempt_id within the lease is acquired again with its reason",
			rec: claimed(func(r *Record) { r.Reason, r.Token = ReasonLeaseExpired, 2 }), p: reserve(lease-time.Microsecond, "n", attempt("att-a")),
			want: decided(OutcomeAcquired, ReasonLeaseExpired, claimed(func(r *Record) { r.Reason, r.Token = ReasonLeaseExpired, 2 }))},
		{desc: "same attempt_id after the lease is a takeover", rec: claimed(nil), p: reserve(lease, "n", attempt("att-a")), want: FastResult{Verdict: FastTakeover}},
		{desc: "same attempt_id after a release is a takeover", rec: claimed(func(r *Record) { r.Released = true }), p: reserve(time.Second, "n", attempt("att-a")), want: FastResult{Verdict: FastTakeover}},
		{desc: "released is a takeover even within the lease", rec: claimed(func(r *Record) { r.Released = true }), p: reserve(time.Second, "n", nil), want: FastResult{Verdict: FastTakeover}},
		{desc: "live lease is in progress, one instant before its end", rec: claimed(nil), p: reserve(lease-time.Microsecond, "n", nil), want: decided(OutcomeInProgress, ReasonUnspecified, claimed(nil))},
		{desc: "another attempt_id is in progress", rec: claimed(nil), p: reserve(time.Second, "n", attempt("att-b")), want: decided(OutcomeInProgress, ReasonUnspecified, claimed(nil))},
		{desc: "empty attempt ids are not the same attempt", rec: claimed(func(r *Record) { r.AttemptID = "" }), p: reserve(time.Second, "n", nil),
			want: decided(OutcomeInProgress, ReasonUnspecified, claimed(func(r *Record) { r.AttemptID = "" }))},
		{desc: "lease over is a takeover", rec: claimed(nil), p: reserve(lease, "n", nil), want: FastResult{Verdict: FastTakeover}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, mark := DecideFast(tc.rec, tc.marker, tc.p)
			if diff := cmp.Diff(tc.want, got); diff != "" || mark != tc.wantMark {
				t.Errorf("DecideFast(%s) mark = %v, want %v; result (-want +got):\n%s", tc.desc, mark, tc.wantMark, diff)
			}
		})
	}
}

// TestEntityOrder: an acquisition proceeds in a From state of a free
// entity, waits in a Wait state or behind a live holder, and is superseded
// anywhere else.
func TestEntityOrder(t *testing.T) {
	refund := EntityEvent{From: []string{"succeeded"}, Wait: []string{"new", "pending"}}
	for _, tc := range []struct {
		state string
		busy  bool
		want  Outcome
	}{
		{"succeeded", false, OutcomeAcquired},
		{"succeeded", true, OutcomeDeferred},
		{"new", false, OutcomeDeferred},
		{"pending", true, OutcomeDeferred},
		{"failed", false, OutcomeSuperseded},
		{"failed", true, OutcomeDeferred},
	} {
		if got := refund.Order(tc.state, tc.busy); got != tc.want {
			t.Errorf("Order(%q, busy %v) = %v, want %v", tc.state, tc.busy, got, tc.want)
		}
	}
}

// TestHoldLive: a holder holds its entity only with its own token, before
// a settle, a failure or a release, and while its lease runs.
func TestHoldLive(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	held := Record{Token: 3, State: StateProcessing, LeaseExpiresAt: now.Add(time.Second)}
	for _, tc := range []struct {
		desc string
		h    Record
		want bool
	}{
		{"live", held, true},
		{"taken over", Record{Token: 4, State: StateProcessing, LeaseExpiresAt: now.Add(time.Second)}, false},
		{"settled", Record{Token: 3, State: StateSettled, LeaseExpiresAt: now.Add(time.Second)}, false},
		{"released", Record{Token: 3, State: StateReceived, Released: true, LeaseExpiresAt: now.Add(time.Second)}, false},
		{"lease over", Record{Token: 3, State: StateProcessing, LeaseExpiresAt: now}, false},
	} {
		if got := HoldLive(tc.h, 3, now); got != tc.want {
			t.Errorf("HoldLive(%s) = %v, want %v", tc.desc, got, tc.want)
		}
	}
}
