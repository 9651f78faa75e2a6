package redis

import (
	"bytes"
	"testing"
)

// The owner field carries a salt and a secret hash of any lengths, either
// or both empty (a row written before secret hashes existed has neither).
func TestOwnerField(t *testing.T) {
	salt, hash := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 32)
	for _, tc := range []struct {
		desc       string
		salt, hash []byte
	}{
		{"both", salt, hash}, {"neither", nil, nil}, {"salt only", salt, nil}, {"hash only", nil, hash},
	} {
		gotSalt, gotHash, err := splitOwner(string(joinOwner(tc.salt, tc.hash)))
		if err != nil || !bytes.Equal(gotSalt, tc.salt) || !bytes.Equal(gotHash, tc.hash) || (tc.salt == nil) != (gotSalt == nil) || (tc.hash == nil) != (gotHash == nil) {
			t.Errorf("%s: splitOwner(joinOwner()) = %x, %x, %v; want %x, %x", tc.desc, gotSalt, gotHash, err, tc.salt, tc.hash)
		}
	}
	if _, _, err := splitOwner("\x20short"); err == nil {
		t.Error("splitOwner(a salt longer than the field) error = nil")
	}
}
