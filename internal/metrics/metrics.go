// Package metrics is claimd's Prometheus instrumentation: the claim
// counters the service reports through service.Recorder, what the two-tier
// composition saw (twotier.Observer), the janitor's passes
// (janitor.Observer), gauges sampled in the background, and the gRPC server
// metrics go-grpc-middleware's Prometheus provider defines (grpc.go).
//
// Everything registers on a registry the caller passes (cmd/claimd makes
// one); nothing is global, so a test may build as many as it likes.
//
// No label ever carries a key, an event id, a holder or a token: one series
// per delivery would exhaust Prometheus. Labels take bounded values only:
// enum names, registered provider names, and namespaces that passed
// validation (a refused request is counted with namespace="" provider=""),
// themselves bounded: the auth file's names when there is one
// (Config.NamespaceLabel), else the first Config.MaxNamespaces seen and
// then "other".
package metrics

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// LatencyBuckets are the upper bounds (seconds) of claimd's latency
// histograms: a local-cache answer takes tens of microseconds, a Redis
// round trip a few hundred, a PostgreSQL statement about a millisecond;
// the top buckets catch store timeouts (5s) and claims that waited for a
// holder (up to 30s).
var LatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
}

// Label values that are not enum names.
const (
	tierFast    = "fast"
	tierDurable = "durable"
)

// Config configures New. Zero values mean the defaults.
type Config struct {
	// Providers, when set, gives claimd_provider_ttl_seconds and
	// claimd_provider_review_overdue a series per provider and group.
	Providers *horizon.Registry
	// ReviewAge is the age past which a provider's reviewed_on is overdue;
	// zero disables the check (overdue is then always 0).
	ReviewAge time.Duration
	// Clock dates review checks and janitor passes. Default clock.Real.
	Clock clock.Clock
	// NamespaceLabel, when set, maps a validated namespace to its label
	// value; it must return a bounded set of values (auth's
	// Authenticator.NamespaceLabel: the auth file's names and patterns,
	// else "other"). When nil, the first MaxNamespaces namespaces seen keep
	// their name and later ones are labelled "other".
	NamespaceLabel func(namespace string) string
	// MaxNamespaces bounds the namespace labels when NamespaceLabel is nil.
	// Default DefaultMaxNamespaces.
	MaxNamespaces int
}

// Metrics holds claimd's collectors. It implements service.Recorder,
// twotier.Observer and janitor.Observer; all its methods are safe for
// concurrent use and never block.
type Metrics struct {
	cfg Config

	claims             *prometheus.CounterVec
	claimDuration      *prometheus.HistogramVec
	transitions        *prometheus.CounterVec
	invalidTransitions prometheus.Counter
	staleTokens        prometheus.Counter
	takeovers          prometheus.Counter
	falseNegatives     prometheus.Counter
	integrityFailures  prometheus.Counter
	repairsPending     prometheus.Gauge
	repairsDropped     prometheus.Counter
	tierErrors         *prometheus.CounterVec
	payloadMismatches  prometheus.Counter
	keyFallbacks       *prometheus.CounterVec
	effectsRecovered   *prometheus.CounterVec

	fastLiveKeys    prometheus.Gauge
	durableRows     prometheus.Gauge
	auditPartitions prometheus.Gauge
	samplerErrors   *prometheus.CounterVec
	providerTTL     *prometheus.GaugeVec
	reviewOverdue   *prometheus.GaugeVec
	tiersInfo       *prometheus.GaugeVec
	sqliteDurable   *prometheus.GaugeVec
	evictionPolicy  *prometheus.GaugeVec

	evictionMu   sync.Mutex
	evictionLast Eviction // the policy the sampler saw last
	evictionSeen bool

	janitorPasses      *prometheus.CounterVec
	janitorClaims      prometheus.Counter
	janitorPartitions  prometheus.Counter
	janitorAuditRows   prometheus.Counter
	janitorExports     *prometheus.CounterVec
	janitorLastSuccess prometheus.Gauge

	lifecycle *lifecycleMetrics

	grpc *grpcMetrics
}

var (
	_ service.Recorder = (*Metrics)(nil)
	_ twotier.Observer = (*Metrics)(nil)
	_ janitor.Observer = (*Metrics)(nil)
)

