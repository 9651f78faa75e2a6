package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/template"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/claimd/claimd/internal/reconcile"
)

// reconcileTextfile is what claimd reconcile --metrics-textfile writes for
// a run that found s (the command calls reconcile.Count on a fresh
// registry and prometheus.WriteToTextfile, as here).
func reconcileTextfile(t *testing.T, provider string, s reconcile.Summary) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reconcile.Count(reconcile.NewMetrics(reg), provider, s)
	path := filepath.Join(t.TempDir(), "claimd_reconcile.prom")
	if err := prometheus.WriteToTextfile(path, reg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// floatSample is one float sample of a series in memory.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }

// listSeriesSet iterates over series in memory.
type listSeriesSet struct {
	series []storage.Series
	i      int
}

func (l *listSeriesSet) Next() bool                        { l.i++; return l.i <= len(l.series) }
func (l *listSeriesSet) At() storage.Series                { return l.series[l.i-1] }
func (l *listSeriesSet) Err() error                        { return nil }
func (l *listSeriesSet) Warnings() annotations.Annotations { return nil }

// firingAlerts serves exposition text as series scraped every minute for
// 10 minutes, with extra labels added to every series (a Pushgateway's
// grouping key), evaluates the alerting rule called name of alerts.yaml
// over them with Prometheus's own PromQL engine, and returns the firing
// alerts' labels and summaries, sorted. The series are served from memory:
// Prometheus's TSDB test helpers and its rules package pull in every
// service discovery (and a newer connect-go) as dependencies.
func firingAlerts(t *testing.T, name, exposition string, extra map[string]string) []string {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatalf("rulefmt: %v", errs)
	}
	var rule *rulefmt.Rule
	for _, g := range groups.Groups {
		for i := range g.Rules {
			if g.Rules[i].Alert == name {
				rule = &g.Rules[i]
			}
		}
	}
	if rule == nil {
		t.Fatalf("alerts.yaml has no alert %s", name)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		t.Fatalf("parsing the exposition: %v\n%s", err, exposition)
	}
	// Each series as scraped every minute for 10 minutes from the Unix
	// epoch on.
	var series []storage.Series
	for fname, f := range families {
		for _, m := range f.GetMetric() {
			b := labels.NewBuilder(labels.EmptyLabels())
			for k, v := range extra {
				b.Set(k, v)
			}
			for _, l := range m.GetLabel() {
				b.Set(l.GetName(), l.GetValue())
			}
			b.Set(model.MetricNameLabel, fname)
			var samples []chunks.Sample
			for i := range 11 {
				samples = append(samples, floatSample{t: int64(i) * time.Minute.Milliseconds(), f: m.GetCounter().GetValue()})
			}
			series = append(series, storage.NewListSeries(b.Labels(), samples))
		}
	}
	st := &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			out := &listSeriesSet{}
		next:
			for _, s := range series {
				for _, m := range ms {
					if !m.Matches(s.Labels().Get(m.Name)) {
						continue next
					}
				}
				out.series = append(out.series, s)
			}
			sort.Slice(out.series, func(i, j int) bool { return labels.Compare(out.series[i].Labels(), out.series[j].Labels()) < 0 })
			return out
		},
	}}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 10000, Timeout: 10 * time.Second})
	query := func(ctx context.Context, q string, ts time.Time) (promql.Vector, error) {
		qry, err := engine.NewInstantQuery(ctx, st, nil, q, ts)
		if err != nil {
			return nil, err
		}
		defer qry.Close()
		return qry.Exec(ctx).Vector()
	}
	// As Prometheus's rule manager does (rules.AlertingRule): evaluate the
	// expression once a minute over the samples, which start at the Unix
	// epoch; a series is firing once it has been in the result for the
	// rule's `for`; the alert's labels are the series' and the rule's, and
	// its summary is the rule's template expanded with them.
	since := map[string]time.Time{}
	var last promql.Vector
	var at time.Time
	for ts := time.Unix(0, 0).Add(time.Minute); !ts.After(time.Unix(0, 0).Add(10 * time.Minute)); ts = ts.Add(time.Minute) {
		v, err := query(context.Background(), rule.Expr, ts)
		if err != nil {
			t.Fatalf("evaluating %s: %v", name, err)
		}
		seen := map[string]bool{}
		for _, smpl := range v {
			k := smpl.Metric.String()
			seen[k] = true
			if _, ok := since[k]; !ok {
				since[k] = ts
			}
		}
		for k := range since {
			if !seen[k] {
				delete(since, k)
			}
		}
		last, at = v, ts
	}
	var firing []string
	for _, smpl := range last {
		if at.Sub(since[smpl.Metric.String()]) < time.Duration(rule.For) {
			continue
		}
		b := labels.NewBuilder(smpl.Metric)
		for k, v := range rule.Labels {
			b.Set(k, v)
		}
		b.Set(labels.AlertName, rule.Alert)
		ls := b.Labels()
		// Prometheus's own alert template preamble.
		text := "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}" + rule.Annotations["summary"]
		tmpl := template.NewTemplateExpander(context.Background(), text, "summary",
			template.AlertTemplateData(smpl.Metric.Map(), nil, "", smpl), model.TimeFromUnixNano(at.UnixNano()), template.QueryFunc(query), nil, nil)
		summary, err := tmpl.Expand()
		if err != nil {
			t.Fatalf("%s: summary: %v", name, err)
		}
		firing = append(firing, ls.String()+" "+summary)
	}
	sort.Strings(firing)
	return firing
}

// TestReconciliationAlertFires: the alert pages on the counter as claimd
// reconcile publishes it, once per mismatched kind, with the namespace the
// Pushgateway's grouping key adds; a clean run (every kind 0) fires none.
func TestReconciliationAlertFires(t *testing.T) {
	push := map[string]string{"job": "claimd_reconcile", "namespace": "billing", "instance": "stripe"}
	found := reconcileTextfile(t, "stripe", reconcile.Summary{reconcile.NeverDelivered: 3, reconcile.Stuck: 1, reconcile.Settled: 27, reconcile.Waiting: 1})
	got := firingAlerts(t, "ClaimdReconciliationMismatch", found, push)
	want := []string{
		`{alertname="ClaimdReconciliationMismatch", kind="never_delivered", namespace="billing", provider="stripe", severity="critical"} claimd: 3 stripe events in billing are never_delivered`,
		`{alertname="ClaimdReconciliationMismatch", kind="stuck", namespace="billing", provider="stripe", severity="critical"} claimd: 1 stripe events in billing are stuck`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("firing alerts after a run that found 3 never delivered and 1 stuck:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	clean := reconcileTextfile(t, "stripe", reconcile.Summary{reconcile.Settled: 33})
	if !strings.Contains(clean, `claimd_reconciliation_mismatch_total{kind="never_delivered",provider="stripe"} 0`) {
		t.Errorf("a clean run's textfile lacks the zero series that resolve the alert:\n%s", clean)
	}
	if got := firingAlerts(t, "ClaimdReconciliationMismatch", clean, push); len(got) > 0 {
		t.Errorf("a clean run fires %v, want nothing", got)
	}
}
