package main

import (
	"strings"
	"testing"
)

// TestReconcileUsage: what claimd reconcile cannot run with exits 2 and
// says why, before any connection.
func TestReconcileUsage(t *testing.T) {
	events := writeFile(t, "events.jsonl", `{"id":"evt_1"}`+"\n")
	for _, tc := range []struct {
		desc string
		args []string
		want string
	}{
		{"no namespace", []string{"--provider", "stripe", "--events", events}, "--namespace is required"},
		{"no provider", []string{"--namespace", "billing", "--events", events}, "--provider is required"},
		{"no events", []string{"--namespace", "billing", "--provider", "stripe"}, "--events is required"},
		{"a missing file", []string{"--namespace", "billing", "--provider", "stripe", "--events", "/nonexistent/events.json"}, "no such file"},
		{"a negative age", []string{"--namespace", "billing", "--provider", "stripe", "--events", events, "--min-age", "-1m"}, "must not be negative"},
		{"a token in plaintext to a remote host", []string{"--namespace", "billing", "--provider", "stripe", "--events", events,
			"--address", "claimd.example:50051", "--plaintext", "--token", "claimd_x"}, "plaintext"},
	} {
		r := runEnv(t, nil, append([]string{"reconcile"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: claimd reconcile = exit %d, stderr %q; want exit 2 saying %q", tc.desc, r.code, r.stderr, tc.want)
		}
	}
}
