package server

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/claimd/claimd/internal/tiers/seal"
)

// fastKeyFileName is where --insecure keeps a generated fast-tier key, in
// --data-dir.
const fastKeyFileName = "fast-tier.key"

// checkFastKey refuses the Redis fast tier without --fast-tier-key-file
// (unless --insecure), and the flag without Redis. Every replica that
// shares a Redis must seal its records with the same key, so a key each
// process generated for itself would make every replica treat the others'
// records as forged: claimd does not guess, it asks for the file. The
// embedded tiers' fast tier lives on claimd's own heap, where nothing but
// claimd can write, so it needs no key.
func (c *Config) checkFastKey() error {
	switch {
	case c.FastTierKeyFile != "" && c.RedisURL == "":
		return fmt.Errorf("%w: --fast-tier-key-file seals the records of the Redis fast tier: it needs --redis-url (the embedded tiers' fast tier lives in claimd's own memory)", ErrUsage)
	case c.RedisURL != "" && c.FastTierKeyFile == "" && !c.Insecure:
		return fmt.Errorf("%w: --redis-url needs --fast-tier-key-file: the key that seals the fast tier's records, the same file on every replica "+
			"(one hex key a line, the first signs: openssl rand -hex 32 > fast-tier.key; chmod 0600 fast-tier.key), "+
			"or pass --insecure to generate one into --data-dir for a single replica", ErrUsage)
	}
	return nil
}

// fastKeyring loads the keyring of the Redis fast tier: --fast-tier-key-file,
// or with --insecure and no file a key generated into --data-dir on the
// first start (0600) and read back on the next. nil without Redis.
func (c *Config) fastKeyring(log *slog.Logger) (*seal.Keyring, error) {
	switch {
	case c.RedisURL == "":
		return nil, nil
	case c.FastTierKeyFile != "":
		k, err := seal.LoadFile(c.FastTierKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--fast-tier-key-file: %w", err)
		}
		return k, nil
	}
	path := filepath.Join(c.DataDir, fastKeyFileName)
	k, created, err := seal.LoadOrCreate(path)
	if err != nil {
		return nil, fmt.Errorf("--insecure without --fast-tier-key-file: %s: %w", path, err)
	}
	log.Warn("--insecure: the Redis fast tier's records are sealed with a key of this host's --data-dir; "+
		"other replicas sharing the Redis do not hold it and treat these records as forged: give every replica the same --fast-tier-key-file",
		"fast_tier_key_file", path, "generated", created)
	return k, nil
}