// New creates claimd's collectors and registers them on reg.
func New(reg prometheus.Registerer, cfg Config) (*Metrics, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxNamespaces <= 0 {
		cfg.MaxNamespaces = DefaultMaxNamespaces
	}
	if cfg.NamespaceLabel == nil {
		cfg.NamespaceLabel = (&firstSeen{max: cfg.MaxNamespaces}).label
	}
	m := &Metrics{
		cfg: cfg,
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_claims_total",
			Help: "Claims answered, by namespace, provider, outcome (ACQUIRED, DUPLICATE, IN_PROGRESS, PAYLOAD_MISMATCH, or ERROR), " +
				"reason (NEW, RELEASED, LEASE_EXPIRED, WINDOW_EXPIRED for ACQUIRED; the error reason for ERROR; NONE otherwise), " +
				"served_by (LOCAL, FAST, DURABLE; NONE on error) and key_source (EVENT_ID, HEADER, BODY_FIELD, BODY_HASH; NONE when no key was derived). " +
				"Refused requests count with namespace=\"\" and provider=\"\". Namespaces past the bound (the auth file's names, or the first --metrics-max-namespaces seen) count as namespace=\"other\".",
		}, []string{"namespace", "provider", "outcome", "reason", "served_by", "key_source"}),
		claimDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "claimd_claim_duration_seconds",
			Help:    "Time to answer a Claim, from request to answer (waiting for a holder included), by outcome.",
			Buckets: LatencyBuckets,
		}, []string{"outcome"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_transitions_total",
			Help: "Transitions that changed a record, by target state (repeats that changed nothing are not counted).",
		}, []string{"to"}),
		invalidTransitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_invalid_transitions_total",
			Help: "Transition, Renew or Release calls the state machine refused (FAILED_PRECONDITION/INVALID_TRANSITION).",
		}),
		staleTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_stale_token_total",
			Help: "Calls that presented a fencing token that is no longer the owner's (ABORTED/STALE_TOKEN): a holder that lost its lease to a takeover, or released, still acting.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_lease_takeovers_total",
			Help: "Claims ACQUIRED with reason LEASE_EXPIRED: a holder vanished (or outran its lease) mid-processing and another delivery took over.",
		}),
		falseNegatives: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_fast_tier_false_negatives_total",
			Help: "Claims the fast tier did not know but the durable tier did (the fast tier lost the key: flush, eviction, failover); the durable tier decided and the fast tier was repaired.",
		}),
		integrityFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_fast_tier_integrity_failures_total",
			Help: "Fast-tier records whose seal did not verify under the fast-tier keys (written by something other than claimd, copied from another key, edited, or sealed with a key this replica does not hold): each was treated as absent, the durable tier decided, and its answer replaced the record.",
		}),
		repairsPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_fast_tier_repairs_pending",
			Help: "Durable writes whose copy to the fast tier failed and waits for a retry (with backoff); meanwhile the fast tier may answer their keys IN_PROGRESS from an older copy.",
		}),
		repairsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_fast_tier_repairs_dropped_total",
			Help: "Failed copies of durable writes to the fast tier given up (the retry backlog was full, or claimd stopped first): an older copy there may answer IN_PROGRESS until its lease ends.",
		}),
		tierErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_tier_errors_total",
			Help: "Failed tier operations, by tier: fast (claims degraded to the durable tier, still correct) or durable (calls failed closed with UNAVAILABLE).",
		}, []string{"tier"}),
		payloadMismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_payload_mismatch_total",
			Help: "Claims answered PAYLOAD_MISMATCH: the same key arrived with a different payload (a key rule that is not unique, or tampering).",
		}),
		keyFallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_key_fallback_total",
			Help: "Claims of a raw delivery in which the provider's key rule found no value, so the key is the body hash, by provider: " +
				"a webhook family the rule does not cover, or a provider that changed its format. Each is also logged at warn.",
		}, []string{"provider"}),
		effectsRecovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_effects_recovered_total",
			Help: "Settles whose result came from an effect fence an earlier holder committed in the handler's database (TransitionRequest.effect_recovered), by provider: " +
				"that holder did the work and vanished before settling (a crash, a lost connection, a pause past its lease), and the next one recorded its result instead of doing it again. " +
				"Repeats of a settle are not counted. Each is also logged at warn.",
		}, []string{"provider"}),

		fastLiveKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_fast_tier_live_keys",
			Help: "Keys the fast tier holds (Redis DBSIZE, or the in-process map's entries), sampled in the background.",
		}),
		durableRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_durable_claim_rows",
			Help: "Rows of the durable tier's claims table (records in their window or awaiting the janitor): PostgreSQL's estimate of its live rows, SQLite's count, sampled in the background.",
		}),
		auditPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_audit_partitions",
			Help: "Monthly partitions of the PostgreSQL audit log, sampled in the background (0 on the embedded tier, whose audit log is one table).",
		}),
		samplerErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_sampler_errors_total",
			Help: "Background samples that failed, by source (fast, durable); the gauge keeps its last value.",
		}, []string{"source"}),
		providerTTL: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "claimd_provider_ttl_seconds",
			Help: "Dedup window of each registered provider and group: retry_horizon + margin.",
		}, []string{"provider"}),
		reviewOverdue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "claimd_provider_review_overdue",
			Help: "1 when a provider's retry horizon was last checked against its documentation longer ago than --horizon-review-age.",
		}, []string{"provider"}),
		tiersInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "claimd_tiers_info",
			Help: "Always 1; the labels name the tiers this replica runs: fast (redis, memory, none) and durable (postgres, sqlite).",
		}, []string{"fast", "durable"}),
		sqliteDurable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "claimd_sqlite_durability",
			Help: "Always 1 on the embedded tier; mode is --sqlite-durability: full (every commit fsynced) or relaxed (an OS crash or power loss may lose the last answered claims). Absent with PostgreSQL.",
		}, []string{"mode"}),
		evictionPolicy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "claimd_redis_eviction_policy_unsafe",
			Help: "1 when the Redis fast tier's maxmemory-policy (the label) may evict claim keys (anything but noeviction, volatile-* included: claim keys expire), 0 for noeviction; " +
				"no series without Redis or while the policy cannot be read (CONFIG GET refused). Sampled in the background.",
		}, []string{"policy"}),

		janitorPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_janitor_passes_total",
			Help: "Janitor passes, by result: done, skipped (another replica held the janitor lock), failed.",
		}, []string{"result"}),
		janitorClaims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_janitor_claims_deleted_total",
			Help: "Claims the janitor deleted (window + grace over).",
		}),
		janitorPartitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_janitor_audit_partitions_dropped_total",
			Help: "Audit partitions the janitor dropped (past --retention).",
		}),
		janitorAuditRows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "claimd_janitor_audit_rows_deleted_total",
			Help: "Audit rows the janitor deleted on the embedded tier (past --retention).",
		}),
		janitorExports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "claimd_janitor_audit_exports_total",
			Help: "Audit partitions the janitor exported before dropping them (--audit-export-dir), by result: done, failed (the partition was kept for the next pass).",
		}, []string{"result"}),
		janitorLastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "claimd_janitor_last_success_timestamp_seconds",
			Help: "Unix time at which this replica last completed a janitor pass as the active janitor (0: never).",
		}),
		lifecycle: newLifecycleMetrics(),
		grpc:      newGRPCMetrics(),
	}
	for _, c := range append([]prometheus.Collector{
		m.claims, m.claimDuration, m.transitions, m.invalidTransitions, m.staleTokens, m.takeovers,
		m.falseNegatives, m.integrityFailures, m.repairsPending, m.repairsDropped, m.tierErrors, m.payloadMismatches, m.keyFallbacks, m.effectsRecovered,
		m.fastLiveKeys, m.durableRows, m.auditPartitions, m.samplerErrors, m.providerTTL, m.reviewOverdue, m.tiersInfo, m.sqliteDurable, m.evictionPolicy,
		m.janitorPasses, m.janitorClaims, m.janitorPartitions, m.janitorAuditRows, m.janitorExports, m.janitorLastSuccess,
	}, slices.Concat(m.grpc.collectors(), m.lifecycle.collectors())...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.initSeries()
	return m, nil
}

