package horizon_test

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/claimd/claimd/internal/horizon"
)

// The embedded file is production: every property claimd promises about the
// window is checked here against the file that ships.

func mustDefault(t testing.TB) *horizon.Registry {
	t.Helper()
	r, err := horizon.Default()
	if err != nil {
		t.Fatalf("Default() error = %v", err)
	}
	return r
}

func TestDefaultCoversProviders(t *testing.T) {
	r := mustDefault(t)
	for _, name := range []string{
		"stripe", "paypal", "square", "adyen", "braintree", "shopify", "github", "twilio", "standard-webhooks", "billing",
	} {
		if _, ok := r.Lookup(name); !ok {
			t.Errorf("Lookup(%q) found nothing, want the production file to register it", name)
		}
	}
	if got := r.Version(); got != horizon.SchemaVersion {
		t.Errorf("Version() = %d, want %d", got, horizon.SchemaVersion)
	}
}

func TestDefaultEveryWindowOutlastsItsHorizon(t *testing.T) {
	for _, p := range mustDefault(t).List() {
		t.Run(p.Name, func(t *testing.T) {
			if p.TTL <= p.RetryHorizon {
				t.Errorf("ttl = %v, want > retry_horizon %v", p.TTL, p.RetryHorizon)
			}
			if p.TTL != p.RetryHorizon+p.Margin {
				t.Errorf("ttl = %v, want retry_horizon + margin = %v", p.TTL, p.RetryHorizon+p.Margin)
			}
			if p.Lease <= 0 || p.Lease > p.MaxLease || p.MaxLease > p.TTL {
				t.Errorf("lease %v, max_lease %v, ttl %v: want 0 < lease <= max_lease <= ttl", p.Lease, p.MaxLease, p.TTL)
			}
			if u, err := url.Parse(p.Source); err != nil || u.Scheme != "https" || u.Host == "" {
				t.Errorf("source = %q, want an https URL", p.Source)
			}
			if p.ReviewedOn.IsZero() {
				t.Errorf("reviewed_on is not set")
			}
			if h, m, s := p.ReviewedOn.Clock(); h != 0 || m != 0 || s != 0 || p.ReviewedOn.Location() != time.UTC {
				t.Errorf("reviewed_on = %v, want a date at UTC midnight", p.ReviewedOn)
			}
			if !p.IsGroup() && p.Rule == nil {
				t.Errorf("key rule is empty; every production provider derives keys from deliveries")
			}
		})
	}
}

func TestDefaultHorizons(t *testing.T) {
	// DESIGN §5, as documented by each provider (see source in the file).
	want := map[string]time.Duration{
		"stripe":            72 * time.Hour,
		"paypal":            72 * time.Hour,
		"square":            72 * time.Hour,
		"adyen":             30 * 24 * time.Hour,
		"braintree":         24 * time.Hour,
		"shopify":           4 * time.Hour,
		"standard-webhooks": 28 * time.Hour,
		"twilio":            15 * time.Second,
		"github":            72 * time.Hour,
	}
	r := mustDefault(t)
	for name, h := range want {
		p, ok := r.Lookup(name)
		if !ok {
			t.Errorf("Lookup(%q) found nothing", name)
			continue
		}
		if p.RetryHorizon != h {
			t.Errorf("%s retry_horizon = %v, want %v", name, p.RetryHorizon, h)
		}
	}
}

func TestDefaultAdyenOutlastsItsQueue(t *testing.T) {
	p, ok := mustDefault(t).Lookup("adyen")
	if !ok {
		t.Fatal(`Lookup("adyen") found nothing`)
	}
	// Adyen keeps retrying from its queue for up to 30 days.
	if p.TTL <= 30*24*time.Hour {
		t.Errorf("adyen ttl = %v, want > 30 days", p.TTL)
	}
}

func TestDefaultBillingGroup(t *testing.T) {
	r := mustDefault(t)
	billing, ok := r.Lookup("billing")
	if !ok {
		t.Fatal(`Lookup("billing") found nothing`)
	}
	adyen, _ := r.Lookup("adyen")
	want := &horizon.Provider{
		Name:         "billing",
		RetryHorizon: adyen.RetryHorizon,
		Margin:       adyen.Margin,
		TTL:          adyen.TTL,
		Lease:        adyen.Lease,
		MaxLease:     adyen.MaxLease,
		Source:       adyen.Source,
		ReviewedOn:   adyen.ReviewedOn,
		Members:      []string{"adyen", "paypal", "stripe"},
		DrivenBy:     "adyen",
	}
	if diff := cmp.Diff(want, billing, cmpopts.IgnoreInterfaces(struct{ horizon.Rule }{})); diff != "" {
		t.Errorf(`Lookup("billing") mismatch (-want +got):`+"\n%s", diff)
	}
	for _, name := range billing.Members {
		m, _ := r.Lookup(name)
		if m.TTL > billing.TTL {
			t.Errorf("member %s ttl %v > billing ttl %v, want the group to take the longest", name, m.TTL, billing.TTL)
		}
	}
	// Members derive keys by different rules, so billing cannot.
	if billing.KeyRule != "" || billing.Rule != nil {
		t.Errorf("billing key rule = %q, want none (members' rules differ)", billing.KeyRule)
	}
}

