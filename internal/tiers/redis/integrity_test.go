package redis

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/seal"
)

// The tests of this file write to Redis as an attacker with write access
// would (a record's fields edited, another key's value copied, a record
// sealed under a key the server does not hold) and check that Reserve never decides from such a
// record: it answers FastTakeover with Unverified, so the durable tier
// decides, and the record is gone, so the durable tier's answer can be put.

func keyring(t *testing.T, b ...byte) *seal.Keyring {
	t.Helper()
	var keys [][]byte
	for _, x := range b {
		keys = append(keys, bytes.Repeat([]byte{x}, seal.MinKeyBytes))
	}
	k, err := seal.NewKeyring(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func storeWith(t *testing.T, url string, k *seal.Keyring) *Store {
	t.Helper()
	s, err := New(testCtx(t), Config{URL: url, Keyring: k})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// settledRecord is k's record settled at now with result.
func settledRecord(k tiers.Key, now time.Time, result string) tiers.Record {
	rec := claimRecord(k, now)
	rec.State, rec.Version, rec.Result = tiers.StateSettled, 3, []byte(result)
	return rec
}

func TestForgedRecordsAreNotAnswered(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	s := storeWith(t, url, keyring(t, 1))
	stranger := storeWith(t, url, keyring(t, 9)) // a key the server does not hold
	raw := rawClient(t, url)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()
	key := func(name string) tiers.Key { return tiers.Key{Namespace: ns, Provider: "stripe", Key: name} }

	edit := func(ctx context.Context, k tiers.Key, f func(r *tiers.Record)) {
		forge(ctx, t, raw, s.key(k), f)
	}
	tests := []struct {
		desc  string
		forge func(ctx context.Context, k tiers.Key) // leaves a forged record under k
	}{
		{"a settled record copied from another key", func(ctx context.Context, k tiers.Key) {
			src := key("src-" + k.Key)
			mustPut(t, s, settledRecord(src, now, "receipt"))
			if err := raw.Set(ctx, s.key(k), raw.Get(ctx, s.key(src)).Val(), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"a record in progress edited to SETTLED", func(ctx context.Context, k tiers.Key) {
			mustPut(t, s, claimRecord(k, now))
			edit(ctx, k, func(r *tiers.Record) { r.State, r.Result = tiers.StateSettled, []byte("forged") })
		}},
		{"its token edited", func(ctx context.Context, k tiers.Key) {
			mustPut(t, s, claimRecord(k, now))
			edit(ctx, k, func(r *tiers.Record) { r.Token = 7 })
		}},
		{"its holder edited", func(ctx context.Context, k tiers.Key) {
			mustPut(t, s, claimRecord(k, now))
			edit(ctx, k, func(r *tiers.Record) { r.Holder = "mallory" })
		}},
		{"a settled record's result edited", func(ctx context.Context, k tiers.Key) {
			mustPut(t, s, settledRecord(k, now, "receipt"))
			edit(ctx, k, func(r *tiers.Record) { r.Result = []byte("forged") })
		}},
		{"a settled record's result kept in the durable tier, made an empty one", func(ctx context.Context, k tiers.Key) {
			mustPut(t, s, settledRecord(k, now, strings.Repeat("r", MaxInlineResult+1)))
			edit(ctx, k, func(r *tiers.Record) { r.Result = nil })
		}},
		{"a settled record's small result, said to be in the durable tier", func(ctx context.Context, k tiers.Key) {
			mustPut(t, s, settledRecord(k, now, "receipt"))
			edit(ctx, k, func(r *tiers.Record) { r.Result = resultInDurable })
		}},
		{"its seal removed", func(ctx context.Context, k tiers.Key) {
			mustPut(t, s, settledRecord(k, now, "receipt"))
			v, _ := raw.Get(ctx, s.key(k)).Bytes()
			rec, _, err := DecodeRecord(k, v)
			if err != nil {
				t.Fatal(err)
			}
			raw.Set(ctx, s.key(k), EncodeRecord(&rec, nil), 0)
		}},
		{"sealed with a key the server does not hold", func(ctx context.Context, k tiers.Key) {
			mustPut(t, stranger, settledRecord(k, now, "forged"))
		}},
		{"written by hand, in the record format but not a record", func(ctx context.Context, k tiers.Key) {
			raw.Set(ctx, s.key(k), "\x01\x08\x01\x10\x01\xff\xff", 0)
		}},
		{"written by hand, in no format at all", func(ctx context.Context, k tiers.Key) {
			raw.Set(ctx, s.key(k), "SETTLED", 0)
		}},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx := testCtx(t)
			k := key("evt_" + strconv.Itoa(i))
			tc.forge(ctx, k)
			got, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now.Add(time.Second), Nonce: "n-" + k.Key, PendingTTL: testPendingTTL})
			if err != nil {
				t.Fatalf("Reserve(forged %q) error = %v, want an answer", k.Key, err)
			}
			if got.Verdict != tiers.FastTakeover || !got.Unverified || got.Outcome != tiers.OutcomeUnspecified {
				t.Fatalf("Reserve(forged %q) = verdict %d outcome %v unverified %v, want FastTakeover, unverified, no outcome",
					k.Key, got.Verdict, got.Outcome, got.Unverified)
			}
			if n := raw.Exists(ctx, s.key(k)).Val(); n != 0 {
				t.Fatalf("forged %q still in Redis after Reserve (EXISTS = %d): the durable tier's answer could not replace it", k.Key, n)
			}
			// The durable tier's answer lands where the forgery was, and
			// is answered from then on.
			mustPut(t, s, settledRecord(k, now, "receipt"))
			again, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now.Add(2 * time.Second), Nonce: "m-" + k.Key, PendingTTL: testPendingTTL})
			if err != nil || again.Outcome != tiers.OutcomeDuplicate || again.Unverified || string(again.Record.Result) != "receipt" {
				t.Fatalf("Reserve(repaired %q) = %v result %q unverified %v, %v; want DUPLICATE %q", k.Key, again.Outcome, again.Record.Result, again.Unverified, err, "receipt")
			}
		})
	}
}

