package tierstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
)

// The cases of this file hold every backend to the one written decision
// order: a durable tier's Claim to tiers.Decide, a fast tier's Reserve to
// tiers.DecideFast, each over a generated table of what the tier holds ×
// what the claim asks, at the edges of the lease and the window. The Go
// backends call those functions; the SQL statements and the Lua script
// spell them again, and this is where a drift shows.

// maxMismatches bounds the disagreements one table reports: past a few,
// more say nothing new.
const maxMismatches = 10

// workers bounds the rows of a table checked at once: enough to overlap
// round trips to a server, few enough not to exhaust a connection pool.
const workers = 4

// table checks rows 0 … n-1 with check, on up to workers goroutines. check
// returns a description of what disagreed, or "" when the row agrees, and
// an error when the row could not be checked at all. t fails with the first
// maxMismatches descriptions and the first error.
func table(t *testing.T, n int, check func(i int) (string, error)) {
	t.Helper()
	var (
		mu         sync.Mutex
		mismatches []string
		firstErr   error
		next       atomic.Int64
		wg         sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				diff, err := check(i)
				mu.Lock()
				stop := err != nil || len(mismatches) >= maxMismatches
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if diff != "" && len(mismatches) < maxMismatches {
					mismatches = append(mismatches, diff)
				}
				mu.Unlock()
				if stop {
					next.Store(int64(n)) // the others stop after their row
					return
				}
			}
		})
	}
	wg.Wait()
	for _, m := range mismatches {
		t.Error(m)
	}
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if len(mismatches) >= maxMismatches {
		t.Fatalf("stopped after %d disagreements", maxMismatches)
	}
}

// A history is how a durable record came to be what it is: claimed first
// (or taken over from a vanished holder) at t0 by its owner, with or without
// a payload hash and an attempt_id, then moved to state, and released or
// not. The nil history is a key never claimed.
type history struct {
	payload  []byte
	attempt  string
	takeover bool
	state    tiers.State
	released bool
}

func (h *history) String() string {
	if h == nil {
		return "absent"
	}
	var b strings.Builder
	if h.takeover {
		b.WriteString("taken over")
	} else {
		b.WriteString("claimed")
	}
	if h.payload != nil {
		b.WriteString(" with a payload hash")
	}
	if h.attempt != "" {
		b.WriteString(" and attempt " + h.attempt)
	}
	b.WriteString(", " + h.state.String())
	if h.released {
		b.WriteString(", released")
	}
	return b.String()
}

var allStates = []tiers.State{tiers.StateReceived, tiers.StateValidated, tiers.StateProcessing, tiers.StateSettled, tiers.StateFailed}

// owners are the ways an owner may have acquired a record: with or without
// a payload hash (an unknown one matches anything), with or without an
// attempt_id (only a non-empty one is ever the same attempt), and by a
// takeover (LEASE_EXPIRED, token 2: the reason its own attempt gets back).
var owners = []history{
	{},
	{payload: sha("one")},
	{payload: sha("one"), attempt: "att-1"},
	{payload: sha("one"), attempt: "att-1", takeover: true},
}

// histories lists the records a table starts from: the absent key, and
// every owner's record in every state, released or not.
func histories() []*history {
	hs := []*history{nil}
	for _, o := range owners {
		for _, st := range allStates {
			for _, released := range []bool{false, true} {
				if released && st.Terminal() {
					continue
				}
				h := o
				h.state, h.released = st, released
				hs = append(hs, &h)
			}
		}
	}
	return hs
}

// A durableClaim is a claim that meets a history's record, by pod-b with a
// salt and secret hash of its own.
type durableClaim struct {
	when    string
	at      func(t0 time.Time, before *tiers.Record) time.Time
	payload []byte
	attempt string
	start   bool // ClaimParams.Start
}

func (c durableClaim) String() string {
	s := "a claim " + c.when
	switch {
	case c.payload == nil:
		s += ", no payload hash"
	default:
		s += fmt.Sprintf(", payload hash %q", strings.TrimRight(string(c.payload), "\x00"))
	}
	if c.attempt != "" {
		s += ", attempt " + c.attempt
	}
	if c.start {
		s += ", start"
	}
	return s
}

