package postgres_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// Secret hashes a fenced call presents: the owner's (every claim of these
// tests has it), another one, or none.
var (
	owners   = ownerHash
	stranger = bytes.Repeat([]byte{0x77}, tiers.SecretHashBytes)
	noSecret = []byte(nil)
)

// Tokens a fenced call presents, relative to the record's current one.
var (
	current    = func(cur uint64) uint64 { return cur }
	previous   = func(cur uint64) uint64 { return cur - 1 }
	neverGiven = func(cur uint64) uint64 { return cur + 1 }
	huge       = func(uint64) uint64 { return math.MaxUint64 } // beyond bigint
)

// More setups (see claim_test.go for the others).

func absent(*env, string) {}

func validated(e *env, k string) {
	res := e.claim(e.params(k))
	e.transition(k, res.Record.Token, tiers.StateValidated)
}

func failed(e *env, k string) {
	res := e.claim(e.params(k))
	e.transition(k, res.Record.Token, tiers.StateFailed)
}

func released(e *env, k string) {
	rec := toProcessing(e, k)
	if _, err := e.store.Release(e.ctx(), tiers.ReleaseParams{Key: key(k), Now: e.clk.Now(), Token: rec.Token, SecretHash: ownerHash}); err != nil {
		e.t.Fatal(err)
	}
}

// takenOver: pod-a's lease ran out and pod-b took the key over (token 2).
func takenOver(e *env, k string) {
	processing(e, k)
	p := e.params(k)
	p.Now = p.Now.Add(lease)
	p.Holder = "pod-b"
	e.claim(p)
}

// leaseRanOut: pod-a's lease ran out, nobody took over.
func leaseRanOut(e *env, k string) {
	claimed(e, k)
	e.clk.Advance(2 * lease)
}

// fencedCall is a Transition, Renew or Release, and the tiers.Apply* answer
// expected from the record before it.
type fencedCall func(e *env, k string, cur *tiers.Record, token uint64, hash []byte) (got, want fencedAnswer)

type fencedAnswer struct {
	rec     tiers.Record
	changed bool
	err     error
}

func transitionTo(to tiers.State, result []byte, lease time.Duration) fencedCall {
	return func(e *env, k string, cur *tiers.Record, token uint64, hash []byte) (got, want fencedAnswer) {
		p := tiers.TransitionParams{Key: key(k), Now: e.clk.Now(), Token: token, SecretHash: hash, To: to, Result: result, Lease: lease}
		got.rec, got.changed, got.err = e.store.Transition(e.ctx(), p)
		if cur != nil {
			want.rec, want.changed, want.err = tiers.ApplyTransition(*cur, p)
		}
		return got, want
	}
}

// transitionToSettledAgain repeats the SETTLED of setup settled, with the
// result it stored.
func transitionToSettledAgain(e *env, k string, cur *tiers.Record, token uint64, hash []byte) (got, want fencedAnswer) {
	return transitionTo(tiers.StateSettled, []byte("result-of-"+k), 0)(e, k, cur, token, hash)
}

func renewFor(lease time.Duration) fencedCall {
	return func(e *env, k string, cur *tiers.Record, token uint64, hash []byte) (got, want fencedAnswer) {
		p := tiers.RenewParams{Key: key(k), Now: e.clk.Now(), Token: token, SecretHash: hash, Lease: lease}
		got.rec, got.err = e.store.Renew(e.ctx(), p)
		if cur != nil {
			want.rec, want.err = tiers.ApplyRenew(*cur, p)
			want.changed = want.err == nil
		}
		got.changed = want.changed // Renew reports no flag; the stored record tells
		return got, want
	}
}

func release(e *env, k string, cur *tiers.Record, token uint64, hash []byte) (got, want fencedAnswer) {
	p := tiers.ReleaseParams{Key: key(k), Now: e.clk.Now(), Token: token, SecretHash: hash}
	got.rec, got.err = e.store.Release(e.ctx(), p)
	if cur != nil {
		want.rec, want.changed, want.err = tiers.ApplyRelease(*cur, p)
	}
	got.changed = want.changed // Release reports no flag; the stored record tells
	return got, want
}

