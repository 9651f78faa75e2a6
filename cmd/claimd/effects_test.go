package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// guardSchemas reads effects.schema of the guards' shared scenarios: the DDL
// each guard executes on first use.
func guardSchemas(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "clients", "guardspec", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Effects struct {
			Schema map[string]string `json:"schema"`
		} `json:"effects"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("scenarios.json: %v", err)
	}
	if len(doc.Effects.Schema) == 0 {
		t.Fatal("scenarios.json has no effects.schema")
	}
	return doc.Effects.Schema
}

// TestEffectsSchemaIsTheGuards: claimd effects-schema prints, for every
// dialect of the scenarios, the very statement the guards execute, then
// ";" and a newline, so that a table created by a migration tool is the
// one a guard would have created.
func TestEffectsSchemaIsTheGuards(t *testing.T) {
	schemas := guardSchemas(t)
	dialects := slices.Sorted(maps.Keys(schemas))
	if want := []string{"mysql", "postgres", "sqlite"}; !slices.Equal(dialects, want) {
		t.Errorf("scenarios.json dialects = %v, want %v (the ones effects-schema documents)", dialects, want)
	}
	for _, d := range dialects {
		for _, args := range [][]string{{"effects-schema", "--dialect", d}, {"effects-schema", "--dialect=" + d}} {
			r := runEnv(t, nil, args...)
			if want := schemas[d] + ";\n"; r.code != 0 || r.stdout != want || r.stderr != "" {
				t.Errorf("claimd %v = exit %d, stdout %q, stderr %q; want exit 0 and stdout %q", args, r.code, r.stdout, r.stderr, want)
			}
		}
	}
	if r := runEnv(t, []string{"CLAIMD_DIALECT=postgres"}, "effects-schema"); r.code != 0 || r.stdout != schemas["postgres"]+";\n" {
		t.Errorf("CLAIMD_DIALECT=postgres claimd effects-schema = exit %d, stdout %q, stderr %q; want the postgres DDL", r.code, r.stdout, r.stderr)
	}
}

// TestEffectsSchemaUsageErrors: a missing or unknown dialect is a usage
// error (exit 2) that names the dialects, and prints no DDL.
func TestEffectsSchemaUsageErrors(t *testing.T) {
	tests := []struct {
		desc       string
		args       []string
		wantStderr string
	}{
		{"no dialect", []string{"effects-schema"}, "effects-schema: --dialect is required: postgres, sqlite or mysql"},
		{"an empty dialect", []string{"effects-schema", "--dialect", ""}, "effects-schema: --dialect is required: postgres, sqlite or mysql"},
		{"an unknown dialect", []string{"effects-schema", "--dialect", "oracle"}, `effects-schema: --dialect "oracle": want postgres, sqlite or mysql`},
		{"a dialect by another name", []string{"effects-schema", "--dialect", "postgresql"}, `--dialect "postgresql": want postgres, sqlite or mysql`},
		{"a long dialect, clipped", []string{"effects-schema", "--dialect", strings.Repeat("x", 4096)}, "(4096 bytes): want postgres, sqlite or mysql"},
		{"an argument", []string{"effects-schema", "postgres"}, `claimd effects-schema: unexpected arguments ["postgres"]`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r := runEnv(t, nil, tc.args...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.wantStderr) || r.stdout != "" {
				t.Errorf("claimd %.60q = exit %d, stdout %q, stderr %.200q; want exit 2 and %q on stderr", tc.args, r.code, r.stdout, r.stderr, tc.wantStderr)
			}
		})
	}
}

func TestEffectsSchemaHelp(t *testing.T) {
	r := runEnv(t, nil, "effects-schema", "--help")
	if got := flagsOf(r.stdout); r.code != 0 || !slices.Equal(got, []string{"config", "dialect"}) {
		t.Errorf("claimd effects-schema --help = exit %d, flags %v; want exit 0 and flags [config dialect]:\n%s", r.code, got, r.stdout)
	}
	if !strings.Contains(r.stdout, "postgres, sqlite or mysql") {
		t.Errorf("claimd effects-schema --help does not name the dialects:\n%s", r.stdout)
	}
}