// initSeries creates the series of every label value known in advance at
// zero. A counter series born at 1 hides its first increment from rate()
// and increase(), and an alert on the first tier error must not miss it.
func (m *Metrics) initSeries() {
	for _, s := range []tiers.State{tiers.StateValidated, tiers.StateProcessing, tiers.StateSettled, tiers.StateFailed} {
		m.transitions.WithLabelValues(s.String())
	}
	for _, t := range []string{tierFast, tierDurable} {
		m.tierErrors.WithLabelValues(t)
		m.samplerErrors.WithLabelValues(t)
	}
	for _, o := range []string{"ACQUIRED", "DUPLICATE", "IN_PROGRESS", "PAYLOAD_MISMATCH", "DEFERRED", "SUPERSEDED", "ERROR"} {
		m.claimDuration.WithLabelValues(o)
	}
	for _, r := range []string{"done", "skipped", "failed"} {
		m.janitorPasses.WithLabelValues(r)
	}
	for _, r := range []string{"done", "failed"} {
		m.janitorExports.WithLabelValues(r)
	}
	if p := m.cfg.Providers; p != nil {
		for _, prov := range p.List() {
			m.providerTTL.WithLabelValues(prov.Name).Set(prov.TTL.Seconds())
			m.effectsRecovered.WithLabelValues(prov.Name)
			if prov.Rule != nil {
				// Only a provider (or group) that derives keys can fall back.
				m.keyFallbacks.WithLabelValues(prov.Name)
			}
		}
		m.sampleReviews(m.cfg.Clock.Now())
	}
	m.initLifecycleSeries()
}

