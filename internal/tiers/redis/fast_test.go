package redis

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// TestReserveMarker pins the pending marker reserve.lua leaves when it
// reserves a key (what it answers is the conformance suite's to check,
// against tiers.DecideFast): "p<until>:<nonce>", the instant it lapses and
// the nonce, which expires with it.
func TestReserveMarker(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	s := newStore(t, url)
	raw := rawClient(t, url)
	t0 := clock.NewFake(time.Now()).Now()
	ns := testNS()
	tests := []struct {
		desc   string
		marker string        // nonce of a pending marker placed at t0, or ""
		at     time.Duration // Reserve at t0+at
		nonce  string
	}{
		{desc: "absent", nonce: "n-1"},
		{desc: "our own live marker, placed anew", marker: "n-1", at: time.Second, nonce: "n-1"},
		{desc: "another's marker at its end", marker: "n-other", at: testPendingTTL, nonce: "n-1"},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx := testCtx(t)
			k := tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_" + strconv.Itoa(i)}
			if tc.marker != "" {
				if _, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: t0, Nonce: tc.marker, PendingTTL: testPendingTTL}); err != nil {
					t.Fatalf("Reserve(%q) marker error = %v", k.Key, err)
				}
			}
			now := t0.Add(tc.at)
			got, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: tc.nonce, PendingTTL: testPendingTTL})
			if err != nil || got.Verdict != tiers.FastReserved {
				t.Fatalf("Reserve(%q) = verdict %d, %v; want FastReserved", k.Key, got.Verdict, err)
			}
			key := s.key(k)
			val, err := raw.Get(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := "p" + strconv.FormatInt(now.Add(testPendingTTL).UnixMicro(), 10) + ":" + tc.nonce; val != want {
				t.Fatalf("GET %s after Reserve = %q, want %q", key, val, want)
			}
			if ttl := raw.PTTL(ctx, key).Val(); ttl <= 0 || ttl > testPendingTTL {
				t.Fatalf("PTTL %s = %v, want in (0, %v]", key, ttl, testPendingTTL)
			}
		})
	}
}

// TestPutVersions: a Put lands on an absent key, a pending marker or an older
// version, never on the same or a newer one.
func TestPutVersions(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	s := newStore(t, url)
	raw := rawClient(t, url)
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	k := tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_versions"}

	if _, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n1", PendingTTL: testPendingTTL}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		desc    string
		version uint64
		wrote   bool
		stored  uint64
	}{
		{"replaces the pending marker", 2, true, 2},
		{"older version is refused", 1, false, 2},
		{"same version is refused", 2, false, 2},
		{"newer version lands", 5, true, 5},
		{"older after newer is refused", 4, false, 5},
	}
	base := claimRecord(k, now)
	for _, st := range steps {
		rec := base
		rec.Version = st.version
		rec.Holder = "holder-v" + strconv.FormatUint(st.version, 10)
		wrote, err := s.putRecord(ctx, rec, "")
		if err != nil {
			t.Fatalf("Put(%q v%d) error = %v", k.Key, st.version, err)
		}
		if wrote != st.wrote {
			t.Errorf("%s: Put(%q v%d) wrote = %v, want %v", st.desc, k.Key, st.version, wrote, st.wrote)
		}
		v, err := raw.Get(ctx, s.key(k)).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := DecodeRecord(k, v)
		if err != nil {
			t.Fatalf("%s: GET after Put(v%d) is no record: %v", st.desc, st.version, err)
		}
		if want := "holder-v" + strconv.FormatUint(st.stored, 10); got.Version != st.stored || got.Holder != want {
			t.Errorf("%s: after Put(v%d) Redis holds v%d of %q, want v%d of %q", st.desc, st.version, got.Version, got.Holder, st.stored, want)
		}
	}

	// A record whose window is already over is not kept at all.
	gone := claimRecord(tiers.Key{Namespace: k.Namespace, Provider: "stripe", Key: "evt_gone"}, now.Add(-2*testTTL))
	if _, err := s.putRecord(ctx, gone, ""); err != nil {
		t.Fatal(err)
	}
	if n := raw.Exists(ctx, s.key(gone.Key)).Val(); n != 0 {
		t.Fatalf("EXISTS of a record Put after its window = %d, want 0", n)
	}
}

