package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// result is what one run of the claimd binary printed and how it exited.
type result struct {
	stdout, stderr string
	code           int
}

// runEnv runs claimd with args and, added to the test's environment, env
// ("NAME=value" entries).
func runEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// flagsOf lists the flags a command's help shows, in order.
func flagsOf(help string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z-]+)`).FindAllStringSubmatch(help, -1) {
		out = append(out, m[1])
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHelpListsCommands(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := runEnv(t, nil, args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("claimd %v = exit %d, stderr %q; want exit 0 and help on stdout", args, r.code, r.stderr)
		}
		for _, c := range commands() {
			if !strings.Contains(r.stdout, "  "+c.name+" ") || !strings.Contains(r.stdout, c.summary) {
				t.Errorf("claimd %v does not list %q with its summary:\n%s", args, c.name, r.stdout)
			}
		}
		for _, want := range []string{"CLAIMD_POSTGRES_URL", "--config FILE", "The command line wins over the environment, which wins over the config file"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("claimd %v does not say %q:\n%s", args, want, r.stdout)
			}
		}
	}
}

// TestCommandHelpShowsItsOwnFlags: each command's help lists the flags it
// reads and no other command's, with their variables and the precedence.
func TestCommandHelpShowsItsOwnFlags(t *testing.T) {
	tests := []struct {
		args []string
		want []string // exactly these flags, in help's (sorted) order
	}{
		{[]string{"migrate", "--help"}, []string{"config", "data-dir", "log-format", "log-level", "partition-claims", "postgres-schema", "postgres-url", "sqlite-durability"}},
		{[]string{"help", "migrate"}, []string{"config", "data-dir", "log-format", "log-level", "partition-claims", "postgres-schema", "postgres-url", "sqlite-durability"}},
		{[]string{"providers", "-h"}, []string{"check", "config", "dump", "horizon-review-age", "providers"}},
		{[]string{"prune", "--help"}, []string{"audit-export-dir", "batch", "config", "data-dir", "dry-run", "grace", "log-format", "log-level", "postgres-schema", "postgres-url", "retention", "sqlite-durability"}},
		{[]string{"token", "new", "--help"}, []string{"config", "principal"}},
		{[]string{"token", "--help"}, []string{"config", "principal"}},
		{[]string{"version", "--help"}, nil},
	}
	for _, tc := range tests {
		r := runEnv(t, nil, tc.args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("claimd %v = exit %d, stderr %q; want exit 0 and help on stdout", tc.args, r.code, r.stderr)
		}
		if got := flagsOf(r.stdout); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("claimd %v lists flags %v, want %v:\n%s", tc.args, got, tc.want, r.stdout)
		}
	}

	r := runEnv(t, nil, "serve", "--help")
	serve := flagsOf(r.stdout)
	for _, want := range []string{"listen", "http-listen", "postgres-url", "postgres-schema", "redis-url", "providers", "tls-cert", "auth-file", "insecure", "reflection", "grace", "config"} {
		if !strings.Contains(" "+strings.Join(serve, " ")+" ", " "+want+" ") {
			t.Errorf("claimd serve --help lacks --%s: %v", want, serve)
		}
	}
	for _, other := range []string{"check", "dump", "dry-run", "principal"} {
		if strings.Contains(" "+strings.Join(serve, " ")+" ", " "+other+" ") {
			t.Errorf("claimd serve --help shows --%s, a flag of another command", other)
		}
	}
	for _, want := range []string{"CLAIMD_LISTEN", "CLAIMD_TLS_CLIENT_CA", `(default "127.0.0.1:50051")`, "the command line wins over the environment"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("claimd serve --help does not say %q", want)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args       []string
		wantStderr string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"serve", "--frobnicate"}, "claimd serve: flag provided but not defined: -frobnicate (claimd serve --help lists its flags)"},
		{[]string{"migrate", "extra"}, `claimd migrate: unexpected arguments ["extra"]`},
		{[]string{"providers", "--dump", "--check", "x.yaml"}, "--dump and --check go one at a time"},
		{[]string{"serve", "--timer-slack", "11ms"}, `--timer-slack "11ms": want auto or a duration from 0 to 10ms`},
		{[]string{"serve", "--timer-slack=-1ms"}, `--timer-slack "-1ms": want auto or a duration from 0 to 10ms`},
		{[]string{"serve", "--timer-slack", "soon"}, `--timer-slack "soon": want auto or a duration from 0 to 10ms`},
	}
	for _, tc := range tests {
		r := runEnv(t, nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.wantStderr) || r.stdout != "" {
			t.Errorf("claimd %v = exit %d, stdout %q, stderr %q; want exit 2 and %q on stderr", tc.args, r.code, r.stdout, r.stderr, tc.wantStderr)
		}
	}
}

func TestVersion(t *testing.T) {
	r := runEnv(t, nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "claimd "+testVersion+" ") {
		t.Errorf("claimd version = exit %d, %q; want the version given with -ldflags -X main.version=%s", r.code, r.stdout, testVersion)
	}
}

// extending is a providers file that adds one provider, named name, to
// the built-in ones.
func extending(t *testing.T, name string) string {
	t.Helper()
	return writeFile(t, name+".yaml", fmt.Sprintf(`version: 1
