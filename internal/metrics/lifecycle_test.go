package metrics_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/tiers"
)

// lifecycleRegistry declares a Stripe charge lifecycle (horizon 72h) and a
// provider with a 15s horizon and none.
func lifecycleRegistry(t *testing.T) *horizon.Registry {
	t.Helper()
	reg, err := horizon.Load("lifecycles.yaml", []byte(`version: 1
providers:
  stripe:
    retry_horizon: 72h
    margin: 12h
    lease: 60s
    max_lease: 10m
    key: json:id
    source: "https://docs.stripe.com/webhooks"
    reviewed_on: 2026-11-01
    lifecycles:
      charge:
        entity: json:data.object.id
        event_type: json:type
        states: [pending, succeeded]
        events:
          charge.succeeded: {from: [pending], to: succeeded}
          charge.refunded: {from: [succeeded], to: succeeded}
        source: "https://docs.stripe.com/api/events/types"
  twilio:
    retry_horizon: 15s
    margin: 1h
    lease: 60s
    max_lease: 10m
    key: header:I-Twilio-Idempotency-Token
    source: "https://www.twilio.com/docs/usage/webhooks/webhooks-connection-overrides"
    reviewed_on: 2026-11-01
`))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// value returns the value of the series of name with exactly the labels kv
// (name, value pairs), and whether it exists.
func value(t *testing.T, reg *prometheus.Registry, name string, kv ...string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel())*2 != len(kv) {
				continue
			}
			for i, l := range m.GetLabel() { // labels come sorted by name
				if l.GetName() != kv[2*i] || l.GetValue() != kv[2*i+1] {
					continue series
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func TestOutOfOrderCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{Providers: lifecycleRegistry(t), Clock: clock.NewFake(start)})
	if err != nil {
		t.Fatal(err)
	}
	series := func(eventType, outcome string) []string {
		return []string{"event_type", eventType, "outcome", outcome, "provider", "stripe"}
	}
	// Every declared event type starts at zero, so its first deferral shows
	// in increase().
	for _, et := range []string{"charge.succeeded", "charge.refunded"} {
		for _, o := range []string{"deferred", "superseded"} {
			if v, ok := value(t, reg, "claimd_out_of_order_total", series(et, o)...); !ok || v != 0 {
				t.Errorf("claimd_out_of_order_total{%s,%s} = %v (exists %v), want a zero series", et, o, v, ok)
			}
		}
	}
	claim := func(outcome tiers.Outcome, eventType string) *service.Request {
		return &service.Request{Method: "Claim", Namespace: "billing", Provider: "stripe", Known: true,
			Lifecycle: "charge", EntityID: "ch_1", EventType: eventType, Outcome: outcome}
	}
	for _, r := range []*service.Request{
		claim(tiers.OutcomeDeferred, "charge.refunded"),
		claim(tiers.OutcomeDeferred, "charge.refunded"),
		claim(tiers.OutcomeSuperseded, "charge.succeeded"),
		claim(tiers.OutcomeAcquired, "charge.succeeded"),   // in order: not counted
		claim(tiers.OutcomeDuplicate, "charge.refunded"),   // decided by the key: not counted
		{Method: "Claim", Provider: "stripe", Known: true}, // an ordinary claim
	} {
		m.Record(context.Background(), r)
	}
	for _, tc := range []struct {
		eventType, outcome string
		want               float64
	}{
		{"charge.refunded", "deferred", 2},
		{"charge.refunded", "superseded", 0},
		{"charge.succeeded", "superseded", 1},
		{"charge.succeeded", "deferred", 0},
	} {
		if v, _ := value(t, reg, "claimd_out_of_order_total", series(tc.eventType, tc.outcome)...); v != tc.want {
			t.Errorf("claimd_out_of_order_total{%s,%s} = %v, want %v", tc.eventType, tc.outcome, v, tc.want)
		}
	}
}

func TestDeferredGaugesSampled(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{Providers: lifecycleRegistry(t), Clock: clock.NewFake(start)})
	if err != nil {
		t.Fatal(err)
	}
	now := start.Add(time.Hour)
	var calls []map[string]tiers.DeferredCutoffs
	count := func(_ context.Context, c map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error) {
		calls = append(calls, c)
		// 7 waiting; 2 of them older than the overdue cutoff, 1 older
		// than the lost one.
		return tiers.DeferredCounts{Deferred: 7, Overdue: 2, Lost: 1}, nil
	}
	if err := m.Sample(context.Background(), now, metrics.Sources{DeferredEvents: count}); err != nil {
		t.Fatalf("Sample() error = %v", err)
	}
	if len(calls) != 1 {
		t.Fatalf("DeferredEvents called %d times, want once per sample", len(calls))
	}
	want := map[string]tiers.DeferredCutoffs{
		"stripe": {Overdue: now.Add(-36 * time.Hour), Lost: now.Add(-72 * time.Hour)},
		"twilio": {Overdue: now.Add(-7500 * time.Millisecond), Lost: now.Add(-15 * time.Second)},
	}
	for p, w := range want {
		if got := calls[0][p]; !got.Overdue.Equal(w.Overdue) || !got.Lost.Equal(w.Lost) {
			t.Errorf("cutoffs of %s = %+v, want %+v (now - its horizon's shares)", p, got, w)
		}
	}
	for name, want := range map[string]float64{"claimd_deferred_events": 7, "claimd_deferred_overdue_events": 2, "claimd_deferred_lost_events": 1} {
		if v, _ := value(t, reg, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}

	// A failing source keeps the gauges and counts a durable sampler error.
	before, _ := value(t, reg, "claimd_sampler_errors_total", "source", "durable")
	failing := func(context.Context, map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error) {
		return tiers.DeferredCounts{}, errors.New("database is locked")
	}
	if err := m.Sample(context.Background(), now, metrics.Sources{DeferredEvents: failing}); err == nil {
		t.Error("Sample() with a failing DeferredEvents error = nil")
	}
	if after, _ := value(t, reg, "claimd_sampler_errors_total", "source", "durable"); after != before+1 {
		t.Errorf("claimd_sampler_errors_total{source=durable} = %v, want %v", after, before+1)
	}
	if v, _ := value(t, reg, "claimd_deferred_events"); v != 7 {
		t.Errorf("claimd_deferred_events after a failed sample = %v, want 7 (kept)", v)
	}
}