// TestPutTTL: right after the first claim the key's TTL is the provider's
// ttl (DESIGN §4), here on the real clock.
func TestPutTTL(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	s := newStore(t, url)
	ctx := testCtx(t)
	rec := claimRecord(tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_ttl"}, clock.Real{}.Now())
	if err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	ttl, err := rawClient(t, url).TTL(ctx, s.key(rec.Key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := testTTL - ttl; d < 0 || d > time.Minute {
		t.Fatalf("TTL %s = %v, want within 1m below %v", s.key(rec.Key), ttl, testTTL)
	}
}

// TestRoundTrip: every field of a record reads back as it was Put (of a
// terminal one, every field tiers.TerminalCopy keeps), binary and empty
// values included.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.Redis(t))
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()
	tests := []struct {
		desc    string
		rec     func(r *tiers.Record)
		verdict tiers.FastVerdict
		outcome tiers.Outcome
	}{
		{"settled with binary result", func(r *tiers.Record) {
			r.State, r.Token, r.Version, r.Attempt, r.Reason = tiers.StateSettled, 1<<40, 1<<41, 1<<31, tiers.ReasonWindowExpired
			r.Result = []byte{0, '\r', '\n', 255, 0}
			r.PayloadHash = []byte{0, 0, 0, 0}
			r.Holder = "pod-ü\n{x}:y"
			r.FirstSeenAt = now.Add(-time.Hour + 7*time.Microsecond)
			r.UpdatedAt = now.Add(3 * time.Microsecond)
		}, tiers.FastDecided, tiers.OutcomePayloadMismatch},
		{"released, nothing optional set", func(r *tiers.Record) {
			// Answered PAYLOAD_MISMATCH, which carries the record, where
			// a released record would be taken over.
			r.State, r.Token, r.Version, r.Reason, r.Released = tiers.StateProcessing, 3, 6, tiers.ReasonReleased, true
			r.Holder, r.AttemptID, r.Salt, r.SecretHash, r.Result = "", "", nil, nil, nil
			r.LeaseExpiresAt, r.UpdatedAt = now, now
		}, tiers.FastDecided, tiers.OutcomePayloadMismatch},
		{"validated, live lease", func(r *tiers.Record) {
			r.State, r.Version = tiers.StateValidated, 2
			r.PayloadHash = nil
		}, tiers.FastDecided, tiers.OutcomeInProgress},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			rec := claimRecord(tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt:" + strconv.Itoa(i)}, now)
			tc.rec(&rec)
			if err := s.Put(ctx, rec); err != nil {
				t.Fatal(err)
			}
			res, err := s.Reserve(ctx, tiers.ReserveParams{Key: rec.Key, Now: now, Nonce: "n", PendingTTL: testPendingTTL, PayloadHash: hash("another payload")})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.verdict || res.Outcome != tc.outcome {
				t.Fatalf("Reserve(%q) = verdict %d outcome %v, want verdict %d outcome %v", rec.Key.Key, res.Verdict, res.Outcome, tc.verdict, tc.outcome)
			}
			// A terminal record comes back as much as an answer reads.
			if diff := cmp.Diff(tiers.TerminalCopy(rec), res.Record); diff != "" {
				t.Fatalf("Reserve(%q) record (-put +got):\n%s", rec.Key.Key, diff)
			}
		})
	}
}

// TestAbort: compare-and-delete of our own pending marker only.
func TestAbort(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	s := newStore(t, url)
	raw := rawClient(t, url)
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()
	tests := []struct {
		desc    string
		marker  string // pending marker's nonce, or ""
		record  bool   // a record stands there instead
		nonce   string // Abort's nonce
		deleted bool
	}{
		{desc: "our marker", marker: "n1", nonce: "n1", deleted: true},
		{desc: "another's marker", marker: "n1", nonce: "n2"},
		{desc: "a record", record: true, nonce: "n1"},
		{desc: "a record, empty nonce", record: true, nonce: ""},
		{desc: "absent key", nonce: "n1"},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			k := tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_" + strconv.Itoa(i)}
			switch {
			case tc.marker != "":
				if _, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: tc.marker, PendingTTL: testPendingTTL}); err != nil {
					t.Fatal(err)
				}
			case tc.record:
				if err := s.Put(ctx, claimRecord(k, now)); err != nil {
					t.Fatal(err)
				}
			}
			deleted, err := s.abortMarker(ctx, k, tc.nonce)
			if err != nil {
				t.Fatalf("Abort(%q, %q) error = %v", k.Key, tc.nonce, err)
			}
			if deleted != tc.deleted {
				t.Fatalf("Abort(%q, %q) deleted = %v, want %v", k.Key, tc.nonce, deleted, tc.deleted)
			}
			wantExists := int64(1)
			if tc.deleted || (tc.marker == "" && !tc.record) {
				wantExists = 0
			}
			if n := raw.Exists(ctx, s.key(k)).Val(); n != wantExists {
				t.Fatalf("EXISTS after Abort(%q, %q) = %d, want %d", k.Key, tc.nonce, n, wantExists)
			}
		})
	}
}