// A forged record that claims a newer version keeps Puts out (put.lua cannot
// check a seal) only until the next Reserve discards it.
func TestForgedNewerVersionIsDiscarded(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	s := storeWith(t, url, keyring(t, 1))
	raw := rawClient(t, url)
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	k := tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_v"}
	mustPut(t, s, claimRecord(k, now))
	forge(ctx, t, raw, s.key(k), func(r *tiers.Record) { r.Version, r.State = 99, tiers.StateSettled })
	if wrote, err := s.putRecord(ctx, settledRecord(k, now, "receipt"), ""); err != nil || wrote {
		t.Fatalf("Put over a forged newer version = wrote %v, %v; want refused (the script orders by version)", wrote, err)
	}
	if got, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n", PendingTTL: testPendingTTL}); err != nil || !got.Unverified {
		t.Fatalf("Reserve = unverified %v, %v; want the forged record found", got.Unverified, err)
	}
	if wrote, err := s.putRecord(ctx, settledRecord(k, now, "receipt"), ""); err != nil || !wrote {
		t.Fatalf("Put after the forgery was discarded = wrote %v, %v; want written", wrote, err)
	}
}

// A rotation, as the key file describes it: replicas that list the new key
// first and keep the old one verify what either signed; a replica that no
// longer lists the old key treats the old key's records as absent.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	before := storeWith(t, url, keyring(t, 1))    // the old key alone
	during := storeWith(t, url, keyring(t, 2, 1)) // new key signs, old verifies
	after := storeWith(t, url, keyring(t, 2))     // the old key retired
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()
	oldRec := settledRecord(tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_old"}, now, "old")
	newRec := settledRecord(tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_new"}, now, "new")
	mustPut(t, before, oldRec)
	mustPut(t, during, newRec)
	reserve := func(s *Store, rec tiers.Record) tiers.FastResult {
		t.Helper()
		got, err := s.Reserve(ctx, tiers.ReserveParams{Key: rec.Key, Now: now, Nonce: "n-" + rec.Key.Key, PendingTTL: testPendingTTL})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, tc := range []struct {
		desc string
		s    *Store
		rec  tiers.Record
	}{
		{"old key's record, read during the rotation", during, oldRec},
		{"new key's record, read during the rotation", during, newRec},
		{"new key's record, read after it", after, newRec},
	} {
		if got := reserve(tc.s, tc.rec); got.Outcome != tiers.OutcomeDuplicate || string(got.Record.Result) != string(tc.rec.Result) {
			t.Errorf("%s: Reserve = %v result %q unverified %v, want DUPLICATE %q", tc.desc, got.Outcome, got.Record.Result, got.Unverified, tc.rec.Result)
		}
	}
	if got := reserve(before, newRec); !got.Unverified {
		t.Errorf("a replica without the new key: Reserve(new key's record) = %v, want unverified", got.Outcome)
	}
	if got := reserve(after, oldRec); !got.Unverified {
		t.Errorf("a replica without the old key: Reserve(old key's record) = %v, want unverified", got.Outcome)
	}
}

func mustPut(t *testing.T, s *Store, rec tiers.Record) {
	t.Helper()
	if err := s.Put(testCtx(t), rec); err != nil {
		t.Fatalf("Put(%q) error = %v", rec.Key.Key, err)
	}
}

// forge rewrites the record under key as an attacker who knows the layout
// would: decoded, edited by f, encoded again with the seal it had, and its
// expiry kept.
func forge(ctx context.Context, t *testing.T, raw *goredis.Client, key string, f func(r *tiers.Record)) {
	t.Helper()
	v, err := raw.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	rec, mac, err := DecodeRecord(tiers.Key{}, v)
	if err != nil {
		t.Fatal(err)
	}
	f(&rec)
	if err := raw.Set(ctx, key, EncodeRecord(&rec, mac), goredis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
}
