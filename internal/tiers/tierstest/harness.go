// Package tierstest is the conformance suite of the storage contract in
// package tiers. Every backend and every pairing of a fast and a durable tier
// runs it unchanged, so that the embedded default, PostgreSQL alone and
// Redis+PostgreSQL give the same answer to the same sequence of calls.
package tierstest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
)

// Opener opens a store over one environment (a database, a data directory, a
// key prefix). Calling it again after the previous store was closed must open
// a store over the same data: a restart of claimd.
type Opener func(t *testing.T) tiers.Store

// Factory prepares the environment of one subtest and returns its Opener.
// It is called inside each subtest; it registers cleanup on that t. The
// environment need not be fresh: every case works in a namespace of its own
// (and the pruning case in a past no other case reaches), so a factory may
// hand every case the same database or server, and cases run in parallel.
type Factory func(t *testing.T) Opener

// The suite uses the real stripe window (72h horizon + 12h margin), not a
// shortened one, so window arithmetic is exercised at its production size.
const (
	stripeTTL = 84 * time.Hour
	lease     = 60 * time.Second
)

// env is one subtest's world: a store, a fake clock and a namespace no other
// subtest uses (so a shared server can back every subtest).
type env struct {
	t     *testing.T
	open  Opener
	store tiers.Store
	clk   *clock.Fake
	ns    string
}

func newEnv0() *clock.Fake { return clock.NewFake(time.Now()) }

func newEnv(t *testing.T, f Factory) *env {
	t.Helper()
	open := f(t)
	e := &env{t: t, open: open, clk: clock.NewFake(time.Now()), ns: "t" + randHex(6)}
	e.store = open(t)
	t.Cleanup(func() { e.store.Close() })
	return e
}

// restart closes the store and opens a new one over the same data.
func (e *env) restart() {
	e.t.Helper()
	if err := e.store.Close(); err != nil {
		e.t.Fatalf("Close() = %v", err)
	}
	e.store = e.open(e.t)
}

func (e *env) key(k string) tiers.Key {
	return tiers.Key{Namespace: e.ns, Provider: "stripe", Key: k}
}

// params is a claim of k by pod-a. Like the service, it gives every claim a
// salt and secret hash of its own; a store that acquires must keep them.
func (e *env) params(k string) tiers.ClaimParams {
	return tiers.ClaimParams{Key: e.key(k), Now: e.clk.Now(), Lease: lease, TTL: stripeTTL, Holder: "pod-a",
		Salt: randBytes(tiers.SaltBytes), SecretHash: secretHash()}
}