// TestKeyLayout pins the key of a record, hash tag included, and the prefix
// option.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	raw := rawClient(t, url)
	ctx := testCtx(t)
	ns := testNS()
	k := tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_1:settled"}
	for _, tc := range []struct {
		desc   string
		prefix string
		want   string
	}{
		{"default prefix", "", "idem:{" + ns + ":stripe:evt_1:settled}"},
		{"own prefix", "claimd-test:", "claimd-test:{" + ns + ":stripe:evt_1:settled}"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := New(ctx, Config{URL: url, KeyPrefix: tc.prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: time.Now(), Nonce: "n", PendingTTL: testPendingTTL}); err != nil {
				t.Fatal(err)
			}
			if n := raw.Exists(ctx, tc.want).Val(); n != 1 {
				t.Fatalf("EXISTS %q after Reserve = %d, want 1", tc.want, n)
			}
		})
	}
}

// TestNoScript: after SCRIPT FLUSH (or a failover to a server that never saw
// the scripts) every step still runs, through EVAL, and caches the script
// again.
func TestNoScript(t *testing.T) {
	// A private server: on the shared one, another test's New could load the
	// scripts again between the flush and the calls, and the fallback would
	// go unexercised.
	srv := testenv.StartRedis(t)
	s := newStore(t, srv.URL())
	raw := rawClient(t, srv.URL())
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	k := tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_noscript"}
	scripts := []string{s.reserve.Hash(), s.put.Hash(), s.abort.Hash()}

	if got := raw.ScriptExists(ctx, scripts...).Val(); !cmp.Equal(got, []bool{true, true, true}) {
		t.Fatalf("SCRIPT EXISTS after New = %v, want all loaded", got)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The second Reserve meets its own marker, which only reserve.lua
	// replaces; a Fill is always put.lua.
	for range 2 {
		res, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n1", PendingTTL: testPendingTTL})
		if err != nil || res.Verdict != tiers.FastReserved {
			t.Fatalf("Reserve(%q) after SCRIPT FLUSH = %+v, %v, want reserved", k.Key, res, err)
		}
	}
	if wrote, err := s.putRecord(ctx, claimRecord(k, now), "n1"); err != nil || !wrote {
		t.Fatalf("Fill(%q) after SCRIPT FLUSH = %v, %v, want written", k.Key, wrote, err)
	}
	k2 := tiers.Key{Namespace: k.Namespace, Provider: k.Provider, Key: "evt_noscript_abort"}
	if _, err := s.Reserve(ctx, tiers.ReserveParams{Key: k2, Now: now, Nonce: "n2", PendingTTL: testPendingTTL}); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.abortMarker(ctx, k2, "n2"); err != nil || !deleted {
		t.Fatalf("Abort(%q) after SCRIPT FLUSH = %v, %v, want deleted", k2.Key, deleted, err)
	}
	if got := raw.ScriptExists(ctx, scripts...).Val(); !cmp.Equal(got, []bool{true, true, true}) {
		t.Fatalf("SCRIPT EXISTS after the fallback = %v, want all cached again", got)
	}
}

// TestEmptyNonce: a marker without a nonce could never be aborted.
func TestEmptyNonce(t *testing.T) {
	t.Parallel()
	s := newStore(t, testenv.Redis(t))
	k := tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt"}
	if _, err := s.Reserve(testCtx(t), tiers.ReserveParams{Key: k, Now: time.Now(), PendingTTL: testPendingTTL}); err == nil {
		t.Fatalf("Reserve(%q) with empty nonce error = nil, want an error", k.Key)
	}
}

// TestOneRoundTrip: each step is one command, never an EVAL or a second
// command, once the scripts are cached: a Reserve one SET (NX GET), a Put
// one SET (PXAT GET), an Abort one EVALSHA.
func TestOneRoundTrip(t *testing.T) {
	srv := testenv.StartRedis(t)
	s := newStore(t, srv.URL())
	raw := rawClient(t, srv.URL())
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	k := tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_trips"}
	if err := s.Ping(ctx); err != nil { // the connection is up before counting
		t.Fatal(err)
	}
	if err := raw.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	steps := 0
	step := func(name string, err error) {
		t.Helper()
		steps++
		if err != nil {
			t.Fatalf("%s(%q) error = %v", name, k.Key, err)
		}
	}
	_, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n1", PendingTTL: testPendingTTL})
	step("Reserve", err)
	step("Abort", s.Abort(ctx, k, "n1"))
	step("Put", s.Put(ctx, claimRecord(k, now)))
	_, err = s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n2", PendingTTL: testPendingTTL})
	step("Reserve", err)

	info, err := raw.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if ok && line != name {
			calls[name], _, _ = strings.Cut(rest, ",")
		}
	}
	// commandstats counts a script's own calls too: Abort's GET and DEL.
	want := map[string]string{"set": "3", "evalsha": "1", "get": "1", "del": "1", "config|resetstat": "1"}
	if steps != 4 || !cmp.Equal(calls, want) {
		t.Fatalf("commands for %d steps: %v, want %v", steps, calls, want)
	}
}
