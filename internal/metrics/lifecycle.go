package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/tiers"
)

// OverdueShare is the share of its provider's retry horizon after which a
// deferred event that is still not applied counts as overdue
// (claimd_deferred_overdue_events): half the provider's retries are spent
// and its prerequisite has still not come, so someone should look while the
// provider is still retrying, before the event is lost.
const OverdueShare = 0.5

// lifecycleMetrics are the metrics of entity lifecycles: events turned away
// for their order, and the deferred events waiting, overdue or lost.
type lifecycleMetrics struct {
	outOfOrder *prometheus.CounterVec
	deferred   prometheus.Gauge
	overdue    prometheus.Gauge
	lost       prometheus.Gauge
}

func newLifecycleMetrics() *lifecycleMetrics {
	return &lifecycleMetrics{
		outOfOrder: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_out_of_order_total",
			Help: "Claims of lifecycle events turned away for their order, by provider, event type (one the registry declares) and outcome: " +
				"deferred (arrived before its prerequisite; the provider's retry replays it) or superseded (its entity moved past it; acknowledged, not applied).",
		}, []string{"provider", "event_type", "outcome"}),
		deferred: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_deferred_events",
			Help: "Deferred events not applied yet (ListDeferred), sampled in the background.",
		}),
		overdue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_deferred_overdue_events",
			Help: "Deferred events not applied yet and first seen more than half their provider's retry horizon ago, sampled in the background.",
		}),
		lost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_deferred_lost_events",
			Help: "Deferred events not applied and first seen longer ago than their provider's retry horizon: the provider will not send them again " +
				"(ListDeferred marks them lost; ask the provider to resend). Sampled in the background.",
		}),
	}
}

func (l *lifecycleMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.outOfOrder, l.deferred, l.overdue, l.lost}
}

// Label values of claimd_out_of_order_total's outcome.
const (
	outOfOrderDeferred   = "deferred"
	outOfOrderSuperseded = "superseded"
)

// initLifecycleSeries creates a zero series per declared event type and
// outcome, so the first deferral of a type shows in increase().
func (m *Metrics) initLifecycleSeries() {
	if m.cfg.Providers == nil {
		return
	}
	for _, p := range m.cfg.Providers.List() {
		for _, l := range p.Lifecycles {
			for _, e := range l.Events {
				m.lifecycle.outOfOrder.WithLabelValues(p.Name, e.EventType, outOfOrderDeferred)
				m.lifecycle.outOfOrder.WithLabelValues(p.Name, e.EventType, outOfOrderSuperseded)
			}
		}
	}
}

// recordOrder counts a claim its lifecycle turned away. The event type is
// one the registry declares (the service places a claim only in a declared
// event), so the label stays bounded.
func (m *Metrics) recordOrder(r *service.Request) {
	if !r.Known || r.EventType == "" || !r.StateTransitionRejected() {
		return
	}
	outcome := outOfOrderDeferred
	if r.Outcome == tiers.OutcomeSuperseded {
		outcome = outOfOrderSuperseded
	}
	m.lifecycle.outOfOrder.WithLabelValues(r.Provider, r.EventType, outcome).Inc()
}

// sampleDeferred sets the deferred gauges from src as of now: each
// provider's events are overdue once first seen before now -
// OverdueShare·horizon, and lost before now - horizon. Providers with no
// retry horizon are left out (they lose nothing by waiting).
func (m *Metrics) sampleDeferred(ctx context.Context, now time.Time, count func(context.Context, map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error)) error {
	cutoffs := map[string]tiers.DeferredCutoffs{}
	if m.cfg.Providers != nil {
		for _, p := range m.cfg.Providers.List() {
			if p.RetryHorizon <= 0 {
				continue
			}
			cutoffs[p.Name] = tiers.DeferredCutoffs{
				Overdue: now.Add(-time.Duration(float64(p.RetryHorizon) * OverdueShare)),
				Lost:    now.Add(-p.RetryHorizon),
			}
		}
	}
	n, err := count(ctx, cutoffs)
	if err != nil {
		return err
	}
	m.lifecycle.deferred.Set(float64(n.Deferred))
	m.lifecycle.overdue.Set(float64(n.Overdue))
	m.lifecycle.lost.Set(float64(n.Lost))
	return nil
}