// windowEnd is the end of before's window, or of the window a first claim
// at t0 opens.
func windowEnd(t0 time.Time, before *tiers.Record) time.Time {
	if before == nil {
		return t0.Add(stripeTTL)
	}
	return before.WindowExpiresAt
}

func durableClaims() []durableClaim {
	times := []struct {
		when string
		at   func(t0 time.Time, before *tiers.Record) time.Time
	}{
		{"1s into the lease", func(t0 time.Time, _ *tiers.Record) time.Time { return t0.Add(time.Second) }},
		{"at the lease's end", func(t0 time.Time, _ *tiers.Record) time.Time { return t0.Add(lease) }},
		{"at the window's last instant", func(t0 time.Time, b *tiers.Record) time.Time { return windowEnd(t0, b).Add(-time.Millisecond) }},
		{"at the window's end", windowEnd},
	}
	var cs []durableClaim
	for _, tm := range times {
		for _, payload := range [][]byte{nil, sha("one"), sha("two")} {
			for _, attempt := range []string{"", "att-1"} {
				cs = append(cs, durableClaim{when: tm.when, at: tm.at, payload: payload, attempt: attempt})
			}
		}
		// A claim that starts the work, at each instant: enough to meet
		// every state an acquisition can start from.
		cs = append(cs, durableClaim{when: tm.when, at: tm.at, start: true})
	}
	return cs
}

