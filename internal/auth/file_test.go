package auth_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/auth"
)

var (
	hashA = auth.HashToken("cl_token_a")
	hashB = auth.HashToken("cl_token_b")
)

func TestParseValid(t *testing.T) {
	file := `version: 1
default_rate: {per_second: 200, burst: 400}
principals:
  ops:
    tokens: ["` + hashB + `"]
    namespaces: ["*"]
    roles: [admin]
    rate: unlimited
  billing-webhooks:
    tokens: ["` + hashA + `"]
    identities: ["spiffe://example.org/ns/billing/sa/hooks", "dns:Hooks.Billing.svc", "cn:hooks", "uri:urn:example:hooks"]
    namespaces: [billing, "payouts-*"]
    roles: [claim, read]
    rate: {per_second: 12.5, burst: 25}
  reader:
    identities: ["uri:spiffe://example.org/reader"]
    namespaces: [billing]
    roles: [read]
`
	cfg, err := auth.Parse("auth.yaml", []byte(file))
	if err != nil {
		t.Fatalf("Parse() error = %v", err)
	}
	type summary struct {
		Name       string
		Tokens     int
		Identities []string
		Namespaces []string
		Roles      string
		Rate       auth.Rate
	}
	var got []summary
	for _, p := range cfg.Principals {
		got = append(got, summary{p.Name, len(p.Tokens), p.Identities, p.Namespaces, p.Roles.String(), p.Rate})
	}
	want := []summary{
		{"billing-webhooks", 1, []string{"spiffe://example.org/ns/billing/sa/hooks", "dns:hooks.billing.svc", "cn:hooks", "uri:urn:example:hooks"},
			[]string{"billing", "payouts-*"}, "claim,read", auth.Rate{PerSecond: 12.5, Burst: 25}},
		{"ops", 1, nil, []string{"*"}, "admin", auth.Rate{Unlimited: true}},
		// The uri: spelling of a SPIFFE ID is the SPIFFE ID.
		{"reader", 0, []string{"spiffe://example.org/reader"}, []string{"billing"}, "read", auth.Rate{PerSecond: 200, Burst: 400}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse() principals (-want +got):\n%s", diff)
	}
}

// TestParseTokenExpiry: a token is a hash, or a mapping of its hash and
// the RFC 3339 time it expires; a scraper's principal (metrics alone)
// needs no namespaces.
func TestParseTokenExpiry(t *testing.T) {
	file := `version: 1
principals:
  hooks:
    tokens:
      - "` + hashA + `"
      - {hash: "` + hashB + `", expires: 2027-01-31T12:00:00+01:00}
    namespaces: [billing]
    roles: [claim]
  prometheus:
    identities: ["spiffe://example.org/prometheus"]
    roles: [metrics]
`
	cfg, err := auth.Parse("auth.yaml", []byte(file))
	if err != nil {
		t.Fatalf("Parse() error = %v", err)
	}
	hooks, scraper := cfg.Principals[0], cfg.Principals[1]
	want := time.Date(2027, 1, 31, 11, 0, 0, 0, time.UTC)
	if len(hooks.Tokens) != 2 || !hooks.Tokens[0].Expires.IsZero() || !hooks.Tokens[1].Expires.Equal(want) {
		t.Errorf("Parse() hooks tokens = %+v, want the first without expiry, the second expiring at %v", hooks.Tokens, want)
	}
	if scraper.Roles != auth.RoleMetrics || len(scraper.Namespaces) != 0 {
		t.Errorf("Parse() prometheus = roles %v, namespaces %v; want metrics and none", scraper.Roles, scraper.Namespaces)
	}
}

func TestParseDefaultRate(t *testing.T) {
	cfg, err := auth.Parse("auth.yaml", []byte("version: 1\nprincipals:\n  a:\n    tokens: [\""+hashA+"\"]\n    namespaces: [x]\n    roles: [read]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Principals[0].Rate; got != auth.DefaultRate {
		t.Errorf("rate without rate or default_rate = %v, want DefaultRate %v", got, auth.DefaultRate)
	}
}

// principal is a valid principal entry named name, with the fields of
// extra replacing or adding to its own.
func principalEntry(name string, extra map[string]string) string {
	fields := map[string]string{"tokens": `["` + hashA + `"]`, "namespaces": "[billing]", "roles": "[claim]"}
	for k, v := range extra {
		fields[k] = v
	}
	var b strings.Builder
	b.WriteString("  " + name + ":\n")
	for _, k := range []string{"tokens", "identities", "namespaces", "roles", "rate", "bogus"} {
		if v, ok := fields[k]; ok && v != "-" {
			b.WriteString("    " + k + ": " + v + "\n")
		}
	}
	return b.String()
}

func TestParseRefuses(t *testing.T) {
	const rawToken = "cl_Xv9aSECRETsecretSECRETsecretSECRETsecret12"
	tests := []struct {
		desc string
		file string
		want string // "line: message" fragment
	}{
		{"empty file", "", "auth.yaml: file is empty"},
		{"syntax", "version: 1\nprincipals: [\n", "auth.yaml:2: YAML syntax"}, // the line of the unclosed [, found as the providers file finds it (internal/yamlconf)
		{"no version", "principals:\n" + principalEntry("a", nil), "auth.yaml:1: version is required"},
		{"wrong version", "version: 2\nprincipals:\n" + principalEntry("a", nil), "auth.yaml:1: version must be 1"},
		{"unknown top field", "version: 1\nusers: {}\nprincipals:\n" + principalEntry("a", nil), `auth.yaml:2: unknown field "users"`},
		{"no principals", "version: 1\n", "principals is required"},
		{"principals empty", "version: 1\nprincipals: {}\n", "auth.yaml:2: principals must be a mapping of at least one"},
		{"unknown principal field", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"bogus": "1"}), `auth.yaml:7: a: unknown field "bogus"`},
		{"field twice", "version: 1\nprincipals:\n  a:\n    roles: [claim]\n    roles: [read]\n    tokens: [\"" + hashA + "\"]\n    namespaces: [x]\n", `auth.yaml:5: a: "roles" is given twice`},
		{"bad principal name", "version: 1\nprincipals:\n" + principalEntry("Billing Hooks", nil), `auth.yaml:3: "Billing Hooks": principal name must match`},
		{"no credentials", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": "-"}), "auth.yaml:3: a: a principal needs tokens or identities"},
		{"no namespaces", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"namespaces": "-"}), "auth.yaml:3: a: namespaces is required"},
		{"no roles", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"roles": "-"}), "auth.yaml:3: a: roles is required"},
		{"empty roles", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"roles": "[]"}), "auth.yaml:6: a: roles must be a list of at least one value"},
		{"unknown role", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"roles": "[claim, write]"}), `auth.yaml:6: a: role "write" is not one of claim, read, admin, metrics`},
		{"role twice", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"roles": "[claim, claim]"}), "auth.yaml:6: a: role claim is listed twice"},
		{"pattern star inside", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"namespaces": `["pay*outs"]`}), `auth.yaml:5: a: namespace "pay*outs" must be a namespace`},
		{"pattern leading star", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"namespaces": `["*-eu"]`}), `namespace "*-eu" must be`},
		{"pattern upper case", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"namespaces": `[Billing]`}), `namespace "Billing" must be`},
		{"namespace twice", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"namespaces": `[x, x]`}), `namespace x is listed twice`},
		{"token not a hash", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `["md5:abc"]`}), `auth.yaml:4: a: a token must be listed as "sha256:"`},
		{"token hash upper case", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `["` + strings.ToUpper(hashA[7:]) + `"]`}), `a token must be listed`},
		{"token hash short", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `["` + hashA[:70] + `"]`}), `a token must be listed`},
		{"raw token", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `["` + rawToken + `"]`}), `auth.yaml:4: a: tokens lists a token itself, not its hash`},
		{"token twice in a principal", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `["` + hashA + `", "` + hashA + `"]`}), "auth.yaml:4: a: this token hash is listed twice"},
		{"token shared by principals", "version: 1\nprincipals:\n" + principalEntry("a", nil) + principalEntry("b", nil), "auth.yaml:8: b: this token hash is also listed by principal a"},
		{"identity kind unknown", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"identities": `["email:a@b"]`}), `auth.yaml:5: a: identity "email:a@b": must be spiffe://`},
		{"identity shared", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"identities": `["dns:x.svc"]`}) +
			principalEntry("b", map[string]string{"tokens": `["` + hashB + `"]`, "identities": `["dns:X.svc"]`}), `b: identity "dns:X.svc" is also listed by principal a`},
		{"token expiry not RFC 3339", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `[{hash: "` + hashA + `", expires: 2027-01-31}]`}),
			`auth.yaml:4: a: a token's expires "2027-01-31" must be an RFC 3339 time with its zone`},
		{"token expiry without zone", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `[{hash: "` + hashA + `", expires: "2027-01-31T00:00:00"}]`}),
			`a token's expires "2027-01-31T00:00:00" must be an RFC 3339 time`},
		{"token mapping without hash", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `[{expires: 2027-01-31T00:00:00Z}]`}),
			`auth.yaml:4: a: a token given as a mapping needs hash`},
		{"token mapping unknown field", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `[{hash: "` + hashA + `", until: x}]`}),
			`a: unknown field "until" (want one of hash, expires)`},
		{"raw token in a mapping", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"tokens": `[{hash: "` + rawToken + `"}]`}),
			`a: tokens lists a token itself, not its hash`},
		{"metrics and claim without namespaces", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"namespaces": "-", "roles": "[metrics, claim]"}),
			"auth.yaml:3: a: namespaces is required"},
		{"rate zero", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"rate": "{per_second: 0, burst: 1}"}), "auth.yaml:7: a: rate.per_second must be a number > 0"},
		{"rate burst missing", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"rate": "{per_second: 5}"}), "auth.yaml:7: a: rate.burst is required"},
		{"rate word", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"rate": "fast"}), `auth.yaml:7: a: rate must be "unlimited"`},
		{"default rate bad", "version: 1\ndefault_rate: {per_second: 1, burst: 0}\nprincipals:\n" + principalEntry("a", nil), "auth.yaml:2: default_rate.burst must be a whole number >= 1"},
		{"alias", "version: 1\nprincipals:\n  a: &grant\n    tokens: [\"" + hashA + "\"]\n    namespaces: [x]\n    roles: [read]\n  b: *grant\n", "anchors and aliases are not allowed"},
		{"two documents", "version: 1\n---\nversion: 1\n", "a second YAML document"},
		{"long value clipped", "version: 1\nprincipals:\n" + principalEntry("a", map[string]string{"roles": "[" + strings.Repeat("z", 5000) + "]"}), "(5000 bytes)"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := auth.Parse("auth.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("Parse() error = nil, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse() error = %q, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "SECRET") {
				t.Errorf("Parse() error echoes the token: %q", err)
			}
			if len(err.Error()) > 600 {
				t.Errorf("Parse() error is %d bytes: refused values must be clipped", len(err.Error()))
			}
			var ve *auth.ValidationError
			if !errors.As(err, &ve) || ve.File != "auth.yaml" {
				t.Errorf("Parse() error = %#v, want a *ValidationError naming the file", err)
			}
		})
	}
}

