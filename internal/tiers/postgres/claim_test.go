package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

func hash(s string) []byte {
	h := make([]byte, 32)
	copy(h, s)
	return h
}

// TestClaimAuditsEveryPath drives the claim statement down each of its
// paths and checks the audit row each writes: a claim row with the outcome
// answered and the claimant as holder. (That the answers themselves are
// tiers.Decide's, the conformance suite checks over a generated table.)
func TestClaimAuditsEveryPath(t *testing.T) {
	tests := []struct {
		desc       string
		setup      func(e *env, k string) // brings k to the state under test
		claim      func(p *tiers.ClaimParams)
		wantOut    tiers.Outcome
		wantReason tiers.Reason
	}{
		{
			desc:       "absent key: NEW",
			setup:      func(e *env, k string) {},
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonNew,
		},
		{
			desc:    "live lease: IN_PROGRESS",
			setup:   claimed,
			claim:   func(p *tiers.ClaimParams) { p.Holder = "pod-b" },
			wantOut: tiers.OutcomeInProgress,
		},
		{
			desc:    "lease ends at its instant: one millisecond before is IN_PROGRESS",
			setup:   claimed,
			claim:   func(p *tiers.ClaimParams) { p.Now = p.Now.Add(lease - time.Millisecond) },
			wantOut: tiers.OutcomeInProgress,
		},
		{
			desc:       "lease ends at its instant: LEASE_EXPIRED exactly then",
			setup:      claimed,
			claim:      func(p *tiers.ClaimParams) { p.Now = p.Now.Add(lease) },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonLeaseExpired,
		},
		{
			desc:       "lease over: LEASE_EXPIRED keeps the state reached",
			setup:      processing,
			claim:      func(p *tiers.ClaimParams) { p.Now = p.Now.Add(lease); p.Holder = "pod-b" },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonLeaseExpired,
		},
		{
			desc:       "lease over, unknown hash adopts the claimant's",
			setup:      claimed,
			claim:      func(p *tiers.ClaimParams) { p.Now = p.Now.Add(2 * lease); p.PayloadHash = hash("late") },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonLeaseExpired,
		},
		{
			desc:       "lease over, a claimant without hash keeps the record's",
			setup:      claimedWith(hash("one")),
			claim:      func(p *tiers.ClaimParams) { p.Now = p.Now.Add(2 * lease) },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonLeaseExpired,
		},
		{
			desc:    "lease over but payload differs: PAYLOAD_MISMATCH",
			setup:   claimedWith(hash("one")),
			claim:   func(p *tiers.ClaimParams) { p.Now = p.Now.Add(2 * lease); p.PayloadHash = hash("two") },
			wantOut: tiers.OutcomePayloadMismatch,
		},
		{
			desc:    "live lease, payload differs: PAYLOAD_MISMATCH",
			setup:   claimedWith(hash("one")),
			claim:   func(p *tiers.ClaimParams) { p.PayloadHash = hash("two") },
			wantOut: tiers.OutcomePayloadMismatch,
		},
		{
			desc:    "settled: DUPLICATE with its result",
			setup:   settled,
			wantOut: tiers.OutcomeDuplicate,
		},
		{
			desc:    "settled, long after the lease: still DUPLICATE",
			setup:   settled,
			claim:   func(p *tiers.ClaimParams) { p.Now = p.Now.Add(ttl - time.Millisecond) },
			wantOut: tiers.OutcomeDuplicate,
		},
		{
			desc: "failed: DUPLICATE",
			setup: func(e *env, k string) {
				res := e.claim(e.params(k))
				e.transition(k, res.Record.Token, tiers.StateFailed)
			},
			wantOut: tiers.OutcomeDuplicate,
		},
		{
			desc:       "settled, window over: WINDOW_EXPIRED opens a new window",
			setup:      settled,
			claim:      func(p *tiers.ClaimParams) { p.Now = p.Now.Add(ttl); p.PayloadHash = hash("new") },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonWindowExpired,
		},
		{
			desc:       "window over beats a payload mismatch",
			setup:      claimedWith(hash("one")),
			claim:      func(p *tiers.ClaimParams) { p.Now = p.Now.Add(ttl + time.Second); p.PayloadHash = hash("two") },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonWindowExpired,
		},
		{
			desc:       "window over, no hash: the new window has none",
			setup:      claimedWith(hash("one")),
			claim:      func(p *tiers.ClaimParams) { p.Now = p.Now.Add(ttl) },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonWindowExpired,
		},
		{
			desc: "released: RELEASED starts again at RECEIVED",
			setup: func(e *env, k string) {
				res := toProcessing(e, k)
				if _, err := e.store.Release(e.ctx(), tiers.ReleaseParams{Key: key(k), Now: e.clk.Now(), Token: res.Token, SecretHash: ownerHash}); err != nil {
					e.t.Fatal(err)
				}
			},
			claim:      func(p *tiers.ClaimParams) { p.Holder = "pod-b" },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonReleased,
		},
		{
			desc:       "same attempt_id, live lease: the same ACQUIRED",
			setup:      claimedWithAttempt("att-1"),
			claim:      func(p *tiers.ClaimParams) { p.AttemptID = "att-1"; p.Now = p.Now.Add(time.Second) },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonNew,
		},
		{
			desc:    "other attempt_id, live lease: IN_PROGRESS",
			setup:   claimedWithAttempt("att-1"),
			claim:   func(p *tiers.ClaimParams) { p.AttemptID = "att-2" },
			wantOut: tiers.OutcomeInProgress,
		},
		{
			desc:       "same attempt_id, lease over: LEASE_EXPIRED with a new token",
			setup:      claimedWithAttempt("att-1"),
			claim:      func(p *tiers.ClaimParams) { p.AttemptID = "att-1"; p.Now = p.Now.Add(lease) },
			wantOut:    tiers.OutcomeAcquired,
			wantReason: tiers.ReasonLeaseExpired,
		},
	}
	e := newEnv(t)
	start := e.clk.Now()
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e.t = t
			e.clk.Set(start)
			k := tc.desc
			tc.setup(e, k)
			p := e.params(k)
			if tc.claim != nil {
				tc.claim(&p)
			}
			res := e.claim(p)
			if res.Outcome != tc.wantOut || res.Reason != tc.wantReason {
				t.Fatalf("Claim(%q) = %v/%v, want %v/%v", k, res.Outcome, res.Reason, tc.wantOut, tc.wantReason)
			}
			audit := e.audit(k)
			last := audit[len(audit)-1]
			if last.Op != "claim" || last.Outcome == nil || tiers.Outcome(*last.Outcome) != tc.wantOut || last.Holder != p.Holder {
				t.Errorf("last audit row of %q = %+v, want a claim row with outcome %v by %s", k, last, tc.wantOut, p.Holder)
			}
		})
	}
}

