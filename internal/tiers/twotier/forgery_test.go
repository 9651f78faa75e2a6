package twotier_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/seal"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// Issue 34, item 2: whoever can write to Redis cannot make claimd answer
// from a record claimd did not write. Each case forges a record in the
// production pairing's Redis the way an attacker with write access could,
// then claims the key: the answer is the durable tier's, the forgery is
// counted once, and the durable tier's answer has replaced it (the next
// claim finds a sealed record and counts nothing).

type forgeWorld struct {
	t     *testing.T
	store *twotier.Store
	obs   *counter
	raw   *goredis.Client
	url   string
	ns    string
	now   time.Time
}

func newForgeWorld(t *testing.T) *forgeWorld {
	url := testenv.Redis(t)
	w := &forgeWorld{t: t, obs: &counter{}, url: url, now: time.Now().UTC()}
	w.store = openPair(t, url, testenv.Postgres(t, postgres.Migrate), twotier.Config{LocalEntries: -1, Observer: w.obs})
	t.Cleanup(func() { w.store.Close() })
	opts, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	w.raw = goredis.NewClient(opts)
	t.Cleanup(func() { w.raw.Close() })
	b := make([]byte, 6)
	rand.Read(b)
	w.ns = "f" + hex.EncodeToString(b)
	return w
}

func (w *forgeWorld) key(k string) tiers.Key {
	return tiers.Key{Namespace: w.ns, Provider: "stripe", Key: k}
}

func (w *forgeWorld) redisKey(k string) string {
	return redis.DefaultKeyPrefix + "{" + w.key(k).String() + "}"
}

func (w *forgeWorld) params(k, holder, attempt string) tiers.ClaimParams {
	return tiers.ClaimParams{
		Key: w.key(k), Now: w.now, Lease: time.Minute, TTL: 84 * time.Hour, Holder: holder, AttemptID: attempt,
		Salt: bytes.Repeat([]byte{1}, tiers.SaltBytes), SecretHash: ownerHash,
	}
}

func (w *forgeWorld) claim(k, holder, attempt string) tiers.ClaimResult {
	w.t.Helper()
	res, err := w.store.Claim(context.Background(), w.params(k, holder, attempt))
	if err != nil {
		w.t.Fatalf("Claim(%q, %s) error = %v", k, holder, err)
	}
	return res
}

func (w *forgeWorld) transition(k string, to tiers.State, result string) {
	w.t.Helper()
	p := tiers.TransitionParams{Key: w.key(k), Now: w.now, Token: 1, SecretHash: ownerHash, To: to}
	if result != "" {
		p.Result = []byte(result)
	}
	if _, _, err := w.store.Transition(context.Background(), p); err != nil {
		w.t.Fatalf("Transition(%q →%v) error = %v", k, to, err)
	}
}

// inProgress claims k for pod-a and moves it to PROCESSING: the fast tier
// holds the sealed record.
func (w *forgeWorld) inProgress(k string) {
	w.t.Helper()
	if res := w.claim(k, "pod-a", "att-a"); res.Outcome != tiers.OutcomeAcquired {
		w.t.Fatalf("Claim(%q) = %v, want ACQUIRED", k, res.Outcome)
	}
	w.transition(k, tiers.StateProcessing, "")
}

func (w *forgeWorld) settled(k, result string) {
	w.t.Helper()
	w.inProgress(k)
	w.transition(k, tiers.StateSettled, result)
}

// edit rewrites k's record in Redis as an attacker who knows the layout
// would: decoded, changed by f, encoded again with the seal it had.
func (w *forgeWorld) edit(k string, f func(r *tiers.Record)) {
	w.t.Helper()
	ctx := context.Background()
	v, err := w.raw.Get(ctx, w.redisKey(k)).Bytes()
	if err != nil {
		w.t.Fatal(err)
	}
	rec, mac, err := redis.DecodeRecord(w.key(k), v)
	if err != nil {
		w.t.Fatal(err)
	}
	f(&rec)
	if err := w.raw.Set(ctx, w.redisKey(k), redis.EncodeRecord(&rec, mac), goredis.KeepTTL).Err(); err != nil {
		w.t.Fatal(err)
	}
}

