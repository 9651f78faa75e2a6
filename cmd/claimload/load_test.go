package main

import (
	"testing"
	"time"
)

// TestAppendKey pins the key of each request number per scenario: ghz's
// templates in bench/cmd/benchrun send the same keys.
func TestAppendKey(t *testing.T) {
	tests := []struct {
		desc     string
		scenario Scenario
		n        uint64
		want     string
	}{
		{"new", ScenarioNew, 7, "run1-7"},
		{"dup wraps around the settled keys", ScenarioDup, 1007, "settled-7"},
		{"mix: every tenth is new", ScenarioMix, 20, "run1-20"},
		{"mix: the others are duplicates", ScenarioMix, 21, "settled-21"},
		{"contend: always the same key", ScenarioContend, 99, "run1"},
		{"lifecycle: every event on a new key", ScenarioLifecycle, 1007, "run1-1007"},
		{"lifecycle-start: every event on a new key", ScenarioLifecycleStart, 3, "run1-3"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			c := Config{Scenario: tc.scenario, Prefix: "run1", DupPrefix: "settled", DupKeys: 1000}
			if got := string(c.AppendKey(nil, tc.n)); got != tc.want {
				t.Fatalf("AppendKey(%v, %d) = %q, want %q", tc.scenario, tc.n, got, tc.want)
			}
		})
	}
}

func TestParseScenario(t *testing.T) {
	for _, s := range []Scenario{ScenarioNew, ScenarioDup, ScenarioMix, ScenarioContend, ScenarioLifecycle, ScenarioLifecycleStart} {
		got, err := ParseScenario(s.String())
		if err != nil || got != s {
			t.Fatalf("ParseScenario(%q) = %v, %v; want %v", s.String(), got, err, s)
		}
	}
	if _, err := ParseScenario("nope"); err == nil {
		t.Fatalf("ParseScenario(%q) error = nil, want an error", "nope")
	}
}

// TestPercentile: nearest rank, on 1..100 ms.
func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := Percentile(lat, tc.p); got != tc.want {
			t.Errorf("Percentile(1..100ms, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("Percentile(empty, 99) = %v, want 0", got)
	}
}