// testClaimMatchesDecide meets every history's record with every claim of
// durableClaims: the answer, and the record stored after it, must be
// exactly what tiers.Decide computes from the record stored before. A claim
// that Decide says writes nothing must leave the record as it was, so the
// next claim meets the same record; after one that writes, the history is
// built again under a new key.
func testClaimMatchesDecide(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := e.clk.Now()
	hs, cs := histories(), durableClaims()
	var keys atomic.Int64
	table(t, len(hs), func(i int) (string, error) {
		h := hs[i]
		var (
			k      string        // the key holding h's record, unchanged by the claims so far
			before *tiers.Record // its record
		)
		for _, c := range cs {
			if k == "" {
				k = fmt.Sprintf("evt_decide_%d", keys.Add(1))
				var err error
				if before, err = e.build(ctx, k, h, t0); err != nil {
					return "", fmt.Errorf("building %q (%v): %w", k, h, err)
				}
			}
			p := e.params(k)
			p.Now, p.PayloadHash, p.AttemptID, p.Holder, p.Start = c.at(t0, before), c.payload, c.attempt, "pod-b", c.start
			want, next, write := tiers.Decide(before, p)
			want.ServedBy = tiers.TierDurable
			got, err := e.store.Claim(ctx, p)
			if err != nil {
				return "", fmt.Errorf("%v meets %v: Claim(%q) error = %w", c, h, k, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				return fmt.Sprintf("%v meets %v: Claim(%q) differs from tiers.Decide (-Decide +Claim):\n%s", c, h, k, diff), nil
			}
			after, err := e.get(ctx, k)
			if err != nil {
				return "", err
			}
			if write {
				before = &next
			}
			if diff := cmp.Diff(before, after); diff != "" {
				return fmt.Sprintf("%v meets %v: record after Claim(%q) differs from tiers.Decide's (-Decide +stored):\n%s", c, h, k, diff), nil
			}
			if write {
				k = ""
			}
		}
		return "", nil
	})
}

// get returns the record of k, nil when there is none.
func (e *env) get(ctx context.Context, k string) (*tiers.Record, error) {
	rec, err := e.store.Get(ctx, e.key(k))
	switch {
	case errors.Is(err, tiers.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("Get(%q) error = %w", k, err)
	}
	return &rec, nil
}

// build gives k the record of history h, its owner acquiring it at t0, and
// returns that record as Get reads it.
func (e *env) build(ctx context.Context, k string, h *history, t0 time.Time) (*tiers.Record, error) {
	if h == nil {
		return nil, nil
	}
	claim := func(p tiers.ClaimParams, want tiers.Reason) (tiers.Record, error) {
		res, err := e.store.Claim(ctx, p)
		if err == nil && (res.Outcome != tiers.OutcomeAcquired || res.Reason != want) {
			err = fmt.Errorf("Claim(%q) = %v/%v, want ACQUIRED/%v", k, res.Outcome, res.Reason, want)
		}
		return res.Record, err
	}
	p := e.params(k)
	p.Now, p.PayloadHash, p.AttemptID = t0, h.payload, h.attempt
	reason := tiers.ReasonNew
	if h.takeover {
		vanished := e.params(k)
		vanished.Now, vanished.PayloadHash, vanished.AttemptID, vanished.Holder = t0.Add(-lease), h.payload, "att-z", "pod-z"
		if _, err := claim(vanished, tiers.ReasonNew); err != nil {
			return nil, err
		}
		reason = tiers.ReasonLeaseExpired
	}
	rec, err := claim(p, reason)
	if err != nil {
		return nil, err
	}
	o := ownerOf(rec)
	for _, to := range pathTo[h.state] {
		var result []byte
		if to.Terminal() {
			result = []byte("result-of-" + k)
		}
		tp := tiers.TransitionParams{Key: e.key(k), Now: t0, Token: o.token, SecretHash: o.hash, To: to, Result: result}
		if _, _, err := e.store.Transition(ctx, tp); err != nil {
			return nil, fmt.Errorf("Transition(%q, →%v) error = %w", k, to, err)
		}
	}
	if h.released {
		if _, err := e.store.Release(ctx, tiers.ReleaseParams{Key: e.key(k), Now: t0, Token: o.token, SecretHash: o.hash}); err != nil {
			return nil, fmt.Errorf("Release(%q) error = %w", k, err)
		}
	}
	return e.get(ctx, k)
}

// A fastEntry is what a fast tier holds under a key: a record (rec), a
// pending marker placed at t0 with nonce markerNonce, or nothing.
type fastEntry struct {
	desc   string
	rec    *tiers.Record
	marker bool
}

const markerNonce = "n-marker"

// fastEntries lists the entries a fast table starts from: nothing, a
// marker, and the record of every history, as the durable tier would hand
// it over; a released one with its lease still running, so that released
// is seen to come first.
func fastEntries(t0 time.Time) []fastEntry {
	es := []fastEntry{{desc: "absent"}, {desc: "another claim's marker", marker: true}}
	for _, h := range histories()[1:] {
		rec := tiers.NewRecord(tiers.ClaimParams{
			Key: tiers.Key{Provider: "stripe"}, Now: t0, Lease: lease, TTL: stripeTTL,
			PayloadHash: h.payload, Holder: "pod-a", AttemptID: h.attempt,
			Salt: sha("salt")[:tiers.SaltBytes], SecretHash: sha("secret"),
		})
		rec.State, rec.Released = h.state, h.released
		rec.Version = uint64(1 + len(pathTo[h.state]))
		if h.takeover {
			rec.Token, rec.Attempt, rec.Reason = 2, 2, tiers.ReasonLeaseExpired
			rec.Version++
		}
		if h.released {
			rec.Version++
		}
		if h.state.Terminal() {
			rec.Result = []byte("result")
		}
		es = append(es, fastEntry{desc: "a record " + h.String(), rec: &rec})
	}
	return es
}

// A fastClaim is a Reserve that meets an entry: at t0+at, with our own
// nonce or the marker's.
type fastClaim struct {
	when    string
	at      time.Duration
	nonce   string
	payload []byte
	attempt string
}

func (c fastClaim) String() string {
	s := "a Reserve " + c.when + " with nonce " + c.nonce
	if c.payload != nil {
		s += fmt.Sprintf(", payload hash %q", strings.TrimRight(string(c.payload), "\x00"))
	}
	if c.attempt != "" {
		s += ", attempt " + c.attempt
	}
	return s
}

func fastClaims() []fastClaim {
	times := []struct {
		when string
		at   time.Duration
	}{
		{"at t0", 0},
		{"at the marker's last instant", pendingTTL - time.Microsecond},
		{"at the marker's end", pendingTTL},
		{"at the lease's last instant", lease - time.Microsecond},
		{"at the lease's end", lease},
		{"at the window's last instant", stripeTTL - time.Microsecond},
		{"at the window's end", stripeTTL},
	}
	var cs []fastClaim
	for _, tm := range times {
		for _, nonce := range []string{"n-ours", markerNonce} {
			for _, payload := range [][]byte{nil, sha("one"), sha("two")} {
				for _, attempt := range []string{"", "att-1", "att-2"} {
					cs = append(cs, fastClaim{when: tm.when, at: tm.at, nonce: nonce, payload: payload, attempt: attempt})
				}
			}
		}
	}
	return cs
}

// testReserveMatchesDecideFast meets every entry of fastEntries with every
// claim of fastClaims, each under a key of its own: the verdict, and for
// FastDecided the outcome, reason and record, must be what tiers.DecideFast
// answers. Where it says a marker is written, a Reserve with another nonce
// must meet that marker until it ends, PendingTTL after the claim.
func testReserveMatchesDecideFast(t *testing.T, fe *fastEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := clock.NewFake(time.Now()).Now()
	type row struct {
		en fastEntry
		c  fastClaim
	}
	var rows []row
	for _, en := range fastEntries(t0) {
		for _, c := range fastClaims() {
			// A nonce names a marker: against a record it decides nothing.
			if en.rec == nil || c.nonce != markerNonce {
				rows = append(rows, row{en, c})
			}
		}
	}
	table(t, len(rows), func(i int) (string, error) {
		en, c := rows[i].en, rows[i].c
		k := fe.e.key(fmt.Sprintf("evt_decide_fast_%d", i))
		var (
			rec    *tiers.Record
			marker *tiers.Pending
		)
		switch {
		case en.marker:
			marker = &tiers.Pending{Nonce: markerNonce, Until: t0.Add(pendingTTL)}
			if _, err := fe.f.Reserve(ctx, tiers.ReserveParams{Key: k, Now: t0, Nonce: markerNonce, PendingTTL: pendingTTL}); err != nil {
				return "", fmt.Errorf("Reserve(%q) placing a marker: %w", k.Key, err)
			}
		case en.rec != nil:
			r := *en.rec
			r.Key = k
			rec = &r
			if err := fe.f.Put(ctx, r); err != nil {
				return "", fmt.Errorf("Put(%q): %w", k.Key, err)
			}
		}
		p := tiers.ReserveParams{Key: k, Now: t0.Add(c.at), Nonce: c.nonce, PendingTTL: pendingTTL, PayloadHash: c.payload, AttemptID: c.attempt}
		want, mark := tiers.DecideFast(rec, marker, p)
		got, err := fe.f.Reserve(ctx, p)
		if err != nil {
			return "", fmt.Errorf("%v meets %s: Reserve(%q) error = %w", c, en.desc, k.Key, err)
		}
		if diff := cmp.Diff(answer(want), answer(got)); diff != "" {
			return fmt.Sprintf("%v meets %s: Reserve(%q) differs from tiers.DecideFast (-DecideFast +Reserve):\n%s", c, en.desc, k.Key, diff), nil
		}
		if !mark {
			return "", nil
		}
		// The marker sends other claims to the durable tier, naming
		// itself, until it lapses PendingTTL after the claim.
		for _, pr := range []struct {
			after time.Duration
			want  tiers.FastResult
		}{
			{pendingTTL - time.Millisecond, tiers.FastResult{Verdict: tiers.FastAskDurable, Marker: p.Nonce}},
			{pendingTTL, tiers.FastResult{Verdict: tiers.FastReserved}},
		} {
			probe := tiers.ReserveParams{Key: k, Now: p.Now.Add(pr.after), Nonce: "n-probe", PendingTTL: pendingTTL}
			got, err = fe.f.Reserve(ctx, probe)
			if err != nil {
				return "", fmt.Errorf("Reserve(%q) probing the marker: %w", k.Key, err)
			}
			if diff := cmp.Diff(pr.want, answer(got)); diff != "" {
				return fmt.Sprintf("%v meets %s: the marker it placed, met %v later by another claim (-want +got):\n%s", c, en.desc, pr.after, diff), nil
			}
		}
		return "", nil
	})
}

// answer is the part of r that means something: its verdict, the marker
// met with FastAskDurable, and the rest only with FastDecided, where of a
// terminal record only what tiers.TerminalCopy keeps.
func answer(r tiers.FastResult) tiers.FastResult {
	switch r.Verdict {
	case tiers.FastDecided:
		r.Record = tiers.TerminalCopy(r.Record)
		return r
	case tiers.FastAskDurable:
		return tiers.FastResult{Verdict: r.Verdict, Marker: r.Marker}
	}
	return tiers.FastResult{Verdict: r.Verdict}
}