extends: builtin
providers:
  %s:
    retry_horizon: 24h
    margin: 12h
    lease: 30s
    key: header:X-Delivery
    source: https://example.com/%s
    reviewed_on: 2026-11-01
`, name, name))
}

// TestFlagSources: a flag comes from the command line, else its
// environment variable (empty counts as unset), else the --config file
// (itself a flag that the environment may set), else its default.
func TestFlagSources(t *testing.T) {
	fromFlag, fromEnv, fromConfig := extending(t, "from-flag"), extending(t, "from-env"), extending(t, "from-config")
	config := writeFile(t, "claimd.yaml", "# shared by every command\nproviders: "+fromConfig+"\nlisten: 127.0.0.1:50051\ndry-run: true\n")
	tests := []struct {
		desc string
		env  []string
		args []string
		want string // the provider that shows which file was read; "" for none
	}{
		{"default", nil, nil, ""},
		{"config file", nil, []string{"--config", config}, "from-config"},
		{"config file named by the environment", []string{"CLAIMD_CONFIG=" + config}, nil, "from-config"},
		{"environment over config file", []string{"CLAIMD_PROVIDERS=" + fromEnv}, []string{"--config", config}, "from-env"},
		{"empty variable counts as unset", []string{"CLAIMD_PROVIDERS="}, []string{"--config", config}, "from-config"},
		{"command line over environment and config file", []string{"CLAIMD_PROVIDERS=" + fromEnv}, []string{"--config", config, "--providers", fromFlag}, "from-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r := runEnv(t, tc.env, append([]string{"providers"}, tc.args...)...)
			if r.code != 0 {
				t.Fatalf("claimd providers = exit %d\n%s", r.code, r.stderr)
			}
			for _, name := range []string{"from-flag", "from-env", "from-config"} {
				if got := strings.Contains(r.stdout, "\n"+name+" "); got != (name == tc.want) {
					t.Errorf("table lists %s = %v, want %v (the providers file must come from %q)", name, got, !got, tc.want)
				}
			}
			if !strings.Contains(r.stdout, "\nstripe ") {
				t.Errorf("table lacks the built-in stripe:\n%s", r.stdout)
			}
		})
	}

	// A typed value from the environment is parsed as the flag would be.
	if r := runEnv(t, []string{"CLAIMD_GRACE=3d"}, "prune", "--data-dir", t.TempDir()); r.code != 2 || !strings.Contains(r.stderr, `CLAIMD_GRACE="3d": not a value of --grace: want a duration`) {
		t.Errorf("CLAIMD_GRACE=3d claimd prune = exit %d, %q; want exit 2 naming the variable", r.code, r.stderr)
	}
	// serve reads all three too: its data dir from CLAIMD_DATA_DIR, and
	// the command line's listen addresses and log format over the
	// environment's and the config file's (an unusable address or a text
	// log would fail start).
	serveConfig := writeFile(t, "serve.yaml", "log-format: text\nlisten: 256.0.0.1:1\n")
	dataDir := t.TempDir()
	p := startEnv(t, []string{"CLAIMD_DATA_DIR=" + dataDir, "CLAIMD_HTTP_LISTEN=256.0.0.1:1", "CLAIMD_LOG_FORMAT=text"},
		"--config", serveConfig, "--log-format", "json")
	serving := p.logs.wait(t, `"claimd serving"`, func(r map[string]any) bool { return r["msg"] == "claimd serving" })
	if want := "embedded (" + filepath.Join(dataDir, "claimd.db") + ")"; serving["tiers"] != want {
		t.Errorf(`"claimd serving" tiers = %v, want %s (the data dir of CLAIMD_DATA_DIR)`, serving["tiers"], want)
	}
	p.stop(t)
}

// TestConfigFileErrors: a config file is strict, and says where it is
// wrong; a flag of another command is not an error, so one file serves
// every command.
func TestConfigFileErrors(t *testing.T) {
	path := writeFile(t, "claimd.yaml", strings.Join([]string{
		"# claimd",                     // 1
		"postgres-schema: billing",     // 2
		"postgres_url: postgres://x/y", // 3: underscores
		"listen: 127.0.0.1:50051",      // 4: serve's, fine for migrate
		"janitor-interval: 1m",         // 5: serve's
		"colour: blue",                 // 6: no command's
		"log-level: [debug]",           // 7: not a single value
		"config: other.yaml",           // 8
		"log-format: json",             // 9
		"log-format: text",             // 10: twice
	}, "\n")+"\n")
	r := runEnv(t, nil, "migrate", "--config", path, "--data-dir", t.TempDir())
	want := []string{
		path + `:3: unknown key "postgres_url": no claimd command has such a flag (did you mean postgres-url?)`,
		path + `:6: unknown key "colour": no claimd command has such a flag`,
		path + `:7: log-level must be a single value`,
		path + `:8: config cannot name another config file`,
		path + `:10: "log-format" is given twice`,
	}
	if r.code != 2 {
		t.Errorf("claimd migrate --config (bad file) exit = %d, want 2", r.code)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("claimd migrate --config (bad file) stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	if strings.Contains(r.stderr, ":4:") || strings.Contains(r.stderr, ":5:") {
		t.Errorf("serve's keys were refused by migrate:\n%s", r.stderr)
	}

	bad := writeFile(t, "bad.yaml", "grace: 2 days\n")
	if r := runEnv(t, nil, "prune", "--config", bad); r.code != 2 || !strings.Contains(r.stderr, bad+`:1: grace: "2 days" is not a value of --grace: want a duration`) {
		t.Errorf("claimd prune --config (grace: 2 days) = exit %d, %q", r.code, r.stderr)
	}
	syntax := writeFile(t, "syntax.yaml", "listen: 127.0.0.1:1\n  data-dir: x\n")
	if r := runEnv(t, nil, "serve", "--config", syntax); r.code != 2 || !strings.Contains(r.stderr, syntax+":2: YAML syntax") {
		t.Errorf("claimd serve --config (bad YAML) = exit %d, %q; want exit 2 naming line 2", r.code, r.stderr)
	}
	if r := runEnv(t, nil, "serve", "--config", filepath.Join(t.TempDir(), "missing.yaml")); r.code != 2 || !strings.Contains(r.stderr, "--config") {
		t.Errorf("claimd serve --config (missing file) = exit %d, %q", r.code, r.stderr)
	}
	for _, empty := range []string{"", "# nothing yet\n", "---\n"} {
		if r := runEnv(t, nil, "providers", "--config", writeFile(t, "empty.yaml", empty)); r.code != 0 {
			t.Errorf("claimd providers --config (%q) = exit %d, %q; an empty file sets nothing", empty, r.code, r.stderr)
		}
	}
	if r := runEnv(t, nil, "providers", "--config", writeFile(t, "list.yaml", "- listen\n")); r.code != 2 || !strings.Contains(r.stderr, ":1: want a mapping of flag names to values") {
		t.Errorf("claimd providers --config (a list) = exit %d, %q", r.code, r.stderr)
	}
}

// TestProvidersDump: the dump is the built-in registry, and loads back
// into the same one.
func TestProvidersDump(t *testing.T) {
	r := runEnv(t, nil, "providers", "--dump")
	if r.code != 0 || r.stdout != string(horizon.DefaultYAML()) {
		t.Fatalf("claimd providers --dump = exit %d, %d bytes; want the built-in providers.yaml (%d bytes)", r.code, len(r.stdout), len(horizon.DefaultYAML()))
	}
	path := writeFile(t, "providers.yaml", r.stdout)
	if r := runEnv(t, nil, "providers", "--check", path); r.code != 0 || !strings.Contains(r.stdout, " providers and groups, 3 lifecycles)") {
		t.Errorf("claimd providers --check (the dump) = exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	builtin, withDump := runEnv(t, nil, "providers"), runEnv(t, nil, "providers", "--providers", path)
	if builtin.code != 0 || withDump.stdout != builtin.stdout {
		t.Errorf("claimd providers --providers (the dump) prints another table than claimd providers:\n%s\nvs\n%s", withDump.stdout, builtin.stdout)
	}
}

// TestProvidersExtendsBuiltin: --providers with extends: builtin adds to
// the built-in registry, and a file's entry replaces the built-in one.
func TestProvidersExtendsBuiltin(t *testing.T) {
	path := writeFile(t, "mine.yaml", `version: 1
