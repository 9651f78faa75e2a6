package metrics_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// Series of the scripted sequence.
func claims(outcome, reason, servedBy, keySource string) string {
	return sel("claimd_claims_total", "namespace", "billing", "provider", "stripe",
		"outcome", outcome, "reason", reason, "served_by", servedBy, "key_source", keySource)
}

func refused(reason string) string {
	return sel("claimd_claims_total", "namespace", "", "provider", "",
		"outcome", "ERROR", "reason", reason, "served_by", "NONE", "key_source", "NONE")
}

func duration(outcome string) string {
	return sel("claimd_claim_duration_seconds_count", "outcome", outcome)
}

func handled(method string, code codes.Code) string {
	return sel("grpc_server_handled_total", "grpc_type", "unary", "grpc_service", "idempotency.v1.ClaimService",
		"grpc_method", method, "grpc_code", code.String())
}

func transitions(to string) string    { return sel("claimd_transitions_total", "to", to) }
func keyFallbacks(prov string) string { return sel("claimd_key_fallback_total", "provider", prov) }
func tierErrors(tier string) string   { return sel("claimd_tier_errors_total", "tier", tier) }
func effectsRecovered(prov string) string {
	return sel("claimd_effects_recovered_total", "provider", prov)
}

var (
	invalidTransitions = sel("claimd_invalid_transitions_total")
	staleTokens        = sel("claimd_stale_token_total")
	takeovers          = sel("claimd_lease_takeovers_total")
	falseNegatives     = sel("claimd_fast_tier_false_negatives_total")
	payloadMismatches  = sel("claimd_payload_mismatch_total")
)

// watched reports whether a sample is held to the step's expectations:
// every claimd_ sample (counters, gauges, histogram counts) and the gRPC
// handled counters. The other gRPC series move with every call by
// construction.
func watched(name string) bool {
	return strings.HasPrefix(name, "claimd_") || strings.HasPrefix(name, "grpc_server_handled_total{")
}