// Setups for TestClaimAuditsEveryPath. Each leaves the clock where it was.

func claimed(e *env, k string) { e.claim(e.params(k)) }

func claimedWith(h []byte) func(e *env, k string) {
	return func(e *env, k string) {
		p := e.params(k)
		p.PayloadHash = h
		e.claim(p)
	}
}

func claimedWithAttempt(id string) func(e *env, k string) {
	return func(e *env, k string) {
		p := e.params(k)
		p.AttemptID = id
		e.claim(p)
	}
}

func processing(e *env, k string) { toProcessing(e, k) }

func toProcessing(e *env, k string) tiers.Record {
	res := e.claim(e.params(k))
	return e.transition(k, res.Record.Token, tiers.StateProcessing)
}

func settled(e *env, k string) {
	rec := toProcessing(e, k)
	e.transition(k, rec.Token, tiers.StateSettled)
}

// TestConcurrentClaimsOfOneKeyAcquireOnce races claims of a new key with the
// suite's harness and checks that each was audited with its answer.
func TestConcurrentClaimsOfOneKeyAcquireOnce(t *testing.T) {
	e := newEnv(t)
	const n = 64
	tierstest.ClaimRace(t, e.store, n, func(int) tiers.ClaimParams { return e.params("evt_race") })
	outcomes := map[tiers.Outcome]int{}
	for _, r := range e.audit("evt_race") {
		outcomes[tiers.Outcome(*r.Outcome)]++
	}
	want := map[tiers.Outcome]int{tiers.OutcomeAcquired: 1, tiers.OutcomeInProgress: n - 1}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("audited claim outcomes (-want +got):\n%s", diff)
	}
}

// TestConcurrentTakeoversAcquireOnce races claims on an expired lease: each
// version of a record is taken over once, with the next token.
func TestConcurrentTakeoversAcquireOnce(t *testing.T) {
	e := newEnv(t)
	first := e.claim(e.params("evt_takeover"))
	e.clk.Advance(lease)
	results := tierstest.ClaimRace(t, e.store, 32, func(int) tiers.ClaimParams { return e.params("evt_takeover") })
	for i, res := range results {
		if res.Outcome == tiers.OutcomeAcquired && (res.Reason != tiers.ReasonLeaseExpired || res.Record.Token != first.Record.Token+1) {
			t.Errorf("Claim #%d = %v token %d, want LEASE_EXPIRED token %d", i, res.Reason, res.Record.Token, first.Record.Token+1)
		}
	}
}

