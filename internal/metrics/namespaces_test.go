package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/metrics"
)

// namespaceLabels returns claimd_claims_total's ACQUIRED counts by
// namespace label.
func namespaceLabels(t *testing.T, w *world) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range w.families(t)["claimd_claims_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "namespace" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func claimIn(t *testing.T, w *world, ns string) {
	t.Helper()
	_, err := w.client.Claim(context.Background(), &pb.ClaimRequest{Namespace: ns, Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_1"}})
	if err != nil {
		t.Fatalf("Claim(namespace %q) error = %v", ns, err)
	}
}

// TestNamespaceLabelsBounded: 1,000 caller-chosen namespaces used to give
// /metrics 1,000 series; without an auth file the first 100 keep their
// name and the rest count as "other".
func TestNamespaceLabelsBounded(t *testing.T) {
	w := newWorld(t)
	const total = 1000
	series := func() int { return len(namespaceLabels(t, w)) }
	var after []int
	for i := range total {
		claimIn(t, w, fmt.Sprintf("ns-%04d", i))
		if i+1 == metrics.DefaultMaxNamespaces+1 || i+1 == total/2 || i+1 == total {
			after = append(after, series())
		}
	}
	want := metrics.DefaultMaxNamespaces + 1 // the first 100, and "other"
	for i, n := range after {
		if n != want {
			t.Errorf("namespace label values after checkpoint %d = %d, want %d (the bound, then no growth)", i, n, want)
		}
	}
	got := namespaceLabels(t, w)
	if got[metrics.OtherNamespace] != total-metrics.DefaultMaxNamespaces {
		t.Errorf(`claims with namespace="other" = %v, want %d`, got[metrics.OtherNamespace], total-metrics.DefaultMaxNamespaces)
	}
	for i := range metrics.DefaultMaxNamespaces {
		if ns := fmt.Sprintf("ns-%04d", i); got[ns] != 1 {
			t.Errorf("claims with namespace=%q = %v, want 1 (among the first seen)", ns, got[ns])
		}
	}
	// A namespace seen early keeps its label after the bound is reached.
	claimIn(t, w, "ns-0007")
	if got := namespaceLabels(t, w)["ns-0007"]; got != 2 {
		t.Errorf(`claims with namespace="ns-0007" after the bound = %v, want 2`, got)
	}
}

// TestNamespaceLabelFromConfig: with a NamespaceLabel (the auth file's
// names), only its values appear, however many namespaces callers use.
func TestNamespaceLabelFromConfig(t *testing.T) {
	w := newWorldWith(t, func(c *metrics.Config) {
		c.NamespaceLabel = func(ns string) string {
			switch {
			case ns == "billing":
				return ns
			case strings.HasPrefix(ns, "payouts-"):
				return "payouts-*"
			}
			return metrics.OtherNamespace
		}
	})
	for _, ns := range []string{"billing", "payouts-eu", "payouts-us", "payouts-ap", "stranger", "another"} {
		claimIn(t, w, ns)
	}
	want := map[string]float64{"billing": 1, "payouts-*": 3, "other": 2}
	got := namespaceLabels(t, w)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("claims by namespace label = %v, want %v", got, want)
	}
}
