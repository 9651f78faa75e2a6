package seal

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, MinKeyBytes) }

func ring(t *testing.T, keys ...[]byte) *Keyring {
	t.Helper()
	k, err := NewKeyring(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func record() tiers.Record {
	now := time.Date(2026, 12, 3, 7, 0, 0, 123456000, time.UTC)
	return tiers.Record{
		Key:   tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_1"},
		State: tiers.StateSettled, Token: 2, Version: 5, Attempt: 2, Reason: tiers.ReasonLeaseExpired,
		Holder: "pod-a", AttemptID: "fp-1", Salt: bytes.Repeat([]byte{1}, tiers.SaltBytes),
		SecretHash: bytes.Repeat([]byte{2}, tiers.SecretHashBytes), PayloadHash: bytes.Repeat([]byte{3}, 32),
		Result: []byte(`{"ok":true}`), FirstSeenAt: now, LeaseExpiresAt: now.Add(time.Minute),
		WindowExpiresAt: now.Add(84 * time.Hour), UpdatedAt: now.Add(time.Second),
	}
}

// Every field a fast-tier answer is built from, and the record's identity,
// is under the seal: a change to any of them fails verification.
func TestSealCoversEveryField(t *testing.T) {
	k := ring(t, key(1))
	orig := record()
	mac := k.Sign(&orig)
	if len(mac) != Size {
		t.Fatalf("len(Sign()) = %d, want %d", len(mac), Size)
	}
	if !k.Verify(&orig, mac) {
		t.Fatal("Verify(the record signed) = false, want true")
	}
	edits := []struct {
		desc string
		edit func(r *tiers.Record)
	}{
		{"copied onto another key", func(r *tiers.Record) { r.Key.Key = "evt_2" }},
		{"another provider", func(r *tiers.Record) { r.Key.Provider = "github" }},
		{"another namespace", func(r *tiers.Record) { r.Key.Namespace = "shop" }},
		{"key boundary moved", func(r *tiers.Record) { r.Key.Provider, r.Key.Key = "stripee", "vt_1" }},
		{"state", func(r *tiers.Record) { r.State = tiers.StateProcessing }},
		{"token", func(r *tiers.Record) { r.Token++ }},
		{"version", func(r *tiers.Record) { r.Version++ }},
		{"attempt", func(r *tiers.Record) { r.Attempt++ }},
		{"reason", func(r *tiers.Record) { r.Reason = tiers.ReasonNew }},
		{"released", func(r *tiers.Record) { r.Released = true }},
		{"holder", func(r *tiers.Record) { r.Holder = "pod-b" }},
		{"attempt id", func(r *tiers.Record) { r.AttemptID = "fp-2" }},
		{"salt", func(r *tiers.Record) { r.Salt = bytes.Repeat([]byte{9}, tiers.SaltBytes) }},
		{"secret hash", func(r *tiers.Record) { r.SecretHash = bytes.Repeat([]byte{9}, tiers.SecretHashBytes) }},
		{"payload hash", func(r *tiers.Record) { r.PayloadHash = nil }},
		{"result", func(r *tiers.Record) { r.Result = []byte(`{"ok":false}`) }},
		{"result emptied", func(r *tiers.Record) { r.Result = nil }},
		{"first seen", func(r *tiers.Record) { r.FirstSeenAt = r.FirstSeenAt.Add(time.Microsecond) }},
		{"lease", func(r *tiers.Record) { r.LeaseExpiresAt = r.LeaseExpiresAt.Add(time.Hour) }},
		{"window", func(r *tiers.Record) { r.WindowExpiresAt = r.WindowExpiresAt.Add(time.Hour) }},
		{"updated", func(r *tiers.Record) { r.UpdatedAt = r.UpdatedAt.Add(time.Microsecond) }},
	}
	for _, e := range edits {
		r := record()
		e.edit(&r)
		if k.Verify(&r, mac) {
			t.Errorf("%s: Verify(edited record, original seal) = true, want false", e.desc)
		}
	}
	// What the fast tier cannot keep is not sealed: nanoseconds below the
	// microsecond, and the entity fields.
	r := record()
	r.UpdatedAt = r.UpdatedAt.Add(500 * time.Nanosecond)
	r.Lifecycle, r.EntityID, r.EventType = "stripe.payment_intent", "pi_1", "payment_intent.created"
	if !k.Verify(&r, mac) {
		t.Error("Verify(record with sub-microsecond time and entity fields) = false, want true")
	}
	for _, bad := range [][]byte{nil, mac[:Size-1], append(append([]byte(nil), mac...), 0)} {
		if k.Verify(&orig, bad) {
			t.Errorf("Verify(seal of %d bytes) = true, want false", len(bad))
		}
	}
}

// A rotation: the first key signs, every key verifies.
func TestKeyringRotation(t *testing.T) {
	oldRing, newRing, both := ring(t, key(1)), ring(t, key(2)), ring(t, key(2), key(1))
	rec := record()
	byOld, byBoth := oldRing.Sign(&rec), both.Sign(&rec)
	if !bytes.Equal(byBoth, newRing.Sign(&rec)) {
		t.Error("a keyring signs with a key other than its first")
	}
	if !both.Verify(&rec, byOld) {
		t.Error("Verify(seal of the old key) with the old key still listed = false, want true")
	}
	if !oldRing.Verify(&rec, oldRing.Sign(&rec)) || oldRing.Verify(&rec, byBoth) {
		t.Error("a keyring without the new key verified its seal, or failed its own")
	}
	if newRing.Verify(&rec, byOld) {
		t.Error("Verify(seal of a key no longer listed) = true, want false")
	}
}

func TestParse(t *testing.T) {
	h := func(b byte) string { return hex.EncodeToString(key(b)) }
	tests := []struct {
		desc, file string
		keys       int
		err        string // substring; "" for none
	}{
		{"one key", h(1) + "\n", 1, ""},
		{"comments, blanks and a rotation", "# new\n" + h(2) + "\n\n  # old\n  " + h(1) + "  \n", 2, ""},
		{"no key", "# nothing\n\n", 0, "no key"},
		{"not hex", "not-a-key\n", 0, "line 1: not a hex key"},
		{"short", "\n" + hex.EncodeToString(key(1)[:16]) + "\n", 0, "line 2: a key of 16 bytes"},
		{"too many", strings.Repeat(h(1)+"\n", MaxKeys+1), 0, "at most"},
	}
	for _, tc := range tests {
		k, err := Parse([]byte(tc.file))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: Parse() error = %v", tc.desc, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: Parse() error = %v, want one containing %q", tc.desc, err, tc.err)
		case err == nil && k.Len() != tc.keys:
			t.Errorf("%s: Parse() keys = %d, want %d", tc.desc, k.Len(), tc.keys)
		}
	}
	// The order of the file is the order of the keys: the first signs.
	k, err := Parse([]byte(h(2) + "\n" + h(1) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	rec := record()
	if !bytes.Equal(k.Sign(&rec), ring(t, key(2)).Sign(&rec)) {
		t.Error("the key file's first key does not sign")
	}
}

// LoadOrCreate writes a key of its own, readable by its owner only, once;
// later calls read that key back.
func TestLoadOrCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fast-tier.key")
	k1, created, err := LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("LoadOrCreate(absent) = created %v, %v; want created", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("generated key file mode = %04o, want 0600", mode)
	}
	k2, created, err := LoadOrCreate(path)
	if err != nil || created {
		t.Fatalf("LoadOrCreate(existing) = created %v, %v; want read back", created, err)
	}
	rec := record()
	if !k2.Verify(&rec, k1.Sign(&rec)) {
		t.Error("the key read back does not verify what the generated key signed")
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("LoadFile(absent) error = nil")
	}
}

func BenchmarkSign(b *testing.B) {
	k := ring(&testing.T{}, key(1))
	rec := record()
	b.ReportAllocs()
	for b.Loop() {
		k.Sign(&rec)
	}
}

func BenchmarkVerify(b *testing.B) {
	k := ring(&testing.T{}, key(1))
	rec := record()
	mac := k.Sign(&rec)
	b.ReportAllocs()
	for b.Loop() {
		if !k.Verify(&rec, mac) {
			b.Fatal("Verify = false")
		}
	}
}