// TestFencedStatementsMatchApply drives Transition, Renew and Release down
// each path of their fenced UPDATE (and of the read that explains a miss)
// and holds them to tiers.ApplyTransition, ApplyRenew and ApplyRelease: the
// same record, changed flag and error; the same record stored; one audit row
// exactly when something changed.
func TestFencedStatementsMatchApply(t *testing.T) {
	tests := []struct {
		desc    string
		setup   func(e *env, k string)
		token   func(cur uint64) uint64
		call    fencedCall
		wantErr error // nil, tiers.ErrNotFound, tiers.ErrStaleToken, tiers.ErrNotOwner, a *tiers.TransitionError or a *tiers.ResultMismatchError
		hash    []byte
	}{
		{"transition: unknown key", absent, current, transitionTo(tiers.StateProcessing, nil, 0), tiers.ErrNotFound, owners},
		{"transition: RECEIVED→PROCESSING", claimed, current, transitionTo(tiers.StateProcessing, nil, 0), nil, owners},
		{"transition: with a new lease", claimed, current, transitionTo(tiers.StateValidated, nil, 5*time.Minute), nil, owners},
		{"transition: PROCESSING→SETTLED stores the result", processing, current, transitionTo(tiers.StateSettled, []byte("ok"), 0), nil, owners},
		{"transition: SETTLED without a result", processing, current, transitionTo(tiers.StateSettled, nil, 0), nil, owners},
		{"transition: terminal ignores a lease", processing, current, transitionTo(tiers.StateFailed, []byte("no"), 5*time.Minute), nil, owners},
		{"transition: repeat is a no-op", processing, current, transitionTo(tiers.StateProcessing, nil, 0), nil, owners},
		{"transition: repeat of SETTLED with its result is a no-op", settled, current, transitionToSettledAgain, nil, owners},
		{"transition: repeat of SETTLED with another result refused", settled, current, transitionTo(tiers.StateSettled, []byte("second"), 0), &tiers.ResultMismatchError{Current: tiers.StateSettled}, owners},
		{"transition: RECEIVED→SETTLED refused", claimed, current, transitionTo(tiers.StateSettled, nil, 0), &tiers.TransitionError{Current: tiers.StateReceived, To: tiers.StateSettled, Op: "transition"}, owners},
		{"transition: SETTLED→FAILED refused", settled, current, transitionTo(tiers.StateFailed, nil, 0), &tiers.TransitionError{Current: tiers.StateSettled, To: tiers.StateFailed, Op: "transition"}, owners},
		{"transition: back to RECEIVED refused", validated, current, transitionTo(tiers.StateReceived, nil, 0), &tiers.TransitionError{Current: tiers.StateValidated, To: tiers.StateReceived, Op: "transition"}, owners},
		{"transition: old holder after takeover", takenOver, previous, transitionTo(tiers.StateSettled, nil, 0), tiers.ErrStaleToken, owners},
		{"transition: token never issued", claimed, neverGiven, transitionTo(tiers.StateProcessing, nil, 0), tiers.ErrStaleToken, owners},
		{"transition: token beyond bigint", claimed, huge, transitionTo(tiers.StateProcessing, nil, 0), tiers.ErrStaleToken, owners},
		{"transition: released token", released, current, transitionTo(tiers.StateSettled, nil, 0), tiers.ErrStaleToken, owners},
		{"transition: lease ran out, nobody took over", leaseRanOut, current, transitionTo(tiers.StateProcessing, nil, 0), nil, owners},

		{"renew: unknown key", absent, current, renewFor(lease), tiers.ErrNotFound, owners},
		{"renew: holder extends its lease", claimed, current, renewFor(5 * time.Minute), nil, owners},
		{"renew: lease ran out, nobody took over", leaseRanOut, current, renewFor(lease), nil, owners},
		{"renew: old holder after takeover", takenOver, previous, renewFor(lease), tiers.ErrStaleToken, owners},
		{"renew: token never issued", claimed, neverGiven, renewFor(lease), tiers.ErrStaleToken, owners},
		{"renew: token beyond bigint", claimed, huge, renewFor(lease), tiers.ErrStaleToken, owners},
		{"renew: released", released, current, renewFor(lease), tiers.ErrStaleToken, owners},
		{"renew: settled", settled, current, renewFor(lease), &tiers.TransitionError{Current: tiers.StateSettled, Op: "renew"}, owners},

		{"release: unknown key", absent, current, release, tiers.ErrNotFound, owners},
		{"release: holder gives the key back", processing, current, release, nil, owners},
		{"release: repeat is a no-op", released, current, release, nil, owners},
		{"release: old holder after takeover", takenOver, previous, release, tiers.ErrStaleToken, owners},
		{"release: token never issued", claimed, neverGiven, release, tiers.ErrStaleToken, owners},
		{"release: token beyond bigint", claimed, huge, release, tiers.ErrStaleToken, owners},
		{"release: failed", failed, current, release, &tiers.TransitionError{Current: tiers.StateFailed, Op: "release"}, owners},

		// The current token without its owner's secret hash: refused before
		// the state machine is asked, so even a repeat changes nothing.
		{"transition: another secret", claimed, current, transitionTo(tiers.StateProcessing, nil, 0), tiers.ErrNotOwner, stranger},
		{"transition: no secret", claimed, current, transitionTo(tiers.StateProcessing, nil, 0), tiers.ErrNotOwner, noSecret},
		{"transition: repeat with another secret", processing, current, transitionTo(tiers.StateProcessing, nil, 0), tiers.ErrNotOwner, stranger},
		{"transition: repeat of SETTLED with another secret", settled, current, transitionTo(tiers.StateSettled, []byte("forged"), 0), tiers.ErrNotOwner, stranger},
		{"transition: SETTLED→FAILED with another secret", settled, current, transitionTo(tiers.StateFailed, nil, 0), tiers.ErrNotOwner, stranger},
		{"transition: released token with another secret", released, current, transitionTo(tiers.StateSettled, nil, 0), tiers.ErrNotOwner, stranger},
		{"transition: old holder with another secret is stale", takenOver, previous, transitionTo(tiers.StateSettled, nil, 0), tiers.ErrStaleToken, stranger},
		{"renew: another secret", claimed, current, renewFor(lease), tiers.ErrNotOwner, stranger},
		{"renew: settled, another secret", settled, current, renewFor(lease), tiers.ErrNotOwner, stranger},
		{"release: another secret", processing, current, release, tiers.ErrNotOwner, stranger},
		{"release: repeat with another secret", released, current, release, tiers.ErrNotOwner, stranger},
		{"release: failed, another secret", failed, current, release, tiers.ErrNotOwner, stranger},
	}
	e := newEnv(t)
	start := e.clk.Now()
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e.t = t
			e.clk.Set(start)
			k := tc.desc
			tc.setup(e, k)
			e.clk.Advance(time.Second)
			before := e.get(k)
			var tok uint64 = 1
			if before != nil {
				tok = before.Token
			}
			auditBefore := len(e.audit(k))

			got, want := tc.call(e, k, before, tc.token(tok), tc.hash)
			if before == nil {
				want.err = tiers.ErrNotFound
			}
			checkErr(t, k, got.err, want.err)
			checkErr(t, k, got.err, tc.wantErr)
			if diff := cmp.Diff(want.rec, got.rec); diff != "" {
				t.Errorf("%s: record differs from tiers.Apply* (-want +got):\n%s", k, diff)
			}
			if got.changed != want.changed {
				t.Errorf("%s: changed = %v, want %v", k, got.changed, want.changed)
			}
			after := e.get(k)
			wantAfter := before
			if want.changed {
				wantAfter = &want.rec
			}
			if diff := cmp.Diff(wantAfter, after); diff != "" {
				t.Errorf("%s: stored record (-want +got):\n%s", k, diff)
			}
			wantAudit := auditBefore
			if want.changed {
				wantAudit++
			}
			if n := len(e.audit(k)); n != wantAudit {
				t.Errorf("%s: audit rows = %d, want %d", k, n, wantAudit)
			}
		})
	}
}

