package metrics_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	alertsFile    = "../../deploy/prometheus/alerts.yaml"
	dashboardFile = "../../deploy/grafana/claimd.json"
)

// selectedNames returns the metric names an expression selects.
func selectedNames(t *testing.T, p parser.Parser, expr string) []string {
	t.Helper()
	e, err := p.ParseExpr(expr)
	if err != nil {
		t.Fatalf("parsing %q: %v", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// checkNames fails for every claimd_ or grpc_ metric a rule or panel names
// that /metrics does not serve, and for every selector without a name.
func checkNames(t *testing.T, where string, names []string, exposed, recorded map[string]bool) {
	t.Helper()
	for _, n := range names {
		switch {
		case n == "":
			t.Errorf("%s: a selector without a metric name", where)
		case recorded[n]:
		case strings.HasPrefix(n, "claimd_") || strings.HasPrefix(n, "grpc_"):
			if !exposed[n] {
				t.Errorf("%s: metric %s is not exported by internal/metrics", where, n)
			}
		default:
			t.Errorf("%s: metric %s is neither claimd's nor recorded by alerts.yaml", where, n)
		}
	}
}

// TestAlertRules parses deploy/prometheus/alerts.yaml as Prometheus would
// (strict YAML, PromQL, templates) and checks that every metric it names is
// one claimd exports, or one of its own recording rules.
func TestAlertRules(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	exposed := exposedNames(t)
	recorded := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	var alerts []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := g.Name + "/" + r.Record + r.Alert
			checkNames(t, where, selectedNames(t, p, r.Expr), exposed, recorded)
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
				if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
					t.Errorf("%s: needs a severity label and a summary annotation", where)
				}
			}
		}
	}
	// The alerts the issue asks for, by what they watch.
	sort.Strings(alerts)
	for _, want := range []string{
		"ClaimdDuplicateRatioSpike",        // duplicate-ratio spike
		"ClaimdFastTierHitRatioCollapsing", // hit ratio toward zero
		"ClaimdDurableTierErrors",          // durable errors
		"ClaimdLeaseTakeoversSustained",    // takeovers for 5 minutes
		"ClaimdProviderReviewOverdue",      // review overdue
		"ClaimdDeferredEventsOverdue",      // deferred longer than half the horizon
		"ClaimdDeferredEventsLost",         // deferred past the horizon
		"ClaimdReconciliationMismatch",     // claimd reconcile found events that need a person
	} {
		if i := sort.SearchStrings(alerts, want); i == len(alerts) || alerts[i] != want {
			t.Errorf("alerts.yaml has no %s (alerts: %v)", want, alerts)
		}
	}
}

// grafanaVars are the dashboard's variables, replaced by what Prometheus
// would receive.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"${namespace:regex}", ".*",
	"${provider:regex}", ".*",
	"$namespace", ".*",
	"$provider", ".*",
)

// TestDashboard: deploy/grafana/claimd.json is JSON, each panel's queries
// parse as PromQL, every metric they name is exported, and the panels the
// issue lists are there.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("dashboard uid %q title %q: both required", dash.UID, dash.Title)
	}
	p := parser.NewParser(parser.Options{})
	exposed := exposedNames(t)
	leftover := regexp.MustCompile(`\$\w+`)
	var titles []string
	for _, panel := range dash.Panels {
		titles = append(titles, strings.ToLower(panel.Title))
		if panel.Type == "row" || panel.Type == "text" {
			continue
		}
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, tg := range panel.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			if v := leftover.FindString(expr); v != "" {
				t.Errorf("panel %q: unknown variable %s in %q", panel.Title, v, tg.Expr)
				continue
			}
			checkNames(t, "panel "+panel.Title, selectedNames(t, p, expr), exposed, nil)
		}
	}
	all := strings.Join(titles, "\n")
	for _, want := range []string{"outcome", "duplicate ratio", "hit ratio", "latency", "tier errors", "live keys", "false negatives", "takeovers", "out-of-order", "deferred"} {
		if !strings.Contains(all, want) {
			t.Errorf("no dashboard panel title mentions %q; titles:\n%s", want, all)
		}
	}
}