// TestParseReportsEveryError: one run lists every mistake, in line order.
func TestParseReportsEveryError(t *testing.T) {
	file := "version: 1\nprincipals:\n" +
		principalEntry("a", map[string]string{"roles": "[write]"}) +
		principalEntry("b", map[string]string{"tokens": `["` + hashB + `"]`, "namespaces": `["a*b"]`})
	_, err := auth.Parse("auth.yaml", []byte(file))
	if err == nil {
		t.Fatal("Parse() error = nil")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "auth.yaml:6: a:") || !strings.HasPrefix(lines[1], "auth.yaml:9: b:") {
		t.Errorf("Parse() error =\n%s\nwant line 6 (a's role) then line 9 (b's namespace)", err)
	}
}

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := auth.NewToken()
		if !strings.HasPrefix(tok, auth.TokenPrefix) || len(tok) != len(auth.TokenPrefix)+43 {
			t.Fatalf("NewToken() = %q, want cl_ and 43 base64url characters (256 bits)", tok)
		}
		if seen[tok] {
			t.Fatalf("NewToken() repeated %q", tok)
		}
		seen[tok] = true
		h := auth.HashToken(tok)
		if _, err := auth.Parse("auth.yaml", []byte("version: 1\nprincipals:\n  a:\n    tokens: [\""+h+"\"]\n    namespaces: [x]\n    roles: [read]\n")); err != nil {
			t.Fatalf("a file listing HashToken(NewToken()) = %q is refused: %v", h, err)
		}
	}
	// The hash is SHA-256 of the token's bytes (so any tool can compute it).
	if got, want := auth.HashToken("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf(`HashToken("abc") = %q, want %q`, got, want)
	}
}
