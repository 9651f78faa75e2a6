package tierstest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
)

// FastFactory makes a fresh fast tier for one subtest.
type FastFactory func(t *testing.T) tiers.Fast

const pendingTTL = 5 * time.Second

type fastEnv struct {
	t   *testing.T
	f   tiers.Fast
	clk *clock.Fake
	e   *env // for ctx and keys
}

func (fe *fastEnv) reserve(k, nonce string, mod ...func(*tiers.ReserveParams)) tiers.FastResult {
	fe.t.Helper()
	p := tiers.ReserveParams{Key: fe.e.key(k), Now: fe.clk.Now(), Nonce: nonce, PendingTTL: pendingTTL}
	for _, m := range mod {
		m(&p)
	}
	res, err := fe.f.Reserve(fe.e.ctx(), p)
	if err != nil {
		fe.t.Fatalf("Reserve(%q) error = %v", k, err)
	}
	return res
}

func (fe *fastEnv) want(k string, res tiers.FastResult, verdict tiers.FastVerdict, outcome tiers.Outcome) {
	fe.t.Helper()
	if res.Verdict != verdict || res.Outcome != outcome {
		fe.t.Fatalf("Reserve(%q) = verdict %d outcome %v, want verdict %d outcome %v", k, res.Verdict, res.Outcome, verdict, outcome)
	}
}

func (fe *fastEnv) put(rec tiers.Record) {
	fe.t.Helper()
	if err := fe.f.Put(fe.e.ctx(), rec); err != nil {
		fe.t.Fatalf("Put(%q v%d) error = %v", rec.Key.Key, rec.Version, err)
	}
}

// record is a claimed record of k as the durable tier would return it.
func (fe *fastEnv) record(k string) tiers.Record {
	return tiers.NewRecord(fe.e.params(k))
}

// RunFast runs the Fast-tier contract cases against the tiers f makes. The
// cases run in parallel, each in a namespace of its own.
func RunFast(t *testing.T, f FastFactory) {
	for _, tc := range fastCases {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			fast := f(t)
			t.Cleanup(func() { fast.Close() })
			clk := clock.NewFake(time.Now())
			e := &env{t: t, clk: clk, ns: "t" + randHex(6)}
			tc.run(t, &fastEnv{t: t, f: fast, clk: clk, e: e})
		})
	}
}

var fastCases = []struct {
	desc string
	run  func(t *testing.T, fe *fastEnv)
}{
	{"absent key is reserved with a pending marker", testFastReserve},
	{"abort deletes only our own pending marker", testFastAbort},
	{"fill replaces only the pending marker it names", testFastFill},
	{"an expired pending marker is replaced", testFastPendingExpiry},
	{"put replaces the pending marker and decides the next reserve", testFastPutDecides},
	{"put never replaces a newer version", testFastVersions},
	{"a later window replaces a higher version of an earlier one", testFastLaterWindow},
	{"record fields round-trip", testFastRoundTrip},
	{"a large result is answered or left to the durable tier", testFastLargeResult},
	{"records that may change hands go to the durable tier", testFastTakeover},
	{"payload mismatch and attempt_id", testFastMismatchAttempt},
	{"a claim meeting another claim's marker asks the durable tier", testFastAskDurable},
	{"64 concurrent reserves of an absent key place one marker", testFastConcurrentReserve},
	{"every entry meets every claim as tiers.DecideFast says", testReserveMatchesDecideFast},
}

func testFastConcurrentReserve(t *testing.T, fe *fastEnv) {
	const n = 64
	results := make([]tiers.FastResult, n)
	errs := make([]error, n)
	p := tiers.ReserveParams{Key: fe.e.key("evt_race"), Now: fe.clk.Now(), PendingTTL: pendingTTL}
	race(n, func(i int) {
		p := p
		p.Nonce = fmt.Sprintf("n%d", i)
		results[i], errs[i] = fe.f.Reserve(fe.e.ctx(), p)
	})
	reserved := 0
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("Reserve #%d error = %v", i, errs[i])
		}
		switch {
		case res.Verdict == tiers.FastReserved:
			reserved++
		case res.Verdict != tiers.FastAskDurable || res.Marker == "":
			t.Errorf("Reserve #%d = verdict %d marker %q, want FastReserved or FastAskDurable naming the marker", i, res.Verdict, res.Marker)
		}
	}
	if reserved != 1 {
		t.Fatalf("%d concurrent Reserves: %d reserved, want exactly 1", n, reserved)
	}
}

