package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// TokenPrefix starts every token NewToken makes, so a token pasted where its
// hash belongs (or leaked into a log or a repository) is recognised.
const TokenPrefix = "cl_"

// tokenBytes is the entropy of a token: 256 bits, so a SHA-256 of it is as
// hard to invert as to guess, and an unsalted hash is enough.
const tokenBytes = 32

// hashPrefix starts a token hash in the auth file.
const hashPrefix = "sha256:"

// maxTokenBytes bounds a presented token: longer ones are refused before
// they are hashed. NewToken's are 46 bytes.
const maxTokenBytes = 512

// NewToken returns a fresh bearer token: TokenPrefix and 256 random bits,
// base64url without padding.
func NewToken() string {
	b := make([]byte, tokenBytes)
	rand.Read(b) // never returns an error; crashes the program if the OS cannot supply randomness
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// HashToken returns the hash of token as the auth file lists it:
// "sha256:" and 64 lowercase hex digits.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hashPrefix + hex.EncodeToString(sum[:])
}

// parseHash decodes a token hash of the auth file. The caller reports a
// failure without echoing s: a mistake here is often the token itself.
func parseHash(s string) ([sha256.Size]byte, bool) {
	var out [sha256.Size]byte
	hexPart, ok := strings.CutPrefix(s, hashPrefix)
	if !ok || len(hexPart) != 2*sha256.Size || strings.ToLower(hexPart) != hexPart {
		return out, false
	}
	if _, err := hex.Decode(out[:], []byte(hexPart)); err != nil {
		return out, false
	}
	return out, true
}
