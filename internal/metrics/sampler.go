package metrics

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// DefaultSampleInterval is how often RunSampler reads the gauges when the
// caller gives no interval.
const DefaultSampleInterval = 15 * time.Second

// Sources are what the background sampler reads. A nil function is a source
// this replica does not have (no fast tier in durable-only mode).
type Sources struct {
	// FastLiveKeys counts the keys the fast tier holds.
	FastLiveKeys func(context.Context) (int64, error)
	// DurableStats counts the claims rows and the audit partitions of the
	// durable tier. It may scan a table: it runs on the sampler's
	// interval, never per request or per scrape.
	DurableStats func(context.Context) (claimRows int64, auditPartitions int, err error)
}

// Sample reads every source once and sets the gauges; provider review
// checks are dated now. A source that fails keeps its gauge at its last
// value and counts in claimd_sampler_errors_total; the errors are returned
// joined.
func (m *Metrics) Sample(ctx context.Context, now time.Time, src Sources) error {
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
	return errors.Join(errs...)
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
		err := m.Sample(sctx, m.cfg.Clock.Now(), src)
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
