package reconcile

import (
	"github.com/prometheus/client_golang/prometheus"
)

// MetricName is the counter of the events a reconciliation found that need
// a person, by provider and kind (seed 002's
// ledger_reconciliation_mismatch_total).
const MetricName = "claimd_reconciliation_mismatch_total"

// NewMetrics registers the mismatch counter on reg. A reconciliation runs as
// a short-lived job (claimd reconcile, a Kubernetes CronJob) that exits
// before any scrape, so its counter is published when it ends, to a
// Pushgateway or a node-exporter textfile, and each run replaces the last:
// the series hold what the latest run found (0 when it found nothing),
// which is what the alert watches.
func NewMetrics(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricName,
		Help: "Events of the provider's own list that the latest claimd reconcile found needing a person, by kind: " +
			"never_delivered, stuck, failed, deferred (past half the retry horizon).",
	}, []string{"provider", "kind"})
	reg.MustRegister(c)
	return c
}

// Count adds a summary's mismatches to c, with a series for every kind that
// needs a person (0 when none), so that a clean run resolves the alert of
// the run before.
func Count(c *prometheus.CounterVec, provider string, s Summary) {
	for _, k := range Kinds {
		if k.NeedsPerson() {
			c.WithLabelValues(provider, string(k)).Add(float64(s[k]))
		}
	}
}
