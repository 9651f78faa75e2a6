package seal

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// The key file (claimd serve --fast-tier-key-file) holds one key a line, in
// hex (openssl rand -hex 32), at least MinKeyBytes bytes each; the first key
// signs and every key verifies. Blank lines and lines starting with # are
// ignored. A rotation, on every replica: add the new key as the first line
// and restart; once the fast tier's records signed with the old key have
// expired (the longest provider ttl), remove it. A record sealed with a key
// a replica does not know is treated as absent there (counted in
// claimd_fast_tier_integrity_failures_total), never as an answer.

// maxFileBytes bounds what LoadFile reads: MaxKeys keys and their comments.
const maxFileBytes = 64 << 10

// LoadFile reads a Keyring from the key file at path.
func LoadFile(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileBytes)
	}
	k, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Parse reads a Keyring from the contents of a key file.
func Parse(data []byte) (*Keyring, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := hex.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: not a hex key (%d characters; generate one with: openssl rand -hex 32)", n, len(line))
		}
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("line %d: a key of %d bytes, want at least %d (openssl rand -hex 32)", n, len(key), MinKeyBytes)
		}
		keys = append(keys, key)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no key: want one hex key a line (openssl rand -hex 32), the first of which signs")
	}
	return NewKeyring(keys...)
}

// LoadOrCreate reads the key file at path, or, when there is none, creates
// it (mode 0600, never replacing a file that appeared meanwhile) with one
// fresh random key. created says which happened.
func LoadOrCreate(path string) (k *Keyring, created bool, err error) {
	k, err = LoadFile(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	key := make([]byte, MinKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		k, err = LoadFile(path) // another process created it first
		return k, false, err
	}
	if err != nil {
		return nil, false, err
	}
	_, err = fmt.Fprintf(f, "# claimd fast-tier key, generated; the first key signs, every key verifies\n%s\n", hex.EncodeToString(key))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, false, err
	}
	k, err = NewKeyring(key)
	return k, err == nil, err
}

// Random returns a Keyring of one fresh random key: for a single process
// only (tests, a development server), since no other process can verify
// what it signs.
func Random() *Keyring {
	key := make([]byte, MinKeyBytes)
	if _, err := rand.Read(key); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	k, err := NewKeyring(key)
	if err != nil {
		panic(err)
	}
	return k
}
