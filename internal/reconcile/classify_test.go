package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestClassify is the table of verdicts: what claimd holds for an event's
// key, against the provider's horizon and window and the time now.
func TestClassify(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	p := Policy{Now: now, Horizon: 72 * time.Hour, Window: 84 * time.Hour, MinAge: 10 * time.Minute, StuckAfter: time.Hour}
	ev := func(age time.Duration) Event { return Event{ID: "evt_1", Key: "evt_1", Created: now.Add(-age)} }
	rec := func(s State, firstSeen, leaseLeft time.Duration) *Record {
		return &Record{State: s, Holder: "pod-1", FirstSeen: now.Add(-firstSeen), LeaseExpires: now.Add(leaseLeft)}
	}
	released := rec(StateReceived, time.Minute, time.Minute)
	released.Released = true
	for _, c := range []struct {
		desc  string
		e     Event
		rec   *Record
		def   *Deferral
		want  Kind
		state string
		why   string
	}{
		{"settled", ev(time.Hour), rec(StateSettled, time.Hour, -time.Hour), nil, Settled, "SETTLED", "settled"},
		{"failed", ev(time.Hour), rec(StateFailed, time.Hour, -time.Hour), nil, Failed, "FAILED", "FAILED"},
		{"processing, lease ended", ev(time.Hour), rec(StateProcessing, time.Hour, -30*time.Second), nil, Stuck, "PROCESSING", "lease ended 30s ago"},
		{"received, lease ends now", ev(time.Hour), rec(StateReceived, time.Hour, 0), nil, Stuck, "RECEIVED", "lease ended 0s ago"},
		{"validated, released", ev(time.Hour), released, nil, Stuck, "RECEIVED", "released"},
		{"processing, live lease", ev(time.Hour), rec(StateProcessing, time.Minute, time.Minute), nil, InProgress, "PROCESSING", "live lease"},
		{"processing, renewed past stuck-after", ev(3 * time.Hour), rec(StateProcessing, 2*time.Hour, time.Minute), nil, Stuck, "PROCESSING", "more than --stuck-after 1h0m0s"},
		{"a record outlives its event's window", ev(90 * time.Hour), rec(StateSettled, 90*time.Hour, 0), nil, Settled, "SETTLED", ""},
		{"nothing", ev(time.Hour), nil, nil, NeverDelivered, "", "no handler claimed it"},
		{"nothing, created unknown", Event{ID: "evt_1", Key: "evt_1"}, nil, nil, NeverDelivered, "", ""},
		{"nothing, too recent", ev(5 * time.Minute), nil, nil, TooRecent, "", "less than --min-age"},
		{"nothing, before the window", ev(85 * time.Hour), nil, nil, OutsideWindow, "", "before the window of 84h0m0s"},
		{"deferred an hour ago", ev(time.Hour), nil, &Deferral{FirstSeen: now.Add(-time.Hour), Awaiting: []string{"succeeded"}}, Waiting, "DEFERRED", "awaiting [succeeded]"},
		{"deferred half the horizon ago", ev(40 * time.Hour), nil, &Deferral{FirstSeen: now.Add(-36 * time.Hour)}, Deferred, "DEFERRED", "past half the retry horizon"},
		{"deferred, then applied", ev(40 * time.Hour), nil, &Deferral{Applied: true, FirstSeen: now.Add(-36 * time.Hour)}, Settled, "DEFERRED", "applied"},
		{"superseded", ev(40 * time.Hour), nil, &Deferral{Superseded: true, FirstSeen: now.Add(-39 * time.Hour)}, Superseded, "SUPERSEDED", "superseded"},
	} {
		f := Classify(c.e, c.rec, c.def, p)
		if f.Kind != c.want || f.State != c.state || !strings.Contains(f.Why, c.why) {
			t.Errorf("%s: Classify = %s %q (%s), want %s %q (%q)", c.desc, f.Kind, f.State, f.Why, c.want, c.state, c.why)
		}
		if f.Kind.NeedsPerson() != (c.want == NeverDelivered || c.want == Stuck || c.want == Failed || c.want == Deferred) {
			t.Errorf("%s: %s.NeedsPerson() = %v", c.desc, f.Kind, f.Kind.NeedsPerson())
		}
	}
}

// TestCount: every kind that needs a person has a series, 0 when the run
// found none, so that a clean run resolves the alert; the others have none.
func TestCount(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewMetrics(reg)
	s := Summarize([]Finding{{Kind: NeverDelivered}, {Kind: NeverDelivered}, {Kind: Stuck}, {Kind: Settled}, {Kind: Waiting}})
	if s.Mismatches() != 3 {
		t.Errorf("Mismatches() = %d, want 3", s.Mismatches())
	}
	Count(c, "stripe", s)
	want := `# HELP claimd_reconciliation_mismatch_total ` + "Events of the provider's own list that the latest claimd reconcile found needing a person, by kind: never_delivered, stuck, failed, deferred (past half the retry horizon)." + `
# TYPE claimd_reconciliation_mismatch_total counter
claimd_reconciliation_mismatch_total{kind="deferred",provider="stripe"} 0
claimd_reconciliation_mismatch_total{kind="failed",provider="stripe"} 0
claimd_reconciliation_mismatch_total{kind="never_delivered",provider="stripe"} 2
claimd_reconciliation_mismatch_total{kind="stuck",provider="stripe"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), MetricName); err != nil {
		t.Error(err)
	}
}