// TestCountersMoveExactly drives claimd through a scripted sequence over
// gRPC, scrapes /metrics after every step, and requires each watched sample
// to have moved by exactly the step's expectation, and every other one not
// at all. In particular the sampled gauges never move with requests.
func TestCountersMoveExactly(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	hashA, hashB := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	secrets := map[string][]byte{} // the lease secret of each key's latest ACQUIRED answer
	claim := func(id string, hash []byte) (*pb.ClaimResponse, error) {
		r, err := w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: id}, PayloadSha256: hash})
		if r.GetOutcome() == pb.Outcome_OUTCOME_ACQUIRED {
			secrets[id] = r.GetLeaseSecret()
		}
		return r, err
	}
	transitionAs := func(key string, token uint64, secret []byte, to pb.EventState) error {
		_, err := w.client.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: key, FencingToken: token, LeaseSecret: secret, To: to})
		return err
	}
	transition := func(key string, token uint64, to pb.EventState) error {
		return transitionAs(key, token, secrets[key], to)
	}
	expect := func(t *testing.T, resp *pb.ClaimResponse, err error, outcome pb.Outcome, reason pb.Reason, by pb.Tier) {
		t.Helper()
		if err != nil || resp.Outcome != outcome || resp.Reason != reason || resp.ServedBy != by {
			t.Fatalf("Claim(%q) = %v/%v by %v, %v; want %v/%v by %v", resp.GetKey(), resp.GetOutcome(), resp.GetReason(), resp.GetServedBy(), err, outcome, reason, by)
		}
	}
	expectCode := func(t *testing.T, err error, code codes.Code) {
		t.Helper()
		if status.Code(err) != code {
			t.Fatalf("error = %v, want code %v", err, code)
		}
	}
	var (
		evt2Token  uint64
		evt2Secret []byte
	)

	steps := []struct {
		desc string
		do   func(t *testing.T)
		want map[string]float64
	}{
		{"first claim: the durable tier acquires", func(t *testing.T) {
			r, err := claim("evt_1", hashA[:])
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_NEW, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("ACQUIRED", "NEW", "DURABLE", "EVENT_ID"): 1, duration("ACQUIRED"): 1, handled("Claim", codes.OK): 1,
		}},
		{"retry while held: it meets the first claim's marker, and the durable tier answers IN_PROGRESS", func(t *testing.T) {
			r, err := claim("evt_1", hashA[:])
			expect(t, r, err, pb.Outcome_OUTCOME_IN_PROGRESS, pb.Reason_REASON_UNSPECIFIED, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("IN_PROGRESS", "NONE", "DURABLE", "EVENT_ID"): 1, duration("IN_PROGRESS"): 1, handled("Claim", codes.OK): 1,
		}},
		{"the next retry: the fast tier answers IN_PROGRESS from the record the first one copied", func(t *testing.T) {
			r, err := claim("evt_1", hashA[:])
			expect(t, r, err, pb.Outcome_OUTCOME_IN_PROGRESS, pb.Reason_REASON_UNSPECIFIED, pb.Tier_TIER_FAST)
		}, map[string]float64{
			claims("IN_PROGRESS", "NONE", "FAST", "EVENT_ID"): 1, duration("IN_PROGRESS"): 1, handled("Claim", codes.OK): 1,
		}},
		{"transition to PROCESSING", func(t *testing.T) {
			if err := transition("evt_1", 1, pb.EventState_EVENT_STATE_PROCESSING); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{transitions("PROCESSING"): 1, handled("Transition", codes.OK): 1}},
		{"the same transition repeated changes nothing", func(t *testing.T) {
			if err := transition("evt_1", 1, pb.EventState_EVENT_STATE_PROCESSING); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{handled("Transition", codes.OK): 1}},
		{"the token without its secret is refused and counts no claimd_ series", func(t *testing.T) {
			expectCode(t, transitionAs("evt_1", 1, []byte("0123456789abcdef"), pb.EventState_EVENT_STATE_SETTLED), codes.PermissionDenied)
		}, map[string]float64{handled("Transition", codes.PermissionDenied): 1}},
		{"PROCESSING→VALIDATED is refused", func(t *testing.T) {
			expectCode(t, transition("evt_1", 1, pb.EventState_EVENT_STATE_VALIDATED), codes.FailedPrecondition)
		}, map[string]float64{invalidTransitions: 1, handled("Transition", codes.FailedPrecondition): 1}},
		{"settle", func(t *testing.T) {
			if err := transition("evt_1", 1, pb.EventState_EVENT_STATE_SETTLED); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{transitions("SETTLED"): 1, handled("Transition", codes.OK): 1}},
		{"a duplicate answered by the local cache", func(t *testing.T) {
			r, err := claim("evt_1", hashA[:])
			expect(t, r, err, pb.Outcome_OUTCOME_DUPLICATE, pb.Reason_REASON_UNSPECIFIED, pb.Tier_TIER_LOCAL)
		}, map[string]float64{
			claims("DUPLICATE", "NONE", "LOCAL", "EVENT_ID"): 1, duration("DUPLICATE"): 1, handled("Claim", codes.OK): 1,
		}},
		{"same key, another payload", func(t *testing.T) {
			r, err := claim("evt_1", hashB[:])
			expect(t, r, err, pb.Outcome_OUTCOME_PAYLOAD_MISMATCH, pb.Reason_REASON_UNSPECIFIED, pb.Tier_TIER_LOCAL)
		}, map[string]float64{
			claims("PAYLOAD_MISMATCH", "NONE", "LOCAL", "EVENT_ID"): 1, duration("PAYLOAD_MISMATCH"): 1,
			payloadMismatches: 1, handled("Claim", codes.OK): 1,
		}},
		{"a second event", func(t *testing.T) {
			r, err := claim("evt_2", nil)
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_NEW, pb.Tier_TIER_DURABLE)
			evt2Token, evt2Secret = r.FencingToken, r.LeaseSecret
		}, map[string]float64{
			claims("ACQUIRED", "NEW", "DURABLE", "EVENT_ID"): 1, duration("ACQUIRED"): 1, handled("Claim", codes.OK): 1,
		}},
		{"its holder vanishes: a takeover after the lease", func(t *testing.T) {
			w.clk.Advance(61 * time.Second) // stripe's lease is 60s
			r, err := claim("evt_2", nil)
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_LEASE_EXPIRED, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("ACQUIRED", "LEASE_EXPIRED", "DURABLE", "EVENT_ID"): 1, duration("ACQUIRED"): 1,
			takeovers: 1, handled("Claim", codes.OK): 1,
		}},
		{"the vanished holder comes back with its stale token", func(t *testing.T) {
			expectCode(t, transitionAs("evt_2", evt2Token, evt2Secret, pb.EventState_EVENT_STATE_PROCESSING), codes.Aborted)
		}, map[string]float64{staleTokens: 1, handled("Transition", codes.Aborted): 1}},
		{"the fast tier lost a key the durable tier holds", func(t *testing.T) {
			// Claimed and moved on, so the fast tier should have held the
			// record (a first claim's it holds only as a pending marker).
			k := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_3"}
			secret := bytes.Repeat([]byte{3}, tiers.SecretHashBytes)
			_, err := w.lite.Claim(ctx, tiers.ClaimParams{Key: k, Now: w.clk.Now(), Lease: time.Minute, TTL: 84 * time.Hour, SecretHash: secret})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := w.lite.Transition(ctx, tiers.TransitionParams{Key: k, Now: w.clk.Now(), Token: 1, SecretHash: secret, To: tiers.StateProcessing}); err != nil {
				t.Fatal(err)
			}
			r, err := claim("evt_3", nil)
			expect(t, r, err, pb.Outcome_OUTCOME_IN_PROGRESS, pb.Reason_REASON_UNSPECIFIED, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("IN_PROGRESS", "NONE", "DURABLE", "EVENT_ID"): 1, duration("IN_PROGRESS"): 1,
			falseNegatives: 1, handled("Claim", codes.OK): 1,
		}},
		{"fast tier down: degraded to the durable tier, still answered", func(t *testing.T) {
			w.fast.down.Store(true)
			defer w.fast.down.Store(false)
			r, err := claim("evt_4", nil)
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_NEW, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("ACQUIRED", "NEW", "DURABLE", "EVENT_ID"): 1, duration("ACQUIRED"): 1,
			tierErrors("fast"): 1, handled("Claim", codes.OK): 1,
		}},
		{"durable tier down: the claim fails closed", func(t *testing.T) {
			w.durable.down.Store(true)
			defer w.durable.down.Store(false)
			_, err := claim("evt_5", nil)
			expectCode(t, err, codes.Unavailable)
		}, map[string]float64{
			claims("ERROR", service.ReasonDurableUnavailable, "NONE", "EVENT_ID"): 1, duration("ERROR"): 1,
			tierErrors("durable"): 1, handled("Claim", codes.Unavailable): 1,
		}},
		{"durable tier down: a transition fails closed", func(t *testing.T) {
			w.durable.down.Store(true)
			defer w.durable.down.Store(false)
			expectCode(t, transition("evt_4", 1, pb.EventState_EVENT_STATE_PROCESSING), codes.Unavailable)
		}, map[string]float64{tierErrors("durable"): 1, handled("Transition", codes.Unavailable): 1}},
		{"effect_recovered on a target other than SETTLED is refused and counts no claimd_ series", func(t *testing.T) {
			_, err := w.client.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_4", FencingToken: 1,
				LeaseSecret: secrets["evt_4"], To: pb.EventState_EVENT_STATE_FAILED, EffectRecovered: true})
			expectCode(t, err, codes.InvalidArgument)
		}, map[string]float64{handled("Transition", codes.InvalidArgument): 1}},
		{"a settle with the result of an earlier holder's effect fence", func(t *testing.T) {
			if err := transition("evt_4", 1, pb.EventState_EVENT_STATE_PROCESSING); err != nil {
				t.Fatal(err)
			}
			if _, err := w.client.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_4", FencingToken: 1,
				LeaseSecret: secrets["evt_4"], To: pb.EventState_EVENT_STATE_SETTLED, Result: []byte("fenced"), EffectRecovered: true}); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{
			transitions("PROCESSING"): 1, transitions("SETTLED"): 1, effectsRecovered("stripe"): 1, handled("Transition", codes.OK): 2,
		}},
		{"its repeat recovers nothing again", func(t *testing.T) {
			if _, err := w.client.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_4", FencingToken: 1,
				LeaseSecret: secrets["evt_4"], To: pb.EventState_EVENT_STATE_SETTLED, Result: []byte("fenced"), EffectRecovered: true}); err != nil {
				t.Fatal(err)
			}
		}, map[string]float64{handled("Transition", codes.OK): 1}},
		{"bad input is counted without its namespace", func(t *testing.T) {
			_, err := w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "Billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_x"}})
			expectCode(t, err, codes.InvalidArgument)
		}, map[string]float64{
			refused(service.ReasonInvalidArgument): 1, duration("ERROR"): 1, handled("Claim", codes.InvalidArgument): 1,
		}},
		{"an unknown provider is counted without its name", func(t *testing.T) {
			_, err := w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "evt_like_garbage", Key: &pb.ClaimRequest_EventId{EventId: "evt_x"}})
			expectCode(t, err, codes.NotFound)
		}, map[string]float64{
			refused(service.ReasonProviderNotFound): 1, duration("ERROR"): 1, handled("Claim", codes.NotFound): 1,
		}},
		{"a key derived from the delivery body", func(t *testing.T) {
			r, err := w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe",
				Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(`{"id":"evt_6","type":"charge.succeeded"}`)}}})
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_NEW, pb.Tier_TIER_DURABLE)
			secrets["evt_6"] = r.LeaseSecret
		}, map[string]float64{
			claims("ACQUIRED", "NEW", "DURABLE", "BODY_FIELD"): 1, duration("ACQUIRED"): 1, handled("Claim", codes.OK): 1,
		}},
		{"a delivery the key rule finds nothing in: the body hash, counted as a fallback", func(t *testing.T) {
			r, err := w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe",
				Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(`{"object":"event","type":"charge.succeeded"}`)}}})
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_NEW, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("ACQUIRED", "NEW", "DURABLE", "BODY_HASH"): 1, duration("ACQUIRED"): 1, handled("Claim", codes.OK): 1,
			keyFallbacks("stripe"): 1,
		}},
		{"release, and the next claim acquires again", func(t *testing.T) {
			if _, err := w.client.Release(ctx, &pb.ReleaseRequest{Namespace: "billing", Provider: "stripe", Key: "evt_6", FencingToken: 1, LeaseSecret: secrets["evt_6"]}); err != nil {
				t.Fatal(err)
			}
			r, err := claim("evt_6", nil)
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_RELEASED, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("ACQUIRED", "RELEASED", "DURABLE", "EVENT_ID"): 1, duration("ACQUIRED"): 1,
			handled("Release", codes.OK): 1, handled("Claim", codes.OK): 1,
		}},
		{"a replay after the window", func(t *testing.T) {
			w.clk.Advance(85 * time.Hour) // stripe's ttl is 84h
			r, err := claim("evt_1", hashA[:])
			expect(t, r, err, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_WINDOW_EXPIRED, pb.Tier_TIER_DURABLE)
		}, map[string]float64{
			claims("ACQUIRED", "WINDOW_EXPIRED", "DURABLE", "EVENT_ID"): 1, duration("ACQUIRED"): 1, handled("Claim", codes.OK): 1,
		}},
	}

	before := w.scrape(t)
	for _, st := range steps {
		st.do(t)
		after := w.scrape(t)
		for name, v := range after {
			if !watched(name) {
				continue
			}
			if got, want := v-before[name], st.want[name]; got != want {
				t.Errorf("%s: %s moved by %v, want %v", st.desc, name, got, want)
			}
		}
		for name := range st.want {
			if _, ok := after[name]; !ok {
				t.Errorf("%s: %s missing from /metrics", st.desc, name)
			}
		}
		before = after
	}

	// The janitor's pass: every claim's window (and the grace) is over.
	w.clk.Advance(200 * time.Hour)
	rows, err := w.lite.Stats(ctx)
	if err != nil || rows != 6 {
		t.Fatalf("claims rows before the janitor = %d, %v; want 6 (evt_1, 2, 3, 4, 6 and a body hash)", rows, err)
	}
	j, err := janitor.New(janitor.Config{Target: liteTarget{w.lite}, Fast: w.mem, Clock: w.clk, Grace: time.Hour, Observer: w.m})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Pass(ctx, false); err != nil {
		t.Fatal(err)
	}
	after := w.scrape(t)
	want := map[string]float64{
		sel("claimd_janitor_claims_deleted_total"):              6,
		sel("claimd_janitor_passes_total", "result", "done"):    1,
		sel("claimd_janitor_last_success_timestamp_seconds"):    float64(w.clk.Now().Unix()),
		sel("claimd_janitor_audit_rows_deleted_total"):          0,
		sel("claimd_janitor_audit_partitions_dropped_total"):    0,
		sel("claimd_janitor_passes_total", "result", "skipped"): 0,
	}
	for name, v := range after {
		if watched(name) && after[name]-before[name] != want[name] && !strings.HasPrefix(name, "claimd_janitor_last_success") {
			t.Errorf("janitor pass: %s moved by %v, want %v", name, v-before[name], want[name])
		}
	}
	if got := after[sel("claimd_janitor_last_success_timestamp_seconds")]; int64(got) != w.clk.Now().Unix() {
		t.Errorf("claimd_janitor_last_success_timestamp_seconds = %v, want %d (the janitor clock)", got, w.clk.Now().Unix())
	}
}

