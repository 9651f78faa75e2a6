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