func testFastAskDurable(t *testing.T, fe *fastEnv) {
	fe.reserve("k", "n1")
	withAttempt := func(r *tiers.ReserveParams) { r.AttemptID = "att-1" }
	ask := fe.reserve("k", "n2", withAttempt)
	fe.want("k", ask, tiers.FastAskDurable, tiers.OutcomeUnspecified)
	if ask.Marker != "n1" {
		t.Fatalf("Reserve(attempt_id, another's marker).Marker = %q, want n1 (the marker met)", ask.Marker)
	}
	// Without an attempt_id too: a marker never answers a claim itself.
	fe.want("k", fe.reserve("k", "n3"), tiers.FastAskDurable, tiers.OutcomeUnspecified)
	// Our own marker is ours, attempt_id or not.
	fe.want("k", fe.reserve("k", "n1", withAttempt), tiers.FastReserved, tiers.OutcomeUnspecified)
	// Asking placed no marker: once n1's is gone, the key is free.
	if err := fe.f.Abort(fe.e.ctx(), fe.e.key("k"), "n1"); err != nil {
		t.Fatal(err)
	}
	fe.want("k", fe.reserve("k", "n4"), tiers.FastReserved, tiers.OutcomeUnspecified)
	// A record, not a marker, decides as before.
	fe.put(fe.record("r"))
	fe.want("r", fe.reserve("r", "n5", withAttempt), tiers.FastDecided, tiers.OutcomeInProgress)
}

func testFastReserve(t *testing.T, fe *fastEnv) {
	fe.want("k", fe.reserve("k", "n1"), tiers.FastReserved, tiers.OutcomeUnspecified)
	res := fe.reserve("k", "n2")
	fe.want("k", res, tiers.FastAskDurable, tiers.OutcomeUnspecified)
	if res.Marker != "n1" {
		t.Fatalf("Reserve(pending).Marker = %q, want n1", res.Marker)
	}
}

func testFastAbort(t *testing.T, fe *fastEnv) {
	fe.reserve("k", "n1")
	if err := fe.f.Abort(fe.e.ctx(), fe.e.key("k"), "other"); err != nil {
		t.Fatal(err)
	}
	fe.want("k", fe.reserve("k", "n2"), tiers.FastAskDurable, tiers.OutcomeUnspecified)
	if err := fe.f.Abort(fe.e.ctx(), fe.e.key("k"), "n1"); err != nil {
		t.Fatal(err)
	}
	fe.want("k", fe.reserve("k", "n3"), tiers.FastReserved, tiers.OutcomeUnspecified)
	// Abort never deletes a record.
	fe.put(fe.record("k"))
	if err := fe.f.Abort(fe.e.ctx(), fe.e.key("k"), "n3"); err != nil {
		t.Fatal(err)
	}
	fe.want("k", fe.reserve("k", "n4"), tiers.FastDecided, tiers.OutcomeInProgress)
}

func (fe *fastEnv) fill(rec tiers.Record, nonce string) {
	fe.t.Helper()
	if err := fe.f.Fill(fe.e.ctx(), rec, nonce); err != nil {
		fe.t.Fatalf("Fill(%q v%d, %q) error = %v", rec.Key.Key, rec.Version, nonce, err)
	}
}

func testFastFill(t *testing.T, fe *fastEnv) {
	// Over the marker it names, the record stands and decides.
	fe.reserve("k", "n1")
	fe.fill(fe.record("k"), "n1")
	res := fe.reserve("k", "n2")
	fe.want("k", res, tiers.FastDecided, tiers.OutcomeInProgress)
	if res.Record.Token != 1 || res.Record.Holder != "pod-a" {
		t.Fatalf("Reserve(filled) token/holder = %d/%q, want 1/pod-a (the record filled in)", res.Record.Token, res.Record.Holder)
	}
	// Another claim's marker stays.
	fe.reserve("m", "n1")
	fe.fill(fe.record("m"), "other")
	if res := fe.reserve("m", "n2"); res.Verdict != tiers.FastAskDurable || res.Marker != "n1" {
		t.Fatalf("Reserve(marker, filled under another nonce) = verdict %d marker %q, want FastAskDurable naming n1 (the marker stayed)", res.Verdict, res.Marker)
	}
	// An absent key stays absent.
	fe.fill(fe.record("a"), "n1")
	fe.want("a", fe.reserve("a", "n3"), tiers.FastReserved, tiers.OutcomeUnspecified)
	// Once a record was put over the marker, a copy read before it (an
	// older version) fills nothing, and neither does a newer one.
	fe.reserve("s", "n1")
	read := fe.record("s")
	settled := read
	settled.State, settled.Version, settled.Result = tiers.StateSettled, 2, []byte("done")
	fe.put(settled)
	fe.fill(read, "n1")
	newer := settled
	newer.Version = 3
	fe.fill(newer, "n1")
	res = fe.reserve("s", "n4")
	fe.want("s", res, tiers.FastDecided, tiers.OutcomeDuplicate)
	if res.Record.Version != 2 {
		t.Fatalf("Reserve(settled, then filled) version = %d, want 2 (a fill replaces only a marker)", res.Record.Version)
	}
}