extends: builtin
providers:
  acme:
    retry_horizon: 24h
    margin: 12h
    lease: 30s
    key: header:X-Acme-Delivery
    source: https://acme.example/webhooks
    reviewed_on: 2026-11-01
  stripe:
    retry_horizon: 96h
    margin: 12h
    lease: 60s
    key: json:id
    source: https://docs.stripe.com/webhooks#retries
    reviewed_on: 2026-11-01
groups:
  shop: [shopify, acme]
`)
	r := runEnv(t, nil, "providers", "--providers", path)
	if r.code != 0 {
		t.Fatalf("claimd providers --providers (extends) = exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^acme +24h +12h +36h `),
		regexp.MustCompile(`(?m)^stripe +96h +12h +108h `),
		regexp.MustCompile(`(?m)^shop +24h +12h +36h .*group of acme, shopify`),
		regexp.MustCompile(`(?m)^github +72h `),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("claimd providers --providers (extends) lacks a line matching %s:\n%s", want, r.stdout)
		}
	}
	broken := writeFile(t, "broken.yaml", "version: 1\nextends: builtin\ngroups:\n  shop: [shopify, acme]\n")
	if r := runEnv(t, nil, "providers", "--check", broken); r.code == 0 || !strings.Contains(r.stderr, broken+`:4: shop: member "acme" is not a provider of this file or of the built-in registry`) {
		t.Errorf("claimd providers --check (unknown member) = exit %d, %q", r.code, r.stderr)
	}
}