func TestForgedFastRecordsAnswerNothing(t *testing.T) {
	w := newForgeWorld(t)
	stranger, err := redis.New(context.Background(), redis.Config{URL: w.url, Keyring: seal.Random()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Close() })

	type answer struct {
		outcome tiers.Outcome
		holder  string
		token   uint64 // for ACQUIRED
		result  string // for DUPLICATE
	}
	tests := []struct {
		desc    string
		k       string
		forge   func(k string)
		claimer [2]string // holder, attempt
		want    answer
	}{
		{
			desc: "a settled record copied onto a key never claimed",
			k:    "evt_never",
			forge: func(k string) {
				w.settled("evt_src", "receipt")
				v := w.raw.Get(context.Background(), w.redisKey("evt_src")).Val()
				if err := w.raw.Set(context.Background(), w.redisKey(k), v, 0).Err(); err != nil {
					t.Fatal(err)
				}
			},
			claimer: [2]string{"pod-b", "att-b"},
			want:    answer{outcome: tiers.OutcomeAcquired, holder: "pod-b", token: 1},
		},
		{
			desc: "a record in progress edited to SETTLED with a result",
			k:    "evt_edit_state",
			forge: func(k string) {
				w.inProgress(k)
				w.edit(k, func(r *tiers.Record) { r.State, r.Result = tiers.StateSettled, []byte("forged") })
			},
			claimer: [2]string{"pod-b", ""},
			want:    answer{outcome: tiers.OutcomeInProgress, holder: "pod-a"},
		},
		{
			desc: "a record in progress with its token and holder edited",
			k:    "evt_edit_token",
			forge: func(k string) {
				w.inProgress(k)
				w.edit(k, func(r *tiers.Record) { r.Token, r.Holder = 9, "mallory" })
			},
			claimer: [2]string{"pod-a", "att-a"}, // the owner's retry
			want:    answer{outcome: tiers.OutcomeAcquired, holder: "pod-a", token: 1},
		},
		{
			desc: "a settled record with its result edited",
			k:    "evt_edit_result",
			forge: func(k string) {
				w.settled(k, "receipt")
				w.edit(k, func(r *tiers.Record) { r.Result = []byte("forged") })
			},
			claimer: [2]string{"pod-b", ""},
			want:    answer{outcome: tiers.OutcomeDuplicate, holder: "pod-a", result: "receipt"},
		},
		{
			desc: "a settled record sealed with a key the server does not hold",
			k:    "evt_stranger",
			forge: func(k string) {
				rec := tiers.NewRecord(w.params(k, "mallory", ""))
				rec.State, rec.Version, rec.Result = tiers.StateSettled, 3, []byte("forged")
				if err := stranger.Put(context.Background(), rec); err != nil {
					t.Fatal(err)
				}
			},
			claimer: [2]string{"pod-b", "att-b"},
			want:    answer{outcome: tiers.OutcomeAcquired, holder: "pod-b", token: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			w.t = t
			tc.forge(tc.k)
			before := w.obs.integrity.Load()
			res := w.claim(tc.k, tc.claimer[0], tc.claimer[1])
			got := answer{outcome: res.Outcome, holder: res.Record.Holder}
			if res.Outcome == tiers.OutcomeAcquired {
				got.token = res.Record.Token
			}
			if res.Outcome == tiers.OutcomeDuplicate {
				got.result = string(res.Record.Result)
			}
			if got != tc.want || res.ServedBy != tiers.TierDurable {
				t.Fatalf("Claim(forged %q) = %+v served by %v, want %+v served by DURABLE", tc.k, got, res.ServedBy, tc.want)
			}
			if n := w.obs.integrity.Load() - before; n != 1 {
				t.Fatalf("integrity failures counted = %d, want 1", n)
			}
			// Repaired from the durable answer: the next claim is answered
			// by the fast tier from a record claimd sealed, and counts
			// nothing.
			next := w.claim(tc.k, "pod-c", "")
			if next.Outcome == tiers.OutcomeAcquired || next.ServedBy != tiers.TierFast || w.obs.integrity.Load()-before != 1 {
				t.Fatalf("next Claim(%q) = %v served by %v, integrity failures %d; want the repaired record's answer served by FAST and no new failure",
					tc.k, next.Outcome, next.ServedBy, w.obs.integrity.Load()-before)
			}
		})
	}
}

// A rolling upgrade: a claimd of the hash layout (0.1, and builds before
// issue 36) left a settled record in Redis. The new claimd does not read
// it; it treats the key as absent, the durable tier decides (the record's
// DUPLICATE, with its result), and the key then holds the new layout, which
// answers the next claim. An old claimd that meets the new layout gets a
// WRONGTYPE error from Redis, which it treats as a fast tier that failed:
// it asks the durable tier too. Either way PostgreSQL decides.
func TestOldLayoutIsAMiss(t *testing.T) {
	w := newForgeWorld(t)
	ctx := context.Background()
	w.settled("evt_old", "receipt")
	old := []any{"state", "SETTLED", "token", "1", "version", "3", "attempt", "1", "reason", "NEW", "released", "0",
		"holder", "pod-a", "attempt_id", "", "payload", "", "result", "stale", "first_seen", "0", "lease", "0",
		"window", "99999999999999999", "updated", "0", "owner", "", "mac", "0123456789abcdef"}
	if err := w.raw.Del(ctx, w.redisKey("evt_old")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.raw.HSet(ctx, w.redisKey("evt_old"), old...).Err(); err != nil {
		t.Fatal(err)
	}
	res := w.claim("evt_old", "pod-b", "")
	if res.Outcome != tiers.OutcomeDuplicate || string(res.Record.Result) != "receipt" || res.ServedBy != tiers.TierDurable {
		t.Fatalf("Claim(an old-layout record) = %v result %q served by %v, want DUPLICATE receipt served by DURABLE", res.Outcome, res.Record.Result, res.ServedBy)
	}
	if typ := w.raw.Type(ctx, w.redisKey("evt_old")).Val(); typ != "string" {
		t.Fatalf("TYPE of the key after the claim = %s, want string (the new layout)", typ)
	}
	next := w.claim("evt_old", "pod-c", "")
	if next.Outcome != tiers.OutcomeDuplicate || string(next.Record.Result) != "receipt" || next.ServedBy != tiers.TierFast {
		t.Fatalf("next Claim = %v result %q served by %v, want DUPLICATE receipt served by FAST", next.Outcome, next.Record.Result, next.ServedBy)
	}
}