// checkErr compares err with want: both nil, the same sentinel, or equal
// *tiers.TransitionErrors or *tiers.ResultMismatchErrors.
func checkErr(t *testing.T, call string, err, want error) {
	t.Helper()
	var (
		wantTE *tiers.TransitionError
		wantRM *tiers.ResultMismatchError
	)
	switch {
	case want == nil:
		if err != nil {
			t.Fatalf("%s error = %v, want nil", call, err)
		}
	case errors.As(want, &wantRM):
		var rm *tiers.ResultMismatchError
		if !errors.As(err, &rm) || *rm != *wantRM {
			t.Fatalf("%s error = %v, want %v", call, err, wantRM)
		}
	case errors.As(want, &wantTE):
		var te *tiers.TransitionError
		if !errors.As(err, &te) {
			t.Fatalf("%s error = %v, want *tiers.TransitionError", call, err)
		}
		if diff := cmp.Diff(wantTE, te); diff != "" {
			t.Fatalf("%s TransitionError (-want +got):\n%s", call, diff)
		}
	case errors.Is(want, tiers.ErrNotFound):
		if !errors.Is(err, tiers.ErrNotFound) {
			t.Fatalf("%s error = %v, want ErrNotFound", call, err)
		}
	case errors.Is(want, tiers.ErrStaleToken):
		if !errors.Is(err, tiers.ErrStaleToken) {
			t.Fatalf("%s error = %v, want ErrStaleToken", call, err)
		}
	case errors.Is(want, tiers.ErrNotOwner):
		if !errors.Is(err, tiers.ErrNotOwner) {
			t.Fatalf("%s error = %v, want ErrNotOwner", call, err)
		}
	default:
		t.Fatalf("checkErr: unexpected want %v", want)
	}
}

