package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
)

// writeFastKey writes a fast-tier key file (claimd's --fast-tier-key-file:
// one hex key, mode 0600) into dir and returns its path. The replicas of a
// run share it, as production replicas sharing a Redis must: a record one
// replica sealed verifies on every other.
func writeFastKey(dir string) (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "fast-tier.key")
	return path, os.WriteFile(path, []byte(hex.EncodeToString(key)+"\n"), 0o600)
}
