package horizon_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/horizon"
)

// acme is a provider entry that is not built in, as lines of a file.
var acme = []string{
	"  acme:",
	"    retry_horizon: 24h",
	"    margin: 12h",
	"    lease: 30s",
	"    key: header:X-Acme-Delivery",
	"    source: https://acme.example/webhooks",
	"    reviewed_on: 2026-11-01",
}

func lines(ls ...[]string) []byte {
	return []byte(strings.Join(slices.Concat(ls...), "\n") + "\n")
}

func mustLoad(t *testing.T, data []byte) *horizon.Registry {
	t.Helper()
	reg, err := horizon.Load("mine.yaml", data)
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	return reg
}

func entry(t *testing.T, reg *horizon.Registry, name string) *horizon.Provider {
	t.Helper()
	p, ok := reg.Lookup(name)
	if !ok {
		t.Fatalf("Lookup(%q) = not found", name)
	}
	return p
}

func names(reg *horizon.Registry) []string {
	var out []string
	for _, p := range reg.List() {
		out = append(out, p.Name)
	}
	return out
}

func TestExtendsBuiltinAdds(t *testing.T) {
	builtin, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	reg := mustLoad(t, lines([]string{"version: 1", "extends: builtin", "providers:"}, acme,
		[]string{"groups:", "  shop: [shopify, acme]"}))
	want := slices.Concat(names(builtin), []string{"acme", "shop"})
	slices.Sort(want)
	if got := names(reg); !slices.Equal(got, want) {
		t.Errorf("names = %v, want the built-in ones plus acme and shop: %v", got, want)
	}
	if p := entry(t, reg, "acme"); p.TTL != 36*time.Hour || p.KeyRule != "header:X-Acme-Delivery" {
		t.Errorf("acme = ttl %v, key %q; want 36h, header:X-Acme-Delivery", p.TTL, p.KeyRule)
	}
	// A group of the file may list built-in providers: shop takes acme's
	// 36h over shopify's 16h.
	if g := entry(t, reg, "shop"); g.TTL != 36*time.Hour || g.DrivenBy != "acme" || !slices.Equal(g.Members, []string{"acme", "shopify"}) {
		t.Errorf("shop = ttl %v driven by %s, members %v; want 36h by acme, [acme shopify]", g.TTL, g.DrivenBy, g.Members)
	}
	for _, b := range builtin.List() {
		if p := entry(t, reg, b.Name); p.TTL != b.TTL || p.KeyRule != b.KeyRule {
			t.Errorf("%s = ttl %v, key %q; want the built-in %v, %q", b.Name, p.TTL, p.KeyRule, b.TTL, b.KeyRule)
		}
	}
}

func TestExtendsBuiltinOverrides(t *testing.T) {
	builtin, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	stripe := []string{
		"  stripe:",
		"    retry_horizon: 1000h", // longer than adyen's 720h: billing must follow
		"    margin: 24h",
		"    lease: 60s",
		"    key: json:id",
		"    source: https://docs.stripe.com/webhooks#retries",
		"    reviewed_on: 2026-11-02",
	}
	reg := mustLoad(t, lines([]string{"version: 1", "extends: builtin", "providers:"}, stripe))
	if p := entry(t, reg, "stripe"); p.TTL != 1024*time.Hour || p.MaxLease != time.Minute || p.Families != nil {
		t.Errorf("stripe = ttl %v, max_lease %v, families %v; want the file's entry whole (1024h, 1m, none)", p.TTL, p.MaxLease, p.Families)
	}
	if g := entry(t, reg, "billing"); g.TTL != 1024*time.Hour || g.DrivenBy != "stripe" {
		t.Errorf("built-in group billing = ttl %v driven by %s; want 1024h from the file's stripe", g.TTL, g.DrivenBy)
	}
	if got, want := len(reg.List()), len(builtin.List()); got != want {
		t.Errorf("%d providers and groups, want the built-in %d (stripe replaced, not added)", got, want)
	}

	// A group of the file replaces the built-in group of its name.
	reg = mustLoad(t, lines([]string{"version: 1", "extends: builtin", "groups:", "  billing: [stripe, paypal]"}))
	if g := entry(t, reg, "billing"); !slices.Equal(g.Members, []string{"paypal", "stripe"}) || g.TTL != 84*time.Hour {
		t.Errorf("billing = members %v, ttl %v; want the file's [paypal stripe], 84h", g.Members, g.TTL)
	}
}

func TestExtendsRefuses(t *testing.T) {
	tests := []struct {
		desc string
		data []byte
		want []string
	}{
		{
			desc: "extends something else",
			data: lines([]string{"version: 1", "extends: ./base.yaml", "providers:"}, acme),
			want: []string{`mine.yaml:2: extends must be builtin (the registry embedded in claimd), got "./base.yaml"`},
		},
		{
			desc: "a provider shadowing a built-in group",
			data: lines([]string{"version: 1", "extends: builtin", "providers:"}, []string{"  billing:"}, acme[1:]),
			want: []string{"mine.yaml:4: billing: provider shadows the built-in group of the same name (members adyen, paypal, stripe)"},
		},
		{
			desc: "a group shadowing a built-in provider",
			data: lines([]string{"version: 1", "extends: builtin", "groups:", "  stripe: [paypal]"}),
			want: []string{"mine.yaml:4: stripe: group shadows the provider of the same name"},
		},
		{
			desc: "a member known nowhere",
			data: lines([]string{"version: 1", "extends: builtin", "groups:", "  shop: [shopify, acme]"}),
			want: []string{`mine.yaml:4: shop: member "acme" is not a provider of this file or of the built-in registry`},
		},
		{
			desc: "a member that is a built-in group",
			data: lines([]string{"version: 1", "extends: builtin", "groups:", "  all: [stripe, billing]"}),
			want: []string{`mine.yaml:4: all: member "billing" is a group: groups list providers only`},
		},
		{
			desc: "an invalid entry, as without extends",
			data: lines([]string{"version: 1", "extends: builtin", "providers:"}, acme[:2], []string{"    margin: 0s"}, acme[3:]),
			want: []string{"mine.yaml:6: acme: margin must be > 0 (got 0s)"},
		},
		{
			desc: "without extends, providers stays required",
			data: lines([]string{"version: 1", "groups:", "  shop: [shopify]"}),
			want: []string{"mine.yaml:1: providers is required (or extends: builtin, to add to the built-in registry)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) { wantLoadErrors(t, "mine.yaml", tc.data, tc.want) })
	}
}

// TestDefaultYAMLRoundTrips: what `claimd providers --dump` prints loads
// into the registry claimd runs with.
func TestDefaultYAMLRoundTrips(t *testing.T) {
	builtin, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	reg := mustLoad(t, horizon.DefaultYAML())
	if !slices.Equal(names(reg), names(builtin)) {
		t.Fatalf("DefaultYAML loads %v, want %v", names(reg), names(builtin))
	}
	for _, b := range builtin.List() {
		p := entry(t, reg, b.Name)
		if p.TTL != b.TTL || p.Lease != b.Lease || p.MaxLease != b.MaxLease || p.KeyRule != b.KeyRule {
			t.Errorf("%s from DefaultYAML differs from the built-in entry", b.Name)
		}
	}
}