// TestProvidersLifecycles: claimd providers shows the lifecycles below the
// table, a file's own lifecycle included, and --check of a bad graph fails
// naming its line.
func TestProvidersLifecycles(t *testing.T) {
	r := runEnv(t, nil, "providers")
	if r.code != 0 {
		t.Fatalf("claimd providers = exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\nLIFECYCLES$`),
		regexp.MustCompile(`(?m)^stripe charge: entity json:data\.object\.id, event type json:type$`),
		regexp.MustCompile(`(?m)^  charge\.refunded +succeeded → succeeded +new, pending +-$`),
		regexp.MustCompile(`(?m)^  payment_intent\.processing +new, requires_action, requires_capture, payment_failed → processing +processing +-$`),
		regexp.MustCompile(`(?m)^adyen payment: `),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("claimd providers lacks a line matching %s:\n%s", want, r.stdout)
		}
	}

	const acme = `version: 1
extends: builtin
providers:
  acme:
    retry_horizon: 24h
    margin: 12h
    lease: 30s
    key: json:id
    source: https://acme.example/webhooks
    reviewed_on: 2026-11-01
    lifecycles:
      order:
        entity: json:order.id
        event_type: json:event
        states: [new, paid, shipped]
        events:
          order.paid: {from: [new], to: paid}
          order.shipped: {from: [paid], to: shipped}
        source: https://acme.example/orders
`
	r = runEnv(t, nil, "providers", "--providers", writeFile(t, "acme.yaml", acme))
	if r.code != 0 || !regexp.MustCompile(`(?m)^  order\.shipped +paid → shipped +new +-$`).MatchString(r.stdout) {
		t.Errorf("claimd providers --providers (a lifecycle) = exit %d, want acme's order graph:\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct{ desc, from, to, want string }{
		{"unreachable state", "order.shipped: {from: [paid], to: shipped}", "order.shipped: {from: [shipped], to: shipped}",
			`:15: acme lifecycle order: state shipped is unreachable`},
		{"unknown state", "order.paid: {from: [new], to: paid}", "order.paid: {from: [created], to: paid}",
			`:17: acme lifecycle order: event order.paid: from names "created", which is not one of the lifecycle's states`},
		{"event leading nowhere", "order.paid: {from: [new], to: paid}", "order.paid: {from: [new]}",
			`:17: acme lifecycle order: event order.paid: to is required`},
	} {
		bad := writeFile(t, "bad.yaml", strings.Replace(acme, tc.from, tc.to, 1))
		if r := runEnv(t, nil, "providers", "--check", bad); r.code == 0 || !strings.Contains(r.stderr, bad+tc.want) {
			t.Errorf("claimd providers --check (%s) = exit %d, %q; want it to fail with %q", tc.desc, r.code, r.stderr, bad+tc.want)
		}
	}
}

// TestMigrateSaysWhatItApplied, on both durable tiers.
func TestMigrateSaysWhatItApplied(t *testing.T) {
	dataDir := t.TempDir()
	db := filepath.Join(dataDir, "claimd.db")
	applied := fmt.Sprintf("embedded (%s): applied ", db)
	if r := runEnv(t, nil, "migrate", "--data-dir", dataDir); r.code != 0 || !strings.HasPrefix(r.stdout, applied) || !strings.HasSuffix(r.stdout, fmt.Sprintf("; now at version %d\n", sqlite.SchemaVersion())) {
		t.Errorf("claimd migrate (new embedded tier) = exit %d, %q %q; want %q…", r.code, r.stdout, r.stderr, applied)
	}
	if r, want := runEnv(t, nil, "migrate", "--data-dir", dataDir), fmt.Sprintf("embedded (%s): up to date at version %d\n", db, sqlite.SchemaVersion()); r.code != 0 || r.stdout != want {
		t.Errorf("claimd migrate (again) = exit %d, %q; want %q", r.code, r.stdout, want)
	}

	url := testenv.Postgres(t, postgres.Migrate)
	tests := []struct {
		desc string
		env  []string
		args []string
		want string
	}{
		{"the default schema, migrated", nil, nil, "postgres schema claimd: up to date at version 7\n"},
		{"a new schema", nil, []string{"--postgres-schema", "billing"}, "postgres schema billing: applied 0001_claims, 0002_audit, 0003_lease_secret, 0004_entities, 0005_effect_recovered, 0006_audit_actor, 0007_audit_key; now at version 7\n"},
		{"that schema again", []string{"CLAIMD_POSTGRES_SCHEMA=billing"}, nil, "postgres schema billing: up to date at version 7\n"},
		{"partitioned once", []string{"CLAIMD_POSTGRES_SCHEMA=billing"}, []string{"--partition-claims", "4"},
			"postgres schema billing: up to date at version 7\npostgres schema billing: claims hash-partitioned by identity into 4 partitions\n"},
	}
	for _, tc := range tests {
		r := runEnv(t, append(tc.env, "CLAIMD_POSTGRES_URL="+url), append([]string{"migrate"}, tc.args...)...)
		if r.code != 0 || r.stdout != tc.want {
			t.Errorf("%s: claimd migrate = exit %d, %q %q; want %q", tc.desc, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	// Once is enough: a second conversion is refused, and so is one without
	// PostgreSQL.
	r := runEnv(t, []string{"CLAIMD_POSTGRES_URL=" + url, "CLAIMD_POSTGRES_SCHEMA=billing"}, "migrate", "--partition-claims", "4")
	if r.code == 0 || !strings.Contains(r.stderr, "already partitioned") {
		t.Errorf("claimd migrate --partition-claims again = exit %d, %q; want a refusal saying it is already partitioned", r.code, r.stderr)
	}
	r = runEnv(t, nil, "migrate", "--data-dir", t.TempDir(), "--partition-claims", "4")
	if r.code != 2 || !strings.Contains(r.stderr, "--partition-claims needs --postgres-url") {
		t.Errorf("claimd migrate --partition-claims (embedded) = exit %d, %q; want exit 2 naming --postgres-url", r.code, r.stderr)
	}
}
