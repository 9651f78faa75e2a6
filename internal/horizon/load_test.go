package horizon_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/horizon"
)

// stripeLines is a valid file, one line per element: line n of the file is
// stripeLines[n-1], so the cases below can name the line they break.
var stripeLines = []string{
	"version: 1",                      // 1
	"providers:",                      // 2
	"  stripe:",                       // 3
	"    retry_horizon: 72h",          // 4
	"    margin: 12h",                 // 5
	"    lease: 60s",                  // 6
	"    max_lease: 10m",              // 7
	"    key: json:id",                // 8
	"    source: https://example.com", // 9
	"    reviewed_on: 2026-11-01",     // 10
}

// file returns stripeLines with line n replaced by repl[n] ("" deletes the
// line's content but keeps the numbering), followed by extra lines.
func file(repl map[int]string, extra ...string) []byte {
	lines := slices.Clone(stripeLines)
	for n, s := range repl {
		lines[n-1] = s
	}
	return []byte(strings.Join(append(lines, extra...), "\n") + "\n")
}

// joinedErrors returns the messages of the errors Load joined.
func joinedErrors(err error) []string {
	var out []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

// wantLoadErrors loads data as file and checks that it is refused with
// errors starting with want, in order; it returns the error.
func wantLoadErrors(t *testing.T, file string, data []byte, want []string) error {
	t.Helper()
	reg, err := horizon.Load(file, data)
	if err == nil {
		t.Fatalf("Load() = %d providers, nil; want errors %q", len(reg.List()), want)
	}
	got := joinedErrors(err)
	if len(got) != len(want) {
		t.Fatalf("Load() errors =\n%s\nwant %d errors starting\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range got {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("Load() error %d = %q, want it to start %q", i, got[i], want[i])
		}
	}
	return err
}

func TestLoadValid(t *testing.T) {
	tests := []struct {
		desc string
		data []byte
	}{
		{desc: "the base file", data: file(nil)},
		{desc: "max_lease omitted", data: file(map[int]string{7: ""})},
		{desc: "key omitted: callers send event_id", data: file(map[int]string{8: ""})},
		{desc: "lease equal to ttl", data: file(map[int]string{6: "    lease: 84h", 7: "    max_lease: 84h"})},
		{desc: "quoted values", data: file(map[int]string{4: `    retry_horizon: "72h"`, 10: `    reviewed_on: "2026-11-01"`})},
		{desc: "empty groups", data: file(nil, "groups: {}")},
		{desc: "alternatives", data: file(map[int]string{8: "    key: json:id | json:data.id"})},
		{desc: "alternatives folded over lines", data: file(map[int]string{8: ""}, "    key: >-", "      json:id", "      | header:X-Id")},
		{desc: "families of one rule", data: file(nil, "    families: [snapshot events, thin events]")},
		{desc: "families, one per alternative", data: file(map[int]string{8: "    key: json:id | json:data.id"}, "    families: [a, b]")},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if _, err := horizon.Load("test.yaml", tc.data); err != nil {
				t.Errorf("Load() error = %v, want nil", err)
			}
		})
	}
}