// secretHash is the hash of a fresh random lease secret.
func secretHash() []byte {
	h := sha256.Sum256(randBytes(16))
	return h[:]
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// claim claims p and fails the test on error.
//
// It claims as the service does: a store that answers some claims from
// memory (tiers.LocalAnswerer) is asked first, with none of p's ownership,
// which such an answer must not need, and only the rest go to Claim. So every
// case of the suite holds the local answers to what Claim must answer.
func (e *env) claim(p tiers.ClaimParams) tiers.ClaimResult {
	e.t.Helper()
	if l, ok := e.store.(tiers.LocalAnswerer); ok {
		q := p
		q.AttemptID, q.Salt, q.SecretHash = "", nil, nil
		if res, ok := l.AnswerLocally(q); ok {
			if res.ServedBy != tiers.TierLocal || (res.Outcome != tiers.OutcomeDuplicate && res.Outcome != tiers.OutcomePayloadMismatch) {
				e.t.Fatalf("AnswerLocally(%q) = %v served by %v, want DUPLICATE or PAYLOAD_MISMATCH served LOCAL", p.Key.Key, res.Outcome, res.ServedBy)
			}
			return res
		}
	}
	res, err := e.store.Claim(e.ctx(), p)
	if err != nil {
		e.t.Fatalf("Claim(%q) error = %v", p.Key.Key, err)
	}
	return res
}

// mustOutcome claims p and checks the outcome and reason.
func (e *env) mustOutcome(p tiers.ClaimParams, want tiers.Outcome, wantReason tiers.Reason) tiers.ClaimResult {
	e.t.Helper()
	res := e.claim(p)
	if res.Outcome != want || res.Reason != wantReason {
		e.t.Fatalf("Claim(%q) = %v/%v, want %v/%v", p.Key.Key, res.Outcome, res.Reason, want, wantReason)
	}
	if res.Record.Key != p.Key {
		e.t.Fatalf("Claim(%q) record key = %v, want %v", p.Key.Key, res.Record.Key, p.Key)
	}
	return res
}

// owner is what a holder presents on a fenced write: the token and secret
// hash of the record its claim acquired. The suite presents the stored hash
// itself; hashing the secret is the service's job.
type owner struct {
	token uint64
	hash  []byte
}

// ownerOf is the owner of acquired record r.
func ownerOf(r tiers.Record) owner { return owner{token: r.Token, hash: r.SecretHash} }

// stale is o presenting a token one past its own (never issued).
func (o owner) stale() owner { return owner{token: o.token + 1, hash: o.hash} }

// stranger is o's token with a secret hash that is not o's: what a caller
// that learned the token from Get could present.
func (o owner) stranger() owner { return owner{token: o.token, hash: secretHash()} }

func (e *env) transition(k string, o owner, to tiers.State, result []byte) (tiers.Record, bool, error) {
	return e.store.Transition(e.ctx(), tiers.TransitionParams{Key: e.key(k), Now: e.clk.Now(), Token: o.token, SecretHash: o.hash, To: to, Result: result})
}

func (e *env) renew(k string, o owner, d time.Duration) (tiers.Record, error) {
	return e.store.Renew(e.ctx(), tiers.RenewParams{Key: e.key(k), Now: e.clk.Now(), Token: o.token, SecretHash: o.hash, Lease: d})
}

func (e *env) release(k string, o owner) (tiers.Record, error) {
	return e.store.Release(e.ctx(), tiers.ReleaseParams{Key: e.key(k), Now: e.clk.Now(), Token: o.token, SecretHash: o.hash})
}

// mustTransition moves k through the given states as owner o.
func (e *env) mustTransition(k string, o owner, states ...tiers.State) tiers.Record {
	e.t.Helper()
	var rec tiers.Record
	for _, to := range states {
		var result []byte
		if to.Terminal() {
			result = []byte("result-of-" + k)
		}
		var err error
		rec, _, err = e.transition(k, o, to, result)
		if err != nil {
			e.t.Fatalf("Transition(%q, token %d, →%v) error = %v", k, o.token, to, err)
		}
		if rec.State != to {
			e.t.Fatalf("Transition(%q, →%v) state = %v", k, to, rec.State)
		}
	}
	return rec
}

func randHex(n int) string { return hex.EncodeToString(randBytes(n)) }

func randBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

func sha(s string) []byte {
	h := make([]byte, 32)
	copy(h, s)
	return h
}

func wantErr(t *testing.T, call string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s error = %v, want %v", call, err, target)
	}
}

func wantTransitionError(t *testing.T, call string, err error, current tiers.State) {
	t.Helper()
	var te *tiers.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("%s error = %v, want *tiers.TransitionError", call, err)
	}
	if te.Current != current {
		t.Fatalf("%s error current state = %v, want %v", call, te.Current, current)
	}
}

func wantResultMismatch(t *testing.T, call string, err error, current tiers.State) {
	t.Helper()
	var rm *tiers.ResultMismatchError
	if !errors.As(err, &rm) {
		t.Fatalf("%s error = %v, want *tiers.ResultMismatchError", call, err)
	}
	if rm.Current != current {
		t.Fatalf("%s error current state = %v, want %v", call, rm.Current, current)
	}
}