// SetTiers records which tiers this replica runs (claimd_tiers_info):
// dashboards and alerts that only make sense with a fast tier select on it.
func (m *Metrics) SetTiers(fast, durable string) {
	m.tiersInfo.Reset()
	m.tiersInfo.WithLabelValues(fast, durable).Set(1)
}

// SetSQLiteDurability records the embedded tier's --sqlite-durability
// (claimd_sqlite_durability), so that an alert can find a replica running
// relaxed.
func (m *Metrics) SetSQLiteDurability(mode string) {
	m.sqliteDurable.Reset()
	m.sqliteDurable.WithLabelValues(mode).Set(1)
}

// Record implements service.Recorder.
func (m *Metrics) Record(_ context.Context, r *service.Request) {
	if r.Method == "Claim" {
		ns, prov := "", ""
		if r.Known {
			ns, prov = m.cfg.NamespaceLabel(r.Namespace), r.Provider
		}
		outcome := r.OutcomeLabel()
		m.claims.WithLabelValues(ns, prov, outcome, r.ReasonLabel(), r.ServedByLabel(), r.KeySourceLabel()).Inc()
		m.claimDuration.WithLabelValues(outcome).Observe(r.Latency.Seconds())
		if r.KeyFallback && r.Known {
			m.keyFallbacks.WithLabelValues(prov).Inc()
		}
		if !r.Failed() {
			switch {
			case r.Outcome == tiers.OutcomeAcquired && r.Reason == tiers.ReasonLeaseExpired:
				m.takeovers.Inc()
			case r.Outcome == tiers.OutcomePayloadMismatch:
				m.payloadMismatches.Inc()
			}
			m.recordOrder(r)
		}
	}
	if r.Method == "Transition" && !r.Failed() && r.Changed {
		m.transitions.WithLabelValues(r.To.String()).Inc()
	}
	if r.RecoveredEffect() && r.Known {
		m.effectsRecovered.WithLabelValues(r.Provider).Inc()
	}
	switch r.ErrReason {
	case service.ReasonInvalidTransition:
		m.invalidTransitions.Inc()
	case service.ReasonStaleToken:
		m.staleTokens.Inc()
	case service.ReasonDurableUnavailable:
		// The service's error boundary sees every durable failure, in
		// two-tier and durable-only mode alike (the composition reports
		// only the fast tier's, which it survives).
		m.tierErrors.WithLabelValues(tierDurable).Inc()
	}
}

// FastFalseNegative implements twotier.Observer.
func (m *Metrics) FastFalseNegative() { m.falseNegatives.Inc() }

// FastIntegrityFailure implements twotier.Observer.
func (m *Metrics) FastIntegrityFailure() { m.integrityFailures.Inc() }

// FastRepairsPending implements twotier.Observer.
func (m *Metrics) FastRepairsPending(n int) { m.repairsPending.Set(float64(n)) }

// FastRepairDropped implements twotier.Observer.
func (m *Metrics) FastRepairDropped() { m.repairsDropped.Inc() }

// TierError implements twotier.Observer.
func (m *Metrics) TierError(tier tiers.Tier, _ string, _ error) {
	m.tierErrors.WithLabelValues(strings.ToLower(tier.String())).Inc()
}

// JanitorPass implements janitor.Observer.
func (m *Metrics) JanitorPass(r janitor.Report, err error) {
	if r.DryRun {
		return
	}
	// What a pass deleted counts even when it failed later on.
	m.janitorClaims.Add(float64(r.Claims))
	m.janitorPartitions.Add(float64(len(r.Audit.Partitions)))
	m.janitorAuditRows.Add(float64(r.Audit.Rows))
	m.janitorExports.WithLabelValues("done").Add(float64(len(r.Audit.Exported)))
	if r.Audit.ExportFailed != "" {
		m.janitorExports.WithLabelValues("failed").Inc()
	}
	switch {
	case err != nil:
		m.janitorPasses.WithLabelValues("failed").Inc()
	case r.Skipped:
		m.janitorPasses.WithLabelValues("skipped").Inc()
	default:
		m.janitorPasses.WithLabelValues("done").Inc()
		m.janitorLastSuccess.Set(float64(r.Started.Add(r.Duration).UnixMilli()) / 1000)
	}
}