// liteTarget lets a janitor pass run over the world's SQLite tier. The
// server's target is wiring (internal/server/tier_*.go); this one does what that
// one does on a non-dry pass, which is all this test runs.
type liteTarget struct{ s *sqlite.Store }

func (liteTarget) TryLock(context.Context) (func(), bool, error) { return func() {}, true, nil }

func (t liteTarget) PruneClaims(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return t.s.Prune(ctx, cutoff, limit)
}

func (t liteTarget) PruneEntities(ctx context.Context, cutoff time.Time, limit int) (tiers.Pruned, error) {
	return t.s.PruneEntities(ctx, cutoff, limit)
}

func (t liteTarget) Count(ctx context.Context, cutoff time.Time) (tiers.Pruned, error) {
	return t.s.CountPrunable(ctx, cutoff)
}

func (liteTarget) PrepareAudit(context.Context, time.Time, int) error { return nil }

func (t liteTarget) ExpireAudit(ctx context.Context, cutoff time.Time, limit int, _ bool) (janitor.AuditExpiry, error) {
	n, err := t.s.PruneAudit(ctx, cutoff, limit)
	return janitor.AuditExpiry{Rows: int64(n)}, err
}

// TestSampledGauges: the gauges take their values from the sources when
// sampled, not before; a failing source keeps its gauge and counts an error.
func TestSampledGauges(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, id := range []string{"evt_a", "evt_b", "evt_c"} {
		if _, err := w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: id}}); err != nil {
			t.Fatal(err)
		}
	}
	live, rows := sel("claimd_fast_tier_live_keys"), sel("claimd_durable_claim_rows")
	parts := sel("claimd_audit_partitions")
	if got := w.scrape(t); got[live] != 0 || got[rows] != 0 {
		t.Fatalf("before sampling: live keys %v, rows %v; want 0, 0 (gauges move only when sampled)", got[live], got[rows])
	}

	src := metrics.Sources{
		FastLiveKeys: func(context.Context) (int64, error) { return int64(w.mem.Len()), nil },
		DurableStats: func(ctx context.Context) (int64, int, error) {
			n, err := w.lite.Stats(ctx)
			return n, 0, err
		},
	}
	overdue := start.AddDate(0, 7, 0) // past 2026-11-01 + 180 days
	if err := w.m.Sample(ctx, overdue, src); err != nil {
		t.Fatalf("Sample() error = %v", err)
	}
	got := w.scrape(t)
	for name, want := range map[string]float64{
		live: 3, rows: 3, parts: 0,
		sel("claimd_provider_ttl_seconds", "provider", "stripe"):        (84 * time.Hour).Seconds(),
		sel("claimd_provider_ttl_seconds", "provider", "billing"):       billingTTL(t).Seconds(),
		sel("claimd_provider_review_overdue", "provider", "stripe"):     1,
		sel("claimd_provider_review_overdue", "provider", "billing"):    1,
		sel("claimd_tiers_info", "fast", "memory", "durable", "sqlite"): 1,
		sel("claimd_sampler_errors_total", "source", "fast"):            0,
	} {
		if got[name] != want {
			t.Errorf("after Sample(): %s = %v, want %v", name, got[name], want)
		}
	}

	src.FastLiveKeys = func(context.Context) (int64, error) { return 0, tiers.Unavailable("redis", errDown) }
	if err := w.m.Sample(ctx, overdue, src); err == nil {
		t.Error("Sample() with a failing source = nil error, want it")
	}
	got = w.scrape(t)
	if got[live] != 3 || got[sel("claimd_sampler_errors_total", "source", "fast")] != 1 {
		t.Errorf("after a failed sample: live keys %v, fast sampler errors %v; want 3 (kept), 1",
			got[live], got[sel("claimd_sampler_errors_total", "source", "fast")])
	}
}