func testFastPendingExpiry(t *testing.T, fe *fastEnv) {
	fe.reserve("k", "n1")
	fe.clk.Advance(pendingTTL - time.Millisecond)
	fe.want("k", fe.reserve("k", "n2"), tiers.FastAskDurable, tiers.OutcomeUnspecified)
	fe.clk.Advance(time.Millisecond)
	fe.want("k", fe.reserve("k", "n3"), tiers.FastReserved, tiers.OutcomeUnspecified)
}

func testFastPutDecides(t *testing.T, fe *fastEnv) {
	fe.reserve("k", "n1")
	rec := fe.record("k")
	fe.put(rec)
	res := fe.reserve("k", "n2")
	fe.want("k", res, tiers.FastDecided, tiers.OutcomeInProgress)
	if res.Record.Token != 1 || res.Record.Holder != "pod-a" {
		t.Fatalf("Reserve(held) token/holder = %d/%q, want 1/pod-a", res.Record.Token, res.Record.Holder)
	}
	rec.State, rec.Version, rec.Result = tiers.StateSettled, 2, []byte("done")
	fe.put(rec)
	res = fe.reserve("k", "n3")
	fe.want("k", res, tiers.FastDecided, tiers.OutcomeDuplicate)
	if string(res.Record.Result) != "done" {
		t.Fatalf("Reserve(settled) result = %q, want done", res.Record.Result)
	}
}

func testFastVersions(t *testing.T, fe *fastEnv) {
	rec := fe.record("k")
	settled := rec
	settled.State, settled.Version, settled.Result = tiers.StateSettled, 3, []byte("v3")
	fe.put(settled)
	older := rec
	older.State, older.Version = tiers.StateProcessing, 2
	fe.put(older)
	res := fe.reserve("k", "n1")
	fe.want("k", res, tiers.FastDecided, tiers.OutcomeDuplicate)
	if res.Record.Version != 3 || string(res.Record.Result) != "v3" {
		t.Fatalf("after Put(v2) over v3: version/result = %d/%q, want 3/v3", res.Record.Version, res.Record.Result)
	}
}

func testFastRoundTrip(t *testing.T, fe *fastEnv) {
	p := fe.e.params("k\x1fscope")
	p.PayloadHash = sha("payload")
	p.AttemptID = "att"
	rec := tiers.NewRecord(p)
	rec.State, rec.Token, rec.Version, rec.Attempt, rec.Reason = tiers.StateSettled, 7, 9, 4, tiers.ReasonLeaseExpired
	rec.Result = []byte{0, 1, 2, 255}
	rec.UpdatedAt = rec.UpdatedAt.Add(time.Minute)
	fe.put(rec)
	res := fe.reserve("k\x1fscope", "n1")
	fe.want("k\x1fscope", res, tiers.FastDecided, tiers.OutcomeDuplicate)
	// Of a terminal record, a tier may keep only what an answer reads.
	if diff := cmp.Diff(tiers.TerminalCopy(rec), tiers.TerminalCopy(res.Record)); diff != "" {
		t.Fatalf("record round trip (-put +reserved):\n%s", diff)
	}
	// A record in progress comes back whole (its owner's retry needs all of
	// it), answered here as a payload mismatch, which carries it.
	p = fe.e.params("k2")
	p.PayloadHash, p.AttemptID = sha("payload"), "att"
	live := tiers.NewRecord(p)
	live.State, live.Token, live.Version, live.Attempt, live.Reason = tiers.StateProcessing, 7, 9, 4, tiers.ReasonLeaseExpired
	live.UpdatedAt = live.UpdatedAt.Add(time.Minute)
	fe.put(live)
	res = fe.reserve("k2", "n1", func(r *tiers.ReserveParams) { r.PayloadHash = sha("other") })
	fe.want("k2", res, tiers.FastDecided, tiers.OutcomePayloadMismatch)
	if diff := cmp.Diff(live, res.Record); diff != "" {
		t.Fatalf("record in progress round trip (-put +reserved):\n%s", diff)
	}
}

