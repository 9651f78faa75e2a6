// Package seal signs and verifies the records a shared fast tier holds, so
// that whoever can write the fast tier (Redis) but does not hold the server
// key cannot make claimd answer from a record it did not write: a record
// copied onto another key, a state, token, holder or result edited, or a
// record signed with a key the server does not know fails verification, and
// the fast tier treats it as absent (the durable tier decides).
//
// The seal is HMAC-SHA-256 under the server key, truncated to its first
// 16 bytes (RFC 2104 §5 allows truncation to no less than half the hash's
// output; NIST SP 800-107 §5.3.4 asks for at least 64 bits). A forger who
// cannot compute the HMAC has a 2^-128 chance per record tried, and each try
// is a record claimd reads once, counts and rewrites: truncating to 16 bytes
// costs nothing in safety and saves 16 bytes per record in Redis.
//
// The seal covers the record's identity (namespace, provider, key, so a
// record copied onto another key fails) and every field an answer of the
// fast tier is built from or decided by: state, token, version, attempt,
// reason, released, holder, attempt id, salt, secret hash, payload hash,
// result and the four times (to the microsecond, as the fast tier keeps
// them). The entity fields (Lifecycle, EntityID, EventType) are left out: a
// fast tier does not keep them and only the durable tier decides by them.
package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/claimd/claimd/internal/tiers"
)

// Size is the length of a seal in bytes.
const Size = 16

// MinKeyBytes is the shortest key a Keyring accepts: the HMAC-SHA-256 block
// of security it is meant to give needs a key of at least 256 bits.
const MinKeyBytes = 32

// MaxKeys bounds the keys of one Keyring: one that signs and the ones a
// rotation still verifies. Each costs an HMAC on every record that fails.
const MaxKeys = 8

// domain separates these MACs from any other use of the same key.
const domain = "claimd fast-tier record v1\x00"

// Keyring holds the server keys: the first signs, every one verifies (a
// rotation adds the new key first and keeps the old one until the records
// it signed have expired). It is safe for concurrent use.
type Keyring struct {
	macs []*sync.Pool // one pool of hash.Hash per key, in order
	bufs sync.Pool    // *[]byte, the encoded record
}

// NewKeyring returns a Keyring of keys, the first of which signs. Each key
// must hold at least MinKeyBytes bytes; at most MaxKeys keys.
func NewKeyring(keys ...[]byte) (*Keyring, error) {
	switch {
	case len(keys) == 0:
		return nil, errors.New("seal: no key")
	case len(keys) > MaxKeys:
		return nil, fmt.Errorf("seal: %d keys, at most %d", len(keys), MaxKeys)
	}
	k := &Keyring{bufs: sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}}
	for i, key := range keys {
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("seal: key %d has %d bytes, want at least %d", i+1, len(key), MinKeyBytes)
		}
		key := append([]byte(nil), key...)
		k.macs = append(k.macs, &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }})
	}
	return k, nil
}

// Len is the number of keys.
func (k *Keyring) Len() int { return len(k.macs) }

// Sign returns the seal of rec under the first key.
func (k *Keyring) Sign(rec *tiers.Record) []byte {
	return k.sum(0, rec, make([]byte, 0, sha256.Size))[:Size]
}

// Verify reports whether mac is the seal of rec under one of the keys.
// The keys are tried in order (the signing key first, which seals every
// record written since the last rotation); each comparison is constant-time.
func (k *Keyring) Verify(rec *tiers.Record, mac []byte) bool {
	if len(mac) != Size {
		return false
	}
	var sum [sha256.Size]byte
	for i := range k.macs {
		if hmac.Equal(k.sum(i, rec, sum[:0])[:Size], mac) {
			return true
		}
	}
	return false
}

// sum appends the full HMAC of rec under key i to out.
func (k *Keyring) sum(i int, rec *tiers.Record, out []byte) []byte {
	bp := k.bufs.Get().(*[]byte)
	buf := encode((*bp)[:0], rec)
	h := k.macs[i].Get().(hash.Hash)
	h.Reset()
	h.Write(buf)
	out = h.Sum(out)
	k.macs[i].Put(h)
	*bp = buf
	k.bufs.Put(bp)
	return out
}

// encode appends the canonical bytes of what a seal covers: every variable
// field is length-prefixed, so no two records encode alike.
func encode(b []byte, r *tiers.Record) []byte {
	b = append(b, domain...)
	for _, s := range [...]string{r.Key.Namespace, r.Key.Provider, r.Key.Key, r.Holder, r.AttemptID} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	for _, f := range [...][]byte{r.Salt, r.SecretHash, r.PayloadHash, r.Result} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	released := byte(0)
	if r.Released {
		released = 1
	}
	b = append(b, byte(r.State), byte(r.Reason), released)
	b = binary.BigEndian.AppendUint64(b, r.Token)
	b = binary.BigEndian.AppendUint64(b, r.Version)
	b = binary.BigEndian.AppendUint32(b, r.Attempt)
	for _, t := range [...]int64{r.FirstSeenAt.UnixMicro(), r.LeaseExpiresAt.UnixMicro(), r.WindowExpiresAt.UnixMicro(), r.UpdatedAt.UnixMicro()} {
		b = binary.BigEndian.AppendUint64(b, uint64(t))
	}
	return b
}
