package horizon_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/horizon"
)

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{72 * time.Hour, "72h"},
		{12 * time.Hour, "12h"},
		{720 * time.Hour, "720h"},
		{time.Hour, "1h"},
		{60 * time.Second, "60s"},
		{15 * time.Second, "15s"},
		{90 * time.Second, "90s"},
		{10 * time.Minute, "10m"},
		{90 * time.Minute, "1h30m"},
		{27*time.Hour + 35*time.Minute + 5*time.Second, "27h35m5s"},
		{time.Hour + 15*time.Second, "1h0m15s"},
		{1500 * time.Millisecond, "1.5s"},
		{-time.Hour, "-1h"},
	}
	for _, tc := range tests {
		got := horizon.FormatDuration(tc.d)
		if got != tc.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
		if d, err := time.ParseDuration(got); err != nil || d != tc.d {
			t.Errorf("time.ParseDuration(FormatDuration(%v)) = %v, %v; want the duration back", tc.d, d, err)
		}
	}
}

func TestTable(t *testing.T) {
	r := mustDefault(t)
	reviewed := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		desc        string
		now         time.Time
		wantOverdue string
	}{
		{desc: "fresh reviews", now: reviewed.AddDate(0, 1, 0), wantOverdue: "no"},
		{desc: "reviews older than the review age", now: reviewed.AddDate(1, 0, 0), wantOverdue: "yes"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var buf bytes.Buffer
			if err := r.Table(&buf, tc.now, 180*24*time.Hour); err != nil {
				t.Fatalf("Table() error = %v", err)
			}
			lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
			if got, want := strings.Fields(lines[0]), []string{"NAME", "HORIZON", "MARGIN", "TTL", "LEASE", "MAX_LEASE", "KEY", "RULE", "FAMILIES", "SOURCE", "REVIEWED", "OVERDUE"}; strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("Table() header = %q, want %q", got, want)
			}
			// A row is a provider's first line and the continuation lines
			// (which start blank) below it.
			ruleCol := strings.Index(lines[0], "KEY RULE")
			familyCol := strings.Index(lines[0], "FAMILIES")
			sourceCol := strings.Index(lines[0], "SOURCE")
			rows := map[string][]string{}
			continued := map[string][]string{}
			var name string
			for _, l := range lines[1:] {
				if !strings.HasPrefix(l, " ") {
					f := strings.Fields(l)
					name = f[0]
					rows[name] = f
					continued[name] = append(continued[name], strings.TrimSpace(l[ruleCol:familyCol])+" / "+strings.TrimSpace(l[familyCol:sourceCol]))
					continue
				}
				if strings.TrimSpace(l[:ruleCol]) != "" || strings.TrimSpace(l[sourceCol:]) != "" {
					t.Errorf("Table() continuation line %q has cells outside KEY RULE and FAMILIES", l)
				}
				continued[name] = append(continued[name], strings.TrimSpace(l[ruleCol:familyCol])+" / "+strings.TrimSpace(l[familyCol:sourceCol]))
			}
			if len(rows) != len(r.List()) {
				t.Fatalf("Table() has %d rows, want %d:\n%s", len(rows), len(r.List()), buf.String())
			}
			wantRows := map[string][]string{
				"stripe": {"stripe", "72h", "12h", "84h", "60s", "10m", "json:id", "snapshot", "events", "(v1)", "https://docs.stripe.com/webhooks#retries", "2026-11-01", tc.wantOverdue},
				"twilio": {"twilio", "15s", "1h", "1h0m15s", "60s", "10m", "header:I-Twilio-Idempotency-Token"},
				"adyen":  {"adyen", "720h", "24h", "744h", "60s", "1h"},
				"billing": {"billing", "720h", "24h", "744h", "60s", "1h", "-", "-", "group", "of", "adyen,", "paypal,", "stripe;", "ttl", "from", "adyen",
					"2026-11-01", tc.wantOverdue},
			}
			for name, want := range wantRows {
				got := rows[name]
				if len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
					t.Errorf("Table() row %s = %q, want it to start %q", name, got, want)
				}
			}
			// Each alternative on its own line, in order, beside what it covers.
			wantLines := map[string][]string{
				"shopify": {"header:X-Shopify-Webhook-Id / classic webhooks (X-Shopify-*)", "| header:Shopify-Webhook-Id / Events webhooks (shopify-*)"},
				"stripe":  {"json:id / snapshot events (v1)", " / thin events (v2)"},
			}
			for name, want := range wantLines {
				if got := continued[name]; strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("Table() lines of %s = %q, want %q", name, got, want)
				}
			}
			adyen := lookup(t, r, "adyen")
			if got, want := len(continued["adyen"]), len(adyen.Rule.Alternatives()); got != want || want < 2 {
				t.Errorf("Table() shows adyen on %d lines, want one per alternative (%d)", got, want)
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTableReportsWriteErrors(t *testing.T) {
	if err := mustDefault(t).Table(failingWriter{}, time.Now(), 0); err == nil {
		t.Error("Table(failing writer) error = nil, want the write error")
	}
}

func TestLifecycleGraphs(t *testing.T) {
	var buf bytes.Buffer
	if err := mustDefault(t).LifecycleGraphs(&buf); err != nil {
		t.Fatalf("LifecycleGraphs() error = %v", err)
	}
	out := buf.String()
	if !strings.HasPrefix(out, "\nLIFECYCLES\n") {
		t.Errorf("LifecycleGraphs() starts %q, want a blank line and LIFECYCLES", out[:min(len(out), 20)])
	}
	for _, want := range []string{
		"\nstripe charge: entity json:data.object.id, event type json:type\n",
		"\n  states: new (initial), pending, succeeded, failed\n",
		"\n  source: https://docs.stripe.com/api/events/types\n",
		"\nstripe payment_intent: ",
		"\nadyen payment: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("LifecycleGraphs() lacks %q:\n%s", want, out)
		}
	}
	// One line per event: type, from → to, the states it waits in, its own
	// entity rule.
	rows := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, "  ") && strings.Contains(l, "→") {
			rows[f[0]] = f[1:]
		}
	}
	for event, want := range map[string]string{
		"charge.pending":         "new → pending - -",
		"charge.succeeded":       "new, pending → succeeded - -",
		"charge.refunded":        "succeeded → succeeded new, pending -",
		"charge.dispute.created": "succeeded → succeeded new, pending json:data.object.charge",
		"CAPTURE:true":           "authorised, captured → captured new -",
	} {
		if got := strings.Join(rows[event], " "); got != want {
			t.Errorf("LifecycleGraphs() line of %s = %q, want %q", event, got, want)
		}
	}
	if err := mustDefault(t).LifecycleGraphs(failingWriter{}); err == nil {
		t.Error("LifecycleGraphs(failing writer) error = nil, want the write error")
	}

	buf.Reset()
	reg, err := horizon.Load("test.yaml", file(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LifecycleGraphs(&buf); err != nil || buf.Len() != 0 {
		t.Errorf("LifecycleGraphs() of a registry without lifecycles = %q, %v; want nothing", buf.String(), err)
	}
}
