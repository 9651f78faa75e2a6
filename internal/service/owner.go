package service

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"

	"github.com/claimd/claimd/internal/tiers"
)

// Ownership of a claim (see ClaimService in claim.proto). The fencing token
// is a sequence number that anyone may see; what proves ownership is the
// lease secret, which only the ACQUIRED answer carries and which the stores
// keep only as a hash.
//
// A secret must come back unchanged when the owner repeats its claim with
// the same attempt_id (its first answer may have been lost), yet never be
// stored. So it is derived rather than drawn: secret = HMAC-SHA256(salt,
// material) cut to 16 bytes, where salt is 16 random bytes drawn for every
// call and stored only by the call that acquires, and material is
//
//   - with an attempt_id: principal, holder and attempt_id, so a repeat from
//     the same caller derives the same secret from the stored salt;
//   - without one: 16 random bytes that are never stored, so the secret
//     exists only in the one answer (nothing can repeat such a claim).
//
// The attempt_id itself is stored only as a fingerprint of the same three
// values under another domain, so the stores compare fingerprints exactly as
// they compared attempt ids, and an attempt_id recognises only the principal
// and holder that sent it. Knowing the salt, the fingerprint and the hash
// does not give the secret without the attempt_id, which is never stored.
// Within its principal and holder, though, an attempt_id is answered with
// the secret while the lease lives (that is its purpose), so callers must
// make it unguessable: the clients draw 16 random bytes.

// LeaseSecretBytes is the size of a lease secret.
const LeaseSecretBytes = 16

// attemptDomain separates attempt fingerprints from every other hash of the
// same values.
const attemptDomain = "claimd/attempt\x00"

// errSecretMismatch is a stored secret hash that the claim's own material
// does not reproduce: a store that answered a record it should not have.
// Never hand out a secret that would not work.
var errSecretMismatch = errors.New("service: the acquired record's secret hash does not match this claim; not answering a secret")

// ownership is what one Claim call stakes: the material its secret derives
// from, and the fields a store writes when the call acquires.
type ownership struct {
	material   []byte
	attemptID  string // the fingerprint, "" without an attempt_id
	salt, hash []byte
	secret     []byte // derived from salt: the answer when this call's own write acquires
}

// newOwnership derives the ownership of a Claim by principal with holder and
// attemptID (both validated; attemptID may be empty).
func newOwnership(principal, holder, attemptID string) ownership {
	var o ownership
	if attemptID != "" {
		o.material = []byte(principal + "\x00" + holder + "\x00" + attemptID)
		sum := sha256.Sum256([]byte(attemptDomain + principal + "\x00" + holder + "\x00" + attemptID))
		o.attemptID = hex.EncodeToString(sum[:])
		o.salt = randomBytes(tiers.SaltBytes)
	} else {
		// One read of the random source for both.
		r := randomBytes(LeaseSecretBytes + tiers.SaltBytes)
		o.material, o.salt = r[:LeaseSecretBytes:LeaseSecretBytes], r[LeaseSecretBytes:]
	}
	o.secret = leaseSecret(o.salt, o.material)
	o.hash = secretHash(o.secret)
	return o
}

// secretOf returns the lease secret of rec, a record the call acquired (or
// acquired before, for a repeated attempt): derived from the record's salt,
// and checked against its hash.
func (o ownership) secretOf(rec tiers.Record) ([]byte, error) {
	secret, hash := o.secret, o.hash
	if !bytes.Equal(rec.Salt, o.salt) {
		// Acquired by an earlier call of the attempt: its salt.
		secret = leaseSecret(rec.Salt, o.material)
		hash = secretHash(secret)
	}
	if len(rec.SecretHash) != tiers.SecretHashBytes || subtle.ConstantTimeCompare(hash, rec.SecretHash) != 1 {
		return nil, errSecretMismatch
	}
	return secret, nil
}

// leaseSecret is HMAC-SHA256(salt, material) cut to LeaseSecretBytes.
func leaseSecret(salt, material []byte) []byte {
	m := hmac.New(sha256.New, salt)
	m.Write(material)
	return m.Sum(nil)[:LeaseSecretBytes]
}

// secretHash is what the stores keep of a secret, and what a fenced write
// presents.
func secretHash(secret []byte) []byte {
	sum := sha256.Sum256(secret)
	return sum[:]
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}