func TestPruneBoundsAndLimits(t *testing.T) {
	e := newEnv(t)
	t0 := e.clk.Now()
	for _, k := range []string{"p1", "p2", "p3"} {
		e.claim(e.params(k))
	}
	if n, err := e.store.Prune(e.ctx(), t0.Add(ttl+time.Hour), 0); err != nil || n != 0 {
		t.Errorf("Prune(limit 0) = %d, %v; want 0, nil", n, err)
	}
	// The window includes every instant before its end: a cutoff at the
	// end itself deletes nothing.
	if n, err := e.store.Prune(e.ctx(), t0.Add(ttl), 10); err != nil || n != 0 {
		t.Errorf("Prune(cutoff = window end) = %d, %v; want 0, nil", n, err)
	}
	if n, err := e.store.Prune(e.ctx(), t0.Add(ttl+time.Microsecond), 10); err != nil || n != 3 {
		t.Errorf("Prune(cutoff after window end) = %d, %v; want 3, nil", n, err)
	}
	if claims, _, err := e.store.Stats(e.ctx()); err != nil || claims != 0 {
		t.Errorf("Stats() claims = %d, %v; want 0", claims, err)
	}
}

// TestRowsFromBeforeLeaseSecrets covers a record claimed by a binary that
// stored no salt or secret hash (before migration 0003): nobody can prove
// ownership of it, so every fenced write is refused as not the owner (the
// UPDATE compares with NULL and the Apply function names the miss), and the
// next takeover gives it an owner that can.
func TestRowsFromBeforeLeaseSecrets(t *testing.T) {
	e := newEnv(t)
	const k = "evt_old"
	e.claim(e.params(k))
	if _, err := e.db.Exec(e.ctx(), `UPDATE claims SET salt = NULL, secret_hash = NULL WHERE key = $1`, k); err != nil {
		t.Fatal(err)
	}
	for _, hash := range [][]byte{noSecret, owners} {
		_, _, err := e.store.Transition(e.ctx(), tiers.TransitionParams{Key: key(k), Now: e.clk.Now(), Token: 1, SecretHash: hash, To: tiers.StateProcessing})
		checkErr(t, "Transition(row without a secret hash)", err, tiers.ErrNotOwner)
		_, err = e.store.Release(e.ctx(), tiers.ReleaseParams{Key: key(k), Now: e.clk.Now(), Token: 1, SecretHash: hash})
		checkErr(t, "Release(row without a secret hash)", err, tiers.ErrNotOwner)
	}
	e.clk.Advance(lease)
	res := e.claim(e.params(k))
	if res.Reason != tiers.ReasonLeaseExpired || !bytes.Equal(res.Record.SecretHash, ownerHash) || !bytes.Equal(res.Record.Salt, ownerSalt) {
		t.Fatalf("Claim(after the lease) = %v/%v salt %x hash %x, want LEASE_EXPIRED with the claimant's", res.Outcome, res.Reason, res.Record.Salt, res.Record.SecretHash)
	}
	e.transition(k, res.Record.Token, tiers.StateProcessing)
}

// TestMissesWriteNoAuditRows: refused and missing-key calls write nothing,
// no audit row either (a flood of Transitions on unknown keys must not grow
// a log kept for months).
func TestMissesWriteNoAuditRows(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	settled(e, "evt_held")
	count := func() int {
		var n int
		if err := e.db.QueryRow(ctx, `SELECT count(*) FROM audit_log`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	now := e.clk.Now()
	for i := range 50 {
		k := key(fmt.Sprintf("evt_missing_%d", i))
		e.store.Transition(ctx, tiers.TransitionParams{Key: k, Now: now, Token: 1, SecretHash: owners, To: tiers.StateProcessing})
		e.store.Renew(ctx, tiers.RenewParams{Key: k, Now: now, Token: 1, SecretHash: owners, Lease: lease})
		e.store.Release(ctx, tiers.ReleaseParams{Key: k, Now: now, Token: 1, SecretHash: owners})
	}
	held := key("evt_held")
	e.store.Transition(ctx, tiers.TransitionParams{Key: held, Now: now, Token: 2, SecretHash: owners, To: tiers.StateSettled})                      // stale token
	e.store.Transition(ctx, tiers.TransitionParams{Key: held, Now: now, Token: 1, SecretHash: noSecret, To: tiers.StateSettled})                    // not the owner
	e.store.Transition(ctx, tiers.TransitionParams{Key: held, Now: now, Token: 1, SecretHash: owners, To: tiers.StateProcessing})                   // invalid transition
	e.store.Transition(ctx, tiers.TransitionParams{Key: held, Now: now, Token: 1, SecretHash: owners, To: tiers.StateSettled, Result: []byte("x")}) // result mismatch
	e.store.Renew(ctx, tiers.RenewParams{Key: held, Now: now, Token: 1, SecretHash: owners, Lease: lease})                                          // terminal
	e.store.Release(ctx, tiers.ReleaseParams{Key: held, Now: now, Token: 1, SecretHash: owners})                                                    // terminal
	if after := count(); after != before {
		t.Fatalf("audit rows after 150 missing-key and 5 refused calls = %d, want %d (unchanged)", after, before)
	}
}
