package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/chaos"
)

func TestReportVerdict(t *testing.T) {
	clean := scenarioResult{Name: "baseline", Mode: modeProduction, Fault: "none", Recover: -1}
	broken := scenarioResult{Name: "short-deadlines", Mode: modeProduction, Recover: 0,
		Violations: []chaos.Violation{{Check: chaos.CheckFinal, Key: "k", Detail: "final probe on r1: IN_PROGRESS | held"}}}
	okRow := crashRow{Mode: modeEmbedded, Point: "reserve", Crashed: true, Steps: []crashStep{{OK: true}}}
	notCrashed := crashRow{Mode: modeEmbedded, Point: "reserve", Steps: []crashStep{{OK: true}}}
	tests := []struct {
		desc    string
		r       report
		failed  bool
		verdict string
	}{
		{desc: "clean", r: report{Scenarios: []scenarioResult{clean}, Crash: []crashRow{okRow}}, verdict: "**Verdict: 0 violations**"},
		{desc: "a scenario violation", r: report{Scenarios: []scenarioResult{clean, broken}}, failed: true, verdict: "**Verdict: 1 violations**"},
		{desc: "a crash row that did not crash", r: report{Crash: []crashRow{notCrashed}}, failed: true, verdict: "**Verdict: 1 violations**"},
		{desc: "a scenario that could not run", r: report{Scenarios: []scenarioResult{{Name: "x", Err: "boom", Recover: -1}}}, failed: true, verdict: "**Verdict: 1 violations**"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.r.failed(); got != tc.failed {
				t.Errorf("failed() = %v, want %v", got, tc.failed)
			}
			path := filepath.Join(t.TempDir(), "RELIABILITY.md")
			if err := tc.r.writeMarkdown(path); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.verdict) {
				t.Errorf("report lacks %q:\n%s", tc.verdict, b)
			}
			if strings.Contains(string(b), "IN_PROGRESS | held") {
				t.Errorf("a | inside a table cell was not escaped")
			}
		})
	}
}

// A lifecycle scenario gets its row in the Lifecycles table, its
// violations counted there, and every check its plain sentence.
func TestReportLifecycles(t *testing.T) {
	lr := &chaos.LifecycleResult{Entities: 3, Events: 7, Applied: 5, Superseded: 1, Waiting: 1, DeferredAnswers: 9, ReadyRows: 2, Reads: 20}
	r := report{Scenarios: []scenarioResult{
		{Name: "baseline", Recover: -1},
		{Name: "lifecycle-replica-kill", Recover: 0, Lifecycle: lr,
			Violations: []chaos.Violation{{Check: chaos.CheckOrder, Key: "k", Detail: "x"}, {Check: chaos.CheckConverge, Key: "k", Detail: "y"}}},
	}}
	path := filepath.Join(t.TempDir(), "RELIABILITY.md")
	if err := r.writeMarkdown(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	row := "| lifecycle-replica-kill | 3 | 7 | 5 | 1 | 1 | 9 | 2 | 20 | **1** (lifecycle-order 1) | 0 |"
	if !strings.Contains(md, row) {
		t.Errorf("report lacks the lifecycle row %q:\n%s", row, md)
	}
	for _, c := range append(append([]struct{ Name, Asserts string }{}, chaos.Checks...), chaos.LifecycleChecks...) {
		if plainCheck[c.Name] == "" {
			t.Errorf("check %s has no plain sentence", c.Name)
		}
		if !strings.Contains(md, "| `"+c.Name+"` | "+plainCheck[c.Name]+" |") {
			t.Errorf("report does not explain %s", c.Name)
		}
	}
	if !strings.Contains(md, "## What is not covered") {
		t.Error("report says nothing of what is not covered")
	}
}