func TestDefaultYAMLIsACopy(t *testing.T) {
	a := horizon.DefaultYAML()
	a[0] ^= 0xff
	if bytes.Equal(a, horizon.DefaultYAML()) {
		t.Error("DefaultYAML() returned the embedded bytes; modifying them changed the default")
	}
	if _, err := horizon.Load("providers.yaml", horizon.DefaultYAML()); err != nil {
		t.Errorf("Load(DefaultYAML()) error = %v", err)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "providers.yaml")
	if err := os.WriteFile(good, horizon.DefaultYAML(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := horizon.LoadFile(good); err != nil {
		t.Errorf("LoadFile(%q) error = %v", good, err)
	}
	bad := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nprovider: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := horizon.LoadFile(bad)
	if want := bad + `:2: unknown field "provider"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("LoadFile(%q) error = %v, want one containing %q", bad, err, want)
	}
	if _, err := horizon.LoadFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("LoadFile(missing) error = nil, want the read error")
	}
}

func TestListSortedAndLookup(t *testing.T) {
	r := mustDefault(t)
	list := r.List()
	for i := 1; i < len(list); i++ {
		if list[i-1].Name >= list[i].Name {
			t.Errorf("List()[%d..%d] = %s, %s: want sorted by name", i-1, i, list[i-1].Name, list[i].Name)
		}
	}
	list[0] = nil // the slice is the caller's
	if r.List()[0] == nil {
		t.Error("List() returned the registry's own slice")
	}
	if _, ok := r.Lookup("Stripe"); ok {
		t.Error(`Lookup("Stripe") found a provider; names are case-sensitive`)
	}
}

const groupFile = `version: 1
providers:
  a:
    retry_horizon: 10h
    margin: 2h
    lease: 30s
    max_lease: 1h
    key: header:X-Id
    source: https://example.com/a
    reviewed_on: 2026-01-01
  b:
    retry_horizon: 8h
    margin: 4h
    lease: 90s
    max_lease: 5m
    key: header:X-Id
    source: https://example.com/b
    reviewed_on: 2026-03-01
  c:
    retry_horizon: 1h
    margin: 1h
    lease: 10s
    key: json:id
    source: https://example.com/c
    reviewed_on: 2025-12-01
groups:
  ab: [b, a]
  abc: [a, b, c]
`

func TestGroupDerivation(t *testing.T) {
	r, err := horizon.Load("groups.yaml", []byte(groupFile))
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	tests := []struct {
		desc string
		name string
		want *horizon.Provider
	}{
		{
			desc: "equal ttls: the longer horizon drives; leases are the longest; members share a rule",
			name: "ab",
			want: &horizon.Provider{
				Name: "ab", RetryHorizon: 10 * time.Hour, Margin: 2 * time.Hour, TTL: 12 * time.Hour,
				Lease: 90 * time.Second, MaxLease: time.Hour, KeyRule: "header:X-Id",
				Source: "https://example.com/a", ReviewedOn: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
				Members: []string{"a", "b"}, DrivenBy: "a",
			},
		},
		{
			desc: "different rules: no rule; reviewed_on is the oldest member's",
			name: "abc",
			want: &horizon.Provider{
				Name: "abc", RetryHorizon: 10 * time.Hour, Margin: 2 * time.Hour, TTL: 12 * time.Hour,
				Lease: 90 * time.Second, MaxLease: time.Hour,
				Source: "https://example.com/a", ReviewedOn: time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC),
				Members: []string{"a", "b", "c"}, DrivenBy: "a",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, ok := r.Lookup(tc.name)
			if !ok {
				t.Fatalf("Lookup(%q) found nothing", tc.name)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreInterfaces(struct{ horizon.Rule }{})); diff != "" {
				t.Errorf("Lookup(%q) mismatch (-want +got):\n%s", tc.name, diff)
			}
			if (got.Rule == nil) != (got.KeyRule == "") {
				t.Errorf("Lookup(%q): Rule = %v with KeyRule %q, want both set or both empty", tc.name, got.Rule, got.KeyRule)
			}
		})
	}
	c, _ := r.Lookup("c")
	if c.MaxLease != c.Lease {
		t.Errorf("c max_lease = %v, want lease %v when the file omits it", c.MaxLease, c.Lease)
	}
}

func TestReviewOverdue(t *testing.T) {
	p := &horizon.Provider{ReviewedOn: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	age := 180 * 24 * time.Hour
	tests := []struct {
		desc   string
		now    time.Time
		maxAge time.Duration
		want   bool
	}{
		{desc: "the day of the review", now: p.ReviewedOn, maxAge: age, want: false},
		{desc: "exactly maxAge later", now: p.ReviewedOn.Add(age), maxAge: age, want: false},
		{desc: "one millisecond past maxAge", now: p.ReviewedOn.Add(age + time.Millisecond), maxAge: age, want: true},
		{desc: "maxAge 0 disables the check", now: p.ReviewedOn.AddDate(10, 0, 0), maxAge: 0, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := p.ReviewOverdue(tc.now, tc.maxAge); got != tc.want {
				t.Errorf("ReviewOverdue(%v, %v) = %v, want %v", tc.now, tc.maxAge, got, tc.want)
			}
		})
	}
}