// TestDurableOnlyCountsDurableErrors: without a fast tier in front, the
// durable tier's failures still count as tier="durable" errors.
func TestDurableOnlyCountsDurableErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	durable := &flakyDurable{Durable: lite}
	t.Cleanup(func() { durable.Close() })
	providers, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: durable, Registry: providers, Clock: clock.NewFake(start), Recorder: m,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	durable.down.Store(true)
	_, err = svc.Claim(context.Background(), &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_1"}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Claim() with the durable tier down = %v, want UNAVAILABLE", err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, f := range fams {
		if f.GetName() != "claimd_tier_errors_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() == "durable" {
				got = s.GetCounter().GetValue()
			}
		}
	}
	if got != 1 {
		t.Errorf(`claimd_tier_errors_total{tier="durable"} = %v, want 1`, got)
	}
}

// TestSQLiteDurability: claimd_sqlite_durability has no series until the
// embedded tier's mode is set, and then exactly one, for the mode set last.
func TestSQLiteDurability(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	modes := func() map[string]float64 {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			if f.GetName() == "claimd_sqlite_durability" {
				for _, s := range f.GetMetric() {
					got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
				}
			}
		}
		return got
	}
	if got := modes(); len(got) != 0 {
		t.Fatalf("claimd_sqlite_durability before SetSQLiteDurability = %v, want no series (PostgreSQL replicas have none)", got)
	}
	for _, mode := range []string{"full", "relaxed"} {
		m.SetSQLiteDurability(mode)
		if got := modes(); len(got) != 1 || got[mode] != 1 {
			t.Errorf("claimd_sqlite_durability after SetSQLiteDurability(%q) = %v, want {%s: 1}", mode, got, mode)
		}
	}
}

// TestNoKeyInLabels: whatever the request, no label value carries the key,
// the holder or the payload.
func TestNoKeyInLabels(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const secret = "evt_SECRETKEY"
	w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: secret}, Holder: secret + "_holder"})
	w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: secret, Key: &pb.ClaimRequest_EventId{EventId: secret}})
	w.client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(`{"id":"` + secret + `2"}`)}}})
	var buf bytes.Buffer
	for name := range w.scrape(t) {
		buf.WriteString(name + "\n")
	}
	if strings.Contains(buf.String(), "SECRETKEY") {
		t.Errorf("/metrics carries a key in a label:\n%s", buf.String())
	}
}

func billingTTL(t *testing.T) time.Duration {
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := reg.Lookup("billing")
	return p.TTL
}
