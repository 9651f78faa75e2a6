package main

import (
	"os"
	"strings"
	"testing"
)

// TestCapacityCommand: claimd capacity sizes a rate with the provider's
// window from the registry, and refuses what it cannot read.
func TestCapacityCommand(t *testing.T) {
	tests := []struct {
		desc     string
		args     []string
		wantCode int
		want     []string
	}{
		{"stripe at 1000/s", []string{"--rate", "1000/s", "--provider", "stripe"}, 0,
			// 1000/s × 84h = 302.4M keys; × (84h + 1h grace) = 306M rows.
			[]string{"live keys    302.4M", "claims rows  306.0M", "audit rows", "claimd", "PostgreSQL"}},
		{"per minute", []string{"--rate", "60000/m", "--provider", "stripe"}, 0,
			[]string{"live keys    302.4M"}},
		{"a small result costs Redis memory", []string{"--rate", "1/s", "--result-bytes", "64"}, 0,
			[]string{"356 bytes per record"}}, // sizes.json: kept in the record
		{"a large result costs Redis nothing", []string{"--rate", "1/s", "--result-bytes", "4096"}, 0,
			[]string{"292 bytes per record", "a result past 64 bytes is kept by PostgreSQL only"}},
		{"no rate", []string{"--provider", "stripe"}, 2, []string{"--rate is required"}},
		{"bad unit", []string{"--rate", "5/d"}, 2, []string{`unit "d" is not s, m or h`}},
		{"unknown provider", []string{"--rate", "5/s", "--provider", "nope"}, 2, []string{"not in the registry"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			out, code := run(t, append([]string{"capacity"}, tc.args...)...)
			if code != tc.wantCode {
				t.Fatalf("claimd capacity %v exit = %d, want %d\n%s", tc.args, code, tc.wantCode, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("claimd capacity %v output lacks %q:\n%s", tc.args, w, out)
				}
			}
		})
	}
}

// TestDocsSizingTable: the sizing table of docs/operating.md is what claimd
// capacity prints today, so a re-measured sizes.json cannot leave it behind.
func TestDocsSizingTable(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n### Sizing\n")
	if !ok {
		t.Fatal("docs/operating.md has no Sizing section")
	}
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 10 || !strings.ContainsAny(cells[0], "0123456789") {
			continue
		}
		rows++
		rate := strings.ReplaceAll(cells[0], ",", "")
		out, code := run(t, "capacity", "--rate", rate+"/s", "--provider", "stripe")
		if code != 0 {
			t.Fatalf("claimd capacity --rate %s/s exit %d\n%s", rate, code, out)
		}
		for _, cell := range cells[1:] {
			if !strings.Contains(out, cell) {
				t.Errorf("docs/operating.md sizing row %s/s has %q; claimd capacity prints:\n%s", rate, cell, out)
			}
		}
	}
	if rows != 3 {
		t.Fatalf("docs/operating.md sizing table rows = %d, want 3 (100, 1,000, 10,000 events/s)", rows)
	}
}
