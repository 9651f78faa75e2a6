package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fastKeyFile writes a fast-tier key file of one fresh key (mode 0600) and
// returns its path: what every replica of a test that shares a Redis is
// given.
func fastKeyFile(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	path := filepath.Join(t.TempDir(), "fast-tier.key")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFastTierKeyFileRefusals: serve stops before it opens a tier, naming
// the flag, when the Redis fast tier has no key file, when the file is not
// one, when other users may read it, or when the flag is given without Redis.
func TestFastTierKeyFileRefusals(t *testing.T) {
	tiersFlags := []string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--redis-url", "redis://127.0.0.1:1", "--postgres-url", "postgres://127.0.0.1:1/none"}
	notAKey := filepath.Join(t.TempDir(), "not-a-key")
	os.WriteFile(notAKey, []byte("hunter2\n"), 0o600)
	loose := withMode(t, fastKeyFile(t), 0o644)
	for _, tc := range []struct {
		desc string
		args []string
		want string
	}{
		{"Redis without a key file", tiersFlags, "--redis-url needs --fast-tier-key-file"},
		{"a file that holds no key", append(tiersFlags, "--fast-tier-key-file", notAKey), "--fast-tier-key-file: " + notAKey + ": line 1: not a hex key"},
		{"a key file other users may read", append(tiersFlags, "--fast-tier-key-file", loose), "--fast-tier-key-file " + loose + " has mode 0644"},
		{"a key file without Redis", []string{"serve", "--data-dir", t.TempDir(), "--fast-tier-key-file", fastKeyFile(t)}, "--fast-tier-key-file seals the records of the Redis fast tier: it needs --redis-url"},
	} {
		out, code := run(t, tc.args...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%s: claimd %s = exit %d\n%s\nwant refused saying %q", tc.desc, strings.Join(tc.args, " "), code, out, tc.want)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("%s: the refusal echoes the file's contents:\n%s", tc.desc, out)
		}
	}
}