func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		desc string
		data []byte
		// want holds a prefix of each error, in order: the file, the line, the
		// subject and the rule broken. Load must report exactly these.
		want []string
	}{
		{
			desc: "margin zero",
			data: file(map[int]string{5: "    margin: 0s"}),
			want: []string{"test.yaml:5: stripe: margin must be > 0 (got 0s)"},
		},
		{
			desc: "margin negative",
			data: file(map[int]string{5: "    margin: -1h"}),
			want: []string{"test.yaml:5: stripe: margin must be > 0 (got -1h)"},
		},
		{
			desc: "ttl not above horizon: the sum overflows",
			data: file(map[int]string{4: "    retry_horizon: 2000000h", 5: "    margin: 2000000h"}),
			want: []string{"test.yaml:5: stripe: ttl (retry_horizon 2000000h + margin 2000000h) must be > retry_horizon"},
		},
		{
			desc: "horizon zero",
			data: file(map[int]string{4: "    retry_horizon: 0s"}),
			want: []string{"test.yaml:4: stripe: retry_horizon must be > 0 (got 0s)"},
		},
		{
			desc: "lease above ttl",
			data: file(map[int]string{6: "    lease: 100h", 7: "    max_lease: 100h"}),
			want: []string{
				"test.yaml:6: stripe: lease 100h must not exceed ttl 84h",
				"test.yaml:7: stripe: max_lease 100h must not exceed ttl 84h",
			},
		},
		{
			desc: "lease zero",
			data: file(map[int]string{6: "    lease: 0s"}),
			want: []string{"test.yaml:6: stripe: lease must be > 0 (got 0s)"},
		},
		{
			desc: "lease negative",
			data: file(map[int]string{6: "    lease: -5s"}),
			want: []string{"test.yaml:6: stripe: lease must be > 0 (got -5s)"},
		},
		{
			desc: "max_lease below lease",
			data: file(map[int]string{7: "    max_lease: 30s"}),
			want: []string{"test.yaml:7: stripe: max_lease 30s must be >= lease 60s"},
		},
		{
			desc: "max_lease above ttl",
			data: file(map[int]string{7: "    max_lease: 85h"}),
			want: []string{"test.yaml:7: stripe: max_lease 85h must not exceed ttl 84h"},
		},
		{
			desc: "unknown provider field",
			data: file(map[int]string{7: "    retry_horizn: 72h"}),
			want: []string{`test.yaml:7: stripe: unknown field "retry_horizn"`},
		},
		{
			desc: "unknown top-level field",
			data: file(nil, "provider_groups: {}"),
			want: []string{`test.yaml:11: unknown field "provider_groups"`},
		},
		{
			desc: "field given twice",
			data: file(nil, "    margin: 1h"),
			want: []string{`test.yaml:11: stripe: "margin" is given twice`},
		},
		{
			desc: "required field missing",
			data: file(map[int]string{5: ""}),
			want: []string{"test.yaml:3: stripe: margin is required"},
		},
		{
			desc: "duration that does not parse",
			data: file(map[int]string{4: "    retry_horizon: 3d"}),
			want: []string{`test.yaml:4: stripe: retry_horizon "3d" is not a duration`},
		},
		{
			desc: "key rule of unknown kind",
			data: file(map[int]string{8: "    key: jsn:id"}),
			want: []string{`test.yaml:8: stripe: key rule "jsn:id": unknown kind`},
		},
		{
			desc: "key rule with a bad path",
			data: file(map[int]string{8: "    key: json:data..id"}),
			want: []string{`test.yaml:8: stripe: key rule "json:data..id": path "data..id": want a key at byte 5`},
		},
		{
			desc: "key rule reading a signature header",
			data: file(map[int]string{8: "    key: header:Stripe-Signature"}),
			want: []string{`test.yaml:8: stripe: key rule "header:Stripe-Signature": header Stripe-Signature is Stripe's signature (with its t= timestamp): it changes on every retry`},
		},
		{
			desc: "key rule with an empty alternative",
			data: file(map[int]string{8: "    key: json:id |"}),
			want: []string{`test.yaml:8: stripe: key rule "json:id |" has an empty alternative (number 2)`},
		},
		{
			desc: "key rule with an alternative reading a timestamp header",
			data: file(map[int]string{8: "    key: json:id | header:Webhook-Timestamp"}),
			want: []string{`test.yaml:8: stripe: key rule "header:Webhook-Timestamp": header Webhook-Timestamp is the Standard Webhooks timestamp: it changes on every retry`},
		},
		{
			desc: "families not a list",
			data: file(nil, "    families: all of them"),
			want: []string{"test.yaml:11: stripe: families must be a list of at least one webhook family"},
		},
		{
			desc: "family listed twice",
			data: file(nil, "    families: [a, a]"),
			want: []string{`test.yaml:11: stripe: family "a" is listed twice`},
		},
		{
			desc: "families without a key rule",
			data: file(map[int]string{8: ""}, "    families: [a]"),
			want: []string{"test.yaml:11: stripe: families names what the key rule covers, but there is no key rule"},
		},
		{
			desc: "families not one per alternative",
			data: file(map[int]string{8: "    key: json:id | json:data.id | sha256"}, "    families: [a, b]"),
			want: []string{"test.yaml:11: stripe: families lists 2 entries for the 3 alternatives of the key rule"},
		},
		{
			desc: "source not a URL",
			data: file(map[int]string{9: "    source: see the wiki"}),
			want: []string{`test.yaml:9: stripe: source "see the wiki" must be an http(s) URL`},
		},
		{
			desc: "reviewed_on not a date",
			data: file(map[int]string{10: "    reviewed_on: last week"}),
			want: []string{`test.yaml:10: stripe: reviewed_on "last week" must be a date (YYYY-MM-DD)`},
		},
		{
			desc: "reviewed_on a timestamp, not a date",
			data: file(map[int]string{10: "    reviewed_on: 2026-11-01T10:00:00Z"}),
			want: []string{`test.yaml:10: stripe: reviewed_on "2026-11-01T10:00:00Z" must be a date (YYYY-MM-DD)`},
		},
		{
			desc: "reviewed_on an impossible date",
			data: file(map[int]string{10: "    reviewed_on: 2026-02-30"}),
			want: []string{`test.yaml:10: stripe: reviewed_on "2026-02-30" must be a date (YYYY-MM-DD)`},
		},
		{
			desc: "provider name not matching the pattern",
			data: file(map[int]string{3: "  Stripe:"}),
			want: []string{"test.yaml:3: Stripe: provider name must match [a-z0-9][a-z0-9_.-]{0,62}"},
		},
		{
			desc: "group member that does not exist",
			data: file(nil, "groups:", "  billing: [stripe, stipe]"),
			want: []string{`test.yaml:12: billing: member "stipe" is not a provider of this file`},
		},
		{
			desc: "group shadowing a provider",
			data: file(nil, "groups:", "  stripe: [stripe]"),
			want: []string{"test.yaml:12: stripe: group shadows the provider of the same name"},
		},
		{
			desc: "group name not matching the pattern",
			data: file(nil, "groups:", "  Billing: [stripe]"),
			want: []string{"test.yaml:12: Billing: group name must match [a-z0-9][a-z0-9_.-]{0,62}"},
		},
		{
			desc: "group naming a group",
			data: file(nil, "groups:", "  billing: [stripe]", "  all: [billing]"),
			want: []string{`test.yaml:13: all: member "billing" is a group: groups list providers only`},
		},
		{
			desc: "group with no members",
			data: file(nil, "groups:", "  billing: []"),
			want: []string{"test.yaml:12: billing: group has no members"},
		},
		{
			desc: "group member listed twice",
			data: file(nil, "groups:", "  billing: [stripe, stripe]"),
			want: []string{`test.yaml:12: billing: member "stripe" is listed twice`},
		},
		{
			desc: "version missing",
			data: file(map[int]string{1: ""}),
			want: []string{"test.yaml:2: version is required (this schema is version 1)"},
		},
		{
			desc: "version unknown",
			data: file(map[int]string{1: "version: 2"}),
			want: []string{`test.yaml:1: version must be 1 (got "2")`},
		},
		{
			desc: "empty file",
			data: nil,
			want: []string{"test.yaml: file is empty"},
		},
		{
			desc: "YAML parser error names its line",
			data: file(map[int]string{6: "    lease: [60s"}),
			want: []string{"test.yaml:6: YAML syntax: did not find expected ',' or ']'"},
		},
		{
			desc: "YAML parser error without a context names its line",
			data: file(nil, "  - stripe"),
			want: []string{"test.yaml:11: YAML syntax: did not find expected key"},
		},
		{
			desc: "YAML scanner error names its line",
			data: file(map[int]string{9: "    source: @example"}),
			want: []string{"test.yaml:9: YAML syntax: found character that cannot start any token"},
		},
		{
			desc: "YAML error reported at its construct's line names the offending one",
			data: file(map[int]string{10: "\treviewed_on: 2026-01-01"}),
			want: []string{"test.yaml:10: YAML syntax: found a tab character that violates indentation"},
		},
		{
			desc: "YAML error at the end of the file names where the value opens",
			data: file(map[int]string{9: `    source: "https://x`}),
			want: []string{"test.yaml:9: YAML syntax: found unexpected end of stream"},
		},
		{
			desc: "a second document",
			data: file(nil, "---", "version: 1"),
			want: []string{"test.yaml:11: a second YAML document"},
		},
		{
			desc: "anchors and aliases",
			data: file(map[int]string{3: "  stripe: &base"}, "  paypal: *base"),
			want: []string{
				"test.yaml:3: anchors and aliases are not allowed",
				"test.yaml:11: anchors and aliases are not allowed",
			},
		},
		{
			desc: "every error is reported, in line order",
			data: file(map[int]string{5: "    margin: 0s", 6: "    lease: 0s", 8: "    key: header:webhook-timestamp"}, "    colour: blue"),
			want: []string{
				"test.yaml:5: stripe: margin must be > 0 (got 0s)",
				"test.yaml:6: stripe: lease must be > 0 (got 0s)",
				`test.yaml:8: stripe: key rule "header:webhook-timestamp": header webhook-timestamp is the Standard Webhooks timestamp`,
				`test.yaml:11: stripe: unknown field "colour"`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			err := wantLoadErrors(t, "test.yaml", tc.data, tc.want)
			var ve *horizon.ValidationError
			if !errors.As(err, &ve) || ve.File != "test.yaml" {
				t.Errorf("Load() error = %v, want a *ValidationError naming test.yaml", err)
			}
		})
	}
}