// testFastLargeResult: a settled record's result comes back, or the answer
// says that the durable tier holds it (ResultInDurable, no result), for a
// result of any size; a small one comes back inline.
func testFastLargeResult(t *testing.T, fe *fastEnv) {
	for _, size := range []int{16, 4096, 64 << 10} {
		k := fmt.Sprintf("k%d", size)
		rec := fe.record(k)
		rec.State, rec.Version, rec.Result = tiers.StateSettled, 3, bytes.Repeat([]byte{'r'}, size)
		rec.PayloadHash = sha("payload")
		fe.put(rec)
		res := fe.reserve(k, "n1")
		fe.want(k, res, tiers.FastDecided, tiers.OutcomeDuplicate)
		switch {
		case res.ResultInDurable && size <= 16:
			t.Fatalf("Reserve(settled, %d-byte result) = ResultInDurable; a result that small comes back inline", size)
		case res.ResultInDurable && res.Record.Result != nil:
			t.Fatalf("Reserve(settled, %d-byte result) = ResultInDurable with a result of %d bytes, want none", size, len(res.Record.Result))
		case !res.ResultInDurable && !bytes.Equal(res.Record.Result, rec.Result):
			t.Fatalf("Reserve(settled, %d-byte result) = a result of %d bytes, want the one put", size, len(res.Record.Result))
		}
		// A mismatch is answered from the record too, and says the same.
		mis := fe.reserve(k, "n1", func(r *tiers.ReserveParams) { r.PayloadHash = sha("other") })
		fe.want(k, mis, tiers.FastDecided, tiers.OutcomePayloadMismatch)
		if mis.ResultInDurable != res.ResultInDurable {
			t.Fatalf("Reserve(settled, %d-byte result, other payload).ResultInDurable = %v, want %v as for the duplicate", size, mis.ResultInDurable, res.ResultInDurable)
		}
	}
}

func testFastTakeover(t *testing.T, fe *fastEnv) {
	released := fe.record("released")
	released.Released, released.Version = true, 2
	fe.put(released)
	fe.want("released", fe.reserve("released", "n"), tiers.FastTakeover, tiers.OutcomeUnspecified)

	fe.put(fe.record("lease"))
	settled := fe.record("window")
	settled.State, settled.Version = tiers.StateSettled, 2
	fe.put(settled)

	fe.clk.Advance(lease - time.Millisecond)
	fe.want("lease", fe.reserve("lease", "n"), tiers.FastDecided, tiers.OutcomeInProgress)
	fe.clk.Advance(time.Millisecond)
	fe.want("lease", fe.reserve("lease", "n"), tiers.FastTakeover, tiers.OutcomeUnspecified)

	fe.clk.Advance(stripeTTL - lease - time.Second)
	fe.want("window", fe.reserve("window", "n"), tiers.FastDecided, tiers.OutcomeDuplicate)
	fe.clk.Advance(time.Second)
	fe.want("window", fe.reserve("window", "n"), tiers.FastTakeover, tiers.OutcomeUnspecified)
}

func testFastMismatchAttempt(t *testing.T, fe *fastEnv) {
	p := fe.e.params("k")
	p.PayloadHash = sha("one")
	p.AttemptID = "att-1"
	fe.put(tiers.NewRecord(p))
	fe.want("k", fe.reserve("k", "n", func(r *tiers.ReserveParams) { r.PayloadHash = sha("two") }), tiers.FastDecided, tiers.OutcomePayloadMismatch)
	res := fe.reserve("k", "n", func(r *tiers.ReserveParams) { r.AttemptID = "att-1" })
	fe.want("k", res, tiers.FastDecided, tiers.OutcomeAcquired)
	if res.Reason != tiers.ReasonNew || res.Record.Token != 1 {
		t.Fatalf("Reserve(same attempt) reason/token = %v/%d, want NEW/1", res.Reason, res.Record.Token)
	}
	// The owner's salt and secret hash come back, so the service can give
	// the retrying owner the same lease secret.
	if !bytes.Equal(res.Record.Salt, p.Salt) || !bytes.Equal(res.Record.SecretHash, p.SecretHash) {
		t.Fatalf("Reserve(same attempt) salt/secret hash = %x/%x, want the owner's %x/%x", res.Record.Salt, res.Record.SecretHash, p.Salt, p.SecretHash)
	}
	fe.want("k", fe.reserve("k", "n", func(r *tiers.ReserveParams) { r.AttemptID = "att-2" }), tiers.FastDecided, tiers.OutcomeInProgress)
}

func testFastLaterWindow(t *testing.T, fe *fastEnv) {
	old := fe.record("k")
	old.State, old.Version, old.Token = tiers.StateSettled, 5, 3
	fe.put(old)
	// The old record was pruned after its window; the key is claimed anew.
	fe.clk.Advance(stripeTTL + time.Hour)
	fresh := fe.record("k")
	fe.put(fresh)
	res := fe.reserve("k", "n1")
	fe.want("k", res, tiers.FastDecided, tiers.OutcomeInProgress)
	if res.Record.Version != 1 || res.Record.Token != 1 {
		t.Fatalf("after Put of a new window: version/token = %d/%d, want 1/1", res.Record.Version, res.Record.Token)
	}
}
