package server

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/claimd/claimd/internal/tiers"
)

// With --insecure and no key file, a single replica generates its key into
// --data-dir (0600) on the first start and reads it back on the next, so
// its records stay valid across restarts.
func TestInsecureGeneratesFastTierKey(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	c := &Config{TierConfig: TierConfig{RedisURL: "redis://127.0.0.1:1", DataDir: dir}, SecurityConfig: SecurityConfig{Insecure: true}}
	if err := c.checkFastKey(); err != nil {
		t.Fatalf("checkFastKey(--insecure, no key file) = %v, want nil", err)
	}
	first, err := c.fastKeyring(log)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, fastKeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated key file = %v, %v; want mode 0600 in --data-dir", fi, err)
	}
	second, err := c.fastKeyring(log)
	if err != nil {
		t.Fatal(err)
	}
	rec := tiers.Record{Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_1"}, State: tiers.StateSettled, Version: 1}
	if !second.Verify(&rec, first.Sign(&rec)) {
		t.Error("the key read back on the next start does not verify what the first start sealed")
	}
}