// TestAuditLogRecordsEveryDecision checks the audit trail of one key's life:
// every claim outcome and every change, and nothing for calls that changed
// nothing.
func TestAuditLogRecordsEveryDecision(t *testing.T) {
	e := newEnv(t)
	k := "evt_audit"
	ctx := e.ctx()
	a := e.claim(e.params(k))
	busy := e.params(k)
	busy.Holder = "pod-b"
	e.claim(busy)
	tok := a.Record.Token
	e.transition(k, tok, tiers.StateProcessing)
	e.transition(k, tok, tiers.StateProcessing) // repeat: no row
	if _, err := e.store.Renew(ctx, tiers.RenewParams{Key: key(k), Now: e.clk.Now(), Token: tok, SecretHash: ownerHash, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.store.Transition(ctx, tiers.TransitionParams{Key: key(k), Now: e.clk.Now(), Token: tok + 1, SecretHash: ownerHash, To: tiers.StateSettled}); err == nil {
		t.Fatal("Transition(stale token) error = nil")
	}
	for range 2 { // the repeat writes no row
		if _, err := e.store.Release(ctx, tiers.ReleaseParams{Key: key(k), Now: e.clk.Now(), Token: tok, SecretHash: ownerHash}); err != nil {
			t.Fatal(err)
		}
	}
	b := busy
	b.Now = e.clk.Now()
	e.claim(b)

	p := func(v int16) *int16 { return &v }
	want := []auditRow{
		{Op: "claim", Outcome: p(int16(tiers.OutcomeAcquired)), Reason: p(int16(tiers.ReasonNew)), State: int16(tiers.StateReceived), Token: 1, Holder: "pod-a"},
		{Op: "claim", Outcome: p(int16(tiers.OutcomeInProgress)), State: int16(tiers.StateReceived), Token: 1, Holder: "pod-b"},
		{Op: "transition", State: int16(tiers.StateProcessing), Token: 1, Holder: "pod-a"},
		{Op: "renew", State: int16(tiers.StateProcessing), Token: 1, Holder: "pod-a"},
		{Op: "release", State: int16(tiers.StateProcessing), Token: 1, Holder: "pod-a"},
		{Op: "claim", Outcome: p(int16(tiers.OutcomeAcquired)), Reason: p(int16(tiers.ReasonReleased)), State: int16(tiers.StateReceived), Token: 2, Holder: "pod-b"},
	}
	if diff := cmp.Diff(want, e.audit(k)); diff != "" {
		t.Errorf("audit rows of %q (-want +got):\n%s", k, diff)
	}
}

func TestClaimStoresMicrosecondTimes(t *testing.T) {
	e := newEnv(t)
	p := e.params("evt_micro")
	p.Now = p.Now.Add(123 * time.Microsecond)
	res := e.claim(p)
	got := e.get("evt_micro")
	if !got.FirstSeenAt.Equal(p.Now) || !got.LeaseExpiresAt.Equal(p.Now.Add(lease)) || !res.Record.UpdatedAt.Equal(p.Now) {
		t.Errorf("Get(evt_micro) first_seen/lease = %v/%v, want %v/%v", got.FirstSeenAt, got.LeaseExpiresAt, p.Now, p.Now.Add(lease))
	}
	if got.FirstSeenAt.Location() != time.UTC {
		t.Errorf("Get(evt_micro) times in %v, want UTC", got.FirstSeenAt.Location())
	}
}

// TestClaimsRacingARelease races claims against the holder's release, round
// after round, so that claims see the record change between their
// statements (the upsert finds it held, the read finds it released, or the
// other way round). Each release is taken over by exactly one claim, with
// the next token.
func TestClaimsRacingARelease(t *testing.T) {
	e := newEnv(t)
	k := "evt_release_race"
	token := e.claim(e.params(k)).Record.Token
	const rounds, claimers = 20, 8
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		results := make([]tiers.ClaimResult, claimers)
		errs := make([]error, claimers)
		for i := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := e.params(k)
				p.Holder = "claimer"
				<-start
				results[i], errs[i] = e.store.Claim(context.Background(), p)
			}()
		}
		close(start)
		if _, err := e.store.Release(context.Background(), tiers.ReleaseParams{Key: key(k), Now: e.clk.Now(), Token: token, SecretHash: ownerHash}); err != nil {
			t.Fatalf("round %d: Release(token %d) error = %v", round, token, err)
		}
		wg.Wait()
		var winners []tiers.ClaimResult
		for i := range claimers {
			if errs[i] != nil {
				t.Fatalf("round %d: Claim #%d error = %v", round, i, errs[i])
			}
			switch results[i].Outcome {
			case tiers.OutcomeAcquired:
				winners = append(winners, results[i])
			case tiers.OutcomeInProgress:
			default:
				t.Fatalf("round %d: Claim #%d outcome = %v, want ACQUIRED or IN_PROGRESS", round, i, results[i].Outcome)
			}
		}
		if len(winners) == 0 { // every claim ran before the release
			winners = append(winners, e.claim(e.params(k)))
		}
		if len(winners) != 1 || winners[0].Reason != tiers.ReasonReleased || winners[0].Record.Token != token+1 {
			t.Fatalf("round %d: winners = %+v, want one ACQUIRED/RELEASED with token %d", round, winners, token+1)
		}
		token++
	}
}
