package metrics

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// DefaultSampleInterval is how often RunSampler reads the gauges when the
// caller gives no interval.
const DefaultSampleInterval = 15 * time.Second

// Sources are what the background sampler reads. A nil function is a source
// this replica does not have (no fast tier in durable-only mode).
type Sources struct {
	// FastLiveKeys counts the keys the fast tier holds.
	FastLiveKeys func(context.Context) (int64, error)
	// DurableStats counts the claims rows (PostgreSQL's estimate, SQLite's
	// count) and the audit partitions of the durable tier. It runs on the
	// sampler's interval, never per request or per scrape.
	DurableStats func(context.Context) (claimRows int64, auditPartitions int, err error)
	// FastEviction reads the eviction policy of a Redis fast tier (nil for
	// the in-process one, whose entries are bounded by claimd itself).
	FastEviction func(context.Context) (Eviction, error)
	// DeferredEvents counts the deferred events not applied yet and, of
	// them, the overdue and the lost ones by their provider's cutoffs
	// (tiers.Entities.CountDeferred; nil when the store keeps no entities).
	// It is called once per sample.
	DeferredEvents func(ctx context.Context, cutoffs map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error)
}

// Eviction is the fast tier's eviction policy as a sample read it.
type Eviction struct {
	Policy string // Redis's maxmemory-policy; "" when not Known
	Known  bool   // false when Redis does not let claimd read it (CONFIG refused)
	Unsafe bool   // the policy may evict claim keys
}

// Sample reads every source once and sets the gauges; provider review
// checks are dated now. A source that fails keeps its gauge at its last
// value and counts in claimd_sampler_errors_total; the errors are returned
// joined.
func (m *Metrics) Sample(ctx context.Context, now time.Time, src Sources) error {
	return m.sample(ctx, now, src, nil)
}

// sample is Sample; log, when set, hears of a change of the fast tier's
// eviction policy.
func (m *Metrics) sample(ctx context.Context, now time.Time, src Sources, log *slog.Logger) error {
	m.sampleReviews(now)
	var errs []error
	if src.FastLiveKeys != nil {
		if n, err := src.FastLiveKeys(ctx); err != nil {
			m.samplerErrors.WithLabelValues(tierFast).Inc()
			errs = append(errs, err)
		} else {
			m.fastLiveKeys.Set(float64(n))
		}
	}
	if src.DurableStats != nil {
		if rows, parts, err := src.DurableStats(ctx); err != nil {
			m.samplerErrors.WithLabelValues(tierDurable).Inc()
			errs = append(errs, err)
		} else {
			m.durableRows.Set(float64(rows))
			m.auditPartitions.Set(float64(parts))
		}
	}
	if src.FastEviction != nil {
		if ev, err := src.FastEviction(ctx); err != nil {
			m.samplerErrors.WithLabelValues(tierFast).Inc()
			errs = append(errs, err)
		} else {
			m.setEviction(ev, log)
		}
	}
	if src.DeferredEvents != nil {
		if err := m.sampleDeferred(ctx, now, src.DeferredEvents); err != nil {
			m.samplerErrors.WithLabelValues(tierDurable).Inc()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setEviction sets claimd_redis_eviction_policy_unsafe (one series, labelled
// with the policy; none while the policy is unknown) and logs a change: a
// warning for a policy that may evict claim keys, once at info for a policy
// that cannot be read, at info when it became safe again.
func (m *Metrics) setEviction(ev Eviction, log *slog.Logger) {
	m.evictionPolicy.Reset()
	if ev.Known {
		v := 0.0
		if ev.Unsafe {
			v = 1
		}
		m.evictionPolicy.WithLabelValues(ev.Policy).Set(v)
	}
	m.evictionMu.Lock()
	last, seen := m.evictionLast, m.evictionSeen
	m.evictionLast, m.evictionSeen = ev, true
	m.evictionMu.Unlock()
	if log == nil || (seen && last == ev) {
		return
	}
	switch {
	case !ev.Known:
		log.Info("redis maxmemory-policy cannot be read (CONFIG GET refused); make sure it is noeviction", "metric", "claimd_redis_eviction_policy_unsafe")
	case ev.Unsafe:
		log.Warn("redis maxmemory-policy may evict claim keys: set maxmemory-policy noeviction and do not share this Redis with a cache",
			"maxmemory_policy", ev.Policy)
	case seen && last.Unsafe:
		log.Info("redis maxmemory-policy no longer evicts claim keys", "maxmemory_policy", ev.Policy)
	}
}

// sampleReviews sets claimd_provider_review_overdue as of now.
func (m *Metrics) sampleReviews(now time.Time) {
	if m.cfg.Providers == nil {
		return
	}
	for _, p := range m.cfg.Providers.List() {
		v := 0.0
		if p.ReviewOverdue(now, m.cfg.ReviewAge) {
			v = 1
		}
		m.reviewOverdue.WithLabelValues(p.Name).Set(v)
	}
}

// RunSampler samples at once and then every interval (DefaultSampleInterval
// when <= 0) until ctx ends. Each sample is bounded by the interval, so a
// hung tier never stacks samples up.
func (m *Metrics) RunSampler(ctx context.Context, interval time.Duration, src Sources, log *slog.Logger) {
	if interval <= 0 {
		interval = DefaultSampleInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, interval)
		err := m.sample(sctx, m.cfg.Clock.Now(), src, log)
		cancel()
		if err != nil && ctx.Err() == nil && log != nil {
			log.Warn("metrics sample failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
