package twotier_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// The tests of this file hold the composition to two promises, on both
// pairings: every write the durable tier holds reaches the fast tier, even
// when the caller is gone (its repair runs on a context of its own, and a
// repeat that changes nothing repairs too); and an owner retrying with its
// attempt_id is never told IN_PROGRESS by a pending marker.

// flakyFast fails Put and Fill while failPut is set: Redis refusing writes
// (OOM, a failover) right after the durable tier committed. It counts the
// Puts and the Fills.
type flakyFast struct {
	tiers.Fast
	failPut atomic.Bool
	puts    atomic.Int64
	fills   atomic.Int64
}

func (f *flakyFast) Put(ctx context.Context, rec tiers.Record) error {
	f.puts.Add(1)
	if f.failPut.Load() {
		return tiers.Unavailable("test", errors.New("put refused"))
	}
	return f.Fast.Put(ctx, rec)
}

func (f *flakyFast) Fill(ctx context.Context, rec tiers.Record, nonce string) error {
	f.fills.Add(1)
	if f.failPut.Load() {
		return tiers.Unavailable("test", errors.New("fill refused"))
	}
	return f.Fast.Fill(ctx, rec, nonce)
}

// lateDurable runs the function in after (once) when a durable Claim or
// Transition has returned: the caller's deadline passing right after the
// commit, before the composition has repaired the fast tier.
type lateDurable struct {
	tiers.Durable
	after   atomic.Pointer[context.CancelFunc]
	failGet atomic.Bool // Get fails: the durable tier cannot be read
	// lostReply: the next Transition commits, then fails as a deadline
	// that passed after the commit does (its caller never hears of it).
	lostReply atomic.Bool
}

func (d *lateDurable) Get(ctx context.Context, k tiers.Key) (tiers.Record, error) {
	if d.failGet.Load() {
		return tiers.Record{}, tiers.Unavailable("test", errors.New("get refused"))
	}
	return d.Durable.Get(ctx, k)
}

func (d *lateDurable) fire() {
	if f := d.after.Swap(nil); f != nil {
		(*f)()
	}
}

func (d *lateDurable) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	res, err := d.Durable.Claim(ctx, p)
	d.fire()
	return res, err
}

func (d *lateDurable) Transition(ctx context.Context, p tiers.TransitionParams) (tiers.Record, bool, error) {
	rec, changed, err := d.Durable.Transition(ctx, p)
	d.fire()
	if err == nil && d.lostReply.CompareAndSwap(true, false) {
		return tiers.Record{}, false, context.DeadlineExceeded
	}
	return rec, changed, err
}

// backlogWatch is an Observer that follows the backlog of failed repairs.
type backlogWatch struct {
	pending       atomic.Int64
	dropped       atomic.Int64
	durableErrors atomic.Int64
	changed       chan struct{} // capacity 1: the backlog's size was reported
}

func (b *backlogWatch) FastFalseNegative() {}
func (b *backlogWatch) TierError(tier tiers.Tier, _ string, _ error) {
	if tier == tiers.TierDurable {
		b.durableErrors.Add(1)
	}
}
func (b *backlogWatch) FastRepairDropped()    { b.dropped.Add(1) }
func (b *backlogWatch) FastIntegrityFailure() {}
func (b *backlogWatch) FastRepairsPending(n int) {
	b.pending.Store(int64(n))
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// repairWorld is one composition under test, its tiers reachable for setup.
type repairWorld struct {
	t       *testing.T
	store   *twotier.Store
	fast    *flakyFast
	durable *lateDurable
	clk     *clock.Fake
	watch   *backlogWatch
	ns      string
}

// pairings opens a fast and a durable tier for one subtest.
var pairings = []struct {
	name string
	open func(t *testing.T) (tiers.Fast, tiers.Durable)
}{
	{"embedded", func(t *testing.T) (tiers.Fast, tiers.Durable) {
		lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
		if err != nil {
			t.Fatal(err)
		}
		return memory.New(memory.Config{}), lite
	}},
	{"redis+postgres", func(t *testing.T) (tiers.Fast, tiers.Durable) {
		ctx := context.Background()
		pg, err := postgres.New(ctx, postgres.Config{URL: testenv.Postgres(t, postgres.Migrate)})
		if err != nil {
			t.Fatal(err)
		}
		rd, err := redis.New(ctx, redis.Config{URL: testenv.Redis(t)})
		if err != nil {
			pg.Close()
			t.Fatal(err)
		}
		return rd, pg
	}},
}

func runRepair(t *testing.T, test func(t *testing.T, w *repairWorld)) {
	runRepairWith(t, twotier.Config{}, test)
}

// runRepairWith is runRepair over a composition configured by cfg, with no
// local cache (every answer comes from the tier under test) and the retries
// of failed repairs paced by the world's fake clock.
func runRepairWith(t *testing.T, cfg twotier.Config, test func(t *testing.T, w *repairWorld)) {
	for _, pair := range pairings {
		t.Run(pair.name, func(t *testing.T) {
			f, d := pair.open(t)
			b := make([]byte, 6)
			rand.Read(b)
			w := &repairWorld{
				t: t, fast: &flakyFast{Fast: f}, durable: &lateDurable{Durable: d}, clk: clock.NewFake(time.Now()),
				watch: &backlogWatch{changed: make(chan struct{}, 1)}, ns: "t" + hex.EncodeToString(b),
			}
			cfg.LocalEntries, cfg.Clock, cfg.Observer = -1, w.clk, w.watch
			w.store = twotier.New(w.fast, w.durable, cfg)
			t.Cleanup(func() { w.store.Close() })
			test(t, w)
		})
	}
}

func (w *repairWorld) params(k, holder, attempt string) tiers.ClaimParams {
	return tiers.ClaimParams{
		Key: tiers.Key{Namespace: w.ns, Provider: "stripe", Key: k}, Now: w.clk.Now(),
		Lease: time.Minute, TTL: 84 * time.Hour, Holder: holder, AttemptID: attempt,
		Salt: bytes.Repeat([]byte{1}, tiers.SaltBytes), SecretHash: ownerHash,
	}
}

func (w *repairWorld) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	w.t.Cleanup(cancel)
	return ctx
}

func (w *repairWorld) claim(p tiers.ClaimParams) tiers.ClaimResult {
	w.t.Helper()
	res, err := w.store.Claim(w.ctx(), p)
	if err != nil {
		w.t.Fatalf("Claim(%q, holder %s, attempt %q) error = %v", p.Key.Key, p.Holder, p.AttemptID, err)
	}
	return res
}

// wantOwnerAgain checks that the owner's retry with its attempt_id is the
// same ACQUIRED with the same token.
func (w *repairWorld) wantOwnerAgain(k string, first tiers.ClaimResult) {
	w.t.Helper()
	again := w.claim(w.params(k, "pod-a", "att-1"))
	if again.Outcome != tiers.OutcomeAcquired || again.Reason != tiers.ReasonNew || again.Record.Token != first.Record.Token {
		w.t.Fatalf("owner's retry with its attempt_id = %v/%v token %d (served by %v), want ACQUIRED/NEW token %d",
			again.Outcome, again.Reason, again.Record.Token, again.ServedBy, first.Record.Token)
	}
}

func (w *repairWorld) transition(ctx context.Context, k string, token uint64, to tiers.State, result []byte) (bool, error) {
	_, changed, err := w.store.Transition(ctx, tiers.TransitionParams{Key: w.params(k, "", "").Key, Now: w.clk.Now(), Token: token, SecretHash: ownerHash, To: to, Result: result})
	return changed, err
}

// wantFastDuplicate checks that the fast tier itself answers the settled
// record: DUPLICATE with its result, served FAST.
func (w *repairWorld) wantFastDuplicate(k, result string) {
	w.t.Helper()
	dup := w.claim(w.params(k, "pod-b", ""))
	if dup.Outcome != tiers.OutcomeDuplicate || dup.ServedBy != tiers.TierFast || string(dup.Record.Result) != result {
		w.t.Fatalf("Claim(settled %q) by another caller = %v served by %v result %q, want DUPLICATE served by FAST with %q (the fast tier was left behind)",
			k, dup.Outcome, dup.ServedBy, dup.Record.Result, result)
	}
}

// Bug: a lost ACQUIRED reply (the fast tier refused the repair after the
// durable commit) made the owner's retry IN_PROGRESS, answered by its own
// pending marker.
func TestOwnerRetryAfterFailedRepairIsAcquired(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		w.fast.failPut.Store(true)
		first := w.claim(w.params("evt_put", "pod-a", "att-1"))
		if first.Outcome != tiers.OutcomeAcquired {
			t.Fatalf("first Claim = %v, want ACQUIRED", first.Outcome)
		}
		w.fast.failPut.Store(false)
		w.clk.Advance(time.Second)
		w.wantOwnerAgain("evt_put", first)
		if other := w.claim(w.params("evt_put", "pod-b", "")); other.Outcome != tiers.OutcomeInProgress || other.Record.Holder != "pod-a" {
			t.Fatalf("another caller's Claim = %v held by %q, want IN_PROGRESS held by pod-a", other.Outcome, other.Record.Holder)
		}
	})
}

// Bug: the repair ran on the caller's context; when it ended right after the
// durable commit, the marker stayed and the owner's retry was IN_PROGRESS.
func TestOwnerRetryAfterCallerLeftIsAcquired(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w.durable.after.Store(&cancel)
		first, err := w.store.Claim(ctx, w.params("evt_gone", "pod-a", "att-1"))
		if err != nil {
			// The composition may report the caller's context; the claim
			// committed either way.
			rec, err := w.durable.Get(w.ctx(), w.params("evt_gone", "", "").Key)
			if err != nil {
				t.Fatal(err)
			}
			first = tiers.ClaimResult{Outcome: tiers.OutcomeAcquired, Record: rec}
		}
		w.clk.Advance(time.Second)
		w.wantOwnerAgain("evt_gone", first)
	})
}

// Bug: during a durable outage an owner whose claim had committed was told
// IN_PROGRESS by other callers' pending markers. A claim with an attempt_id
// that meets a marker it did not place asks the durable tier.
func TestOwnerRetryPastAnotherPendingMarkerIsAcquired(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		// The owner's claim committed, but the fast tier never heard of it.
		first, err := w.durable.Claim(w.ctx(), w.params("evt_mark", "pod-a", "att-1"))
		if err != nil || first.Outcome != tiers.OutcomeAcquired {
			t.Fatalf("durable Claim = %v, %v", first.Outcome, err)
		}
		// Another delivery of the key is on its way to the durable tier.
		w.clk.Advance(time.Second)
		res, err := w.fast.Reserve(w.ctx(), tiers.ReserveParams{Key: first.Record.Key, Now: w.clk.Now(), Nonce: "someone-else", PendingTTL: 5 * time.Second})
		if err != nil || res.Verdict != tiers.FastReserved {
			t.Fatalf("Reserve(other caller) = %v, %v; want its marker placed", res.Verdict, err)
		}
		w.wantOwnerAgain("evt_mark", tiers.ClaimResult{Record: first.Record})
		if other := w.claim(w.params("evt_mark", "pod-c", "att-9")); other.Outcome != tiers.OutcomeInProgress || other.Record.Holder != "pod-a" {
			t.Fatalf("Claim with another attempt_id = %v held by %q, want IN_PROGRESS held by pod-a", other.Outcome, other.Record.Holder)
		}
	})
}

// Bug: a committed SETTLED whose reply was lost left the fast tier holding
// PROCESSING, and its retry (changed=false) did not repair it: callers
// without a local copy were told IN_PROGRESS for a settled event.
func TestRepeatedSettleRepairsTheFastTier(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		a := w.claim(w.params("evt_settle", "pod-a", "att-1"))
		tok := a.Record.Token
		if _, err := w.transition(w.ctx(), "evt_settle", tok, tiers.StateProcessing, nil); err != nil {
			t.Fatal(err)
		}
		w.fast.failPut.Store(true)
		if changed, err := w.transition(w.ctx(), "evt_settle", tok, tiers.StateSettled, []byte("receipt")); err != nil || !changed {
			t.Fatalf("Transition(→SETTLED) = changed %v, %v; want true", changed, err)
		}
		w.fast.failPut.Store(false)
		if changed, err := w.transition(w.ctx(), "evt_settle", tok, tiers.StateSettled, []byte("receipt")); err != nil || changed {
			t.Fatalf("repeat Transition(→SETTLED) = changed %v, %v; want false", changed, err)
		}
		w.wantFastDuplicate("evt_settle", "receipt")
	})
}

// started claims k for pod-a and moves it to state, which the fast tier
// hears of.
func (w *repairWorld) started(k string, state tiers.State) tiers.Record {
	w.t.Helper()
	a := w.claim(w.params(k, "pod-a", "att-1"))
	if a.Outcome != tiers.OutcomeAcquired {
		w.t.Fatalf("Claim(%q) = %v, want ACQUIRED", k, a.Outcome)
	}
	if _, err := w.transition(w.ctx(), k, a.Record.Token, state, nil); err != nil {
		w.t.Fatal(err)
	}
	return a.Record
}

// endUnheard starts k in VALIDATED, then runs end (the owner's later
// writes, committed by the durable tier) while the fast tier refuses every
// Put: a replica that cannot reach Redis, whose repairs wait in its backlog
// (the fake clock holds their retry back). It checks that the fast tier
// still holds the VALIDATED copy, which answers any other replica, and
// leaves the fast tier refusing.
func (w *repairWorld) endUnheard(k string, end func(ctx context.Context, token uint64) error) tiers.Record {
	w.t.Helper()
	w.fast.failPut.Store(false)
	rec := w.started(k, tiers.StateValidated)
	w.fast.failPut.Store(true)
	if err := end(w.ctx(), rec.Token); err != nil {
		w.t.Fatal(err)
	}
	w.wantStaleCopy(k)
	return rec
}

// wantStaleCopy checks that the fast tier itself, asked directly, still
// answers k IN_PROGRESS held by pod-a: the copy the durable tier has moved
// past.
func (w *repairWorld) wantStaleCopy(k string) {
	w.t.Helper()
	copy, err := w.fast.Reserve(w.ctx(), tiers.ReserveParams{Key: w.params(k, "", "").Key, Now: w.clk.Now(), Nonce: "look-" + k, PendingTTL: time.Second})
	if err != nil || copy.Outcome != tiers.OutcomeInProgress || copy.Record.Holder != "pod-a" {
		w.t.Fatalf("fast tier's copy of %q = %v held by %q, %v; want the stale IN_PROGRESS held by pod-a", k, copy.Outcome, copy.Record.Holder, err)
	}
}

// Bug (make chaos, redis-kill): a SETTLED committed through a replica whose
// Redis client was failing never reached the fast tier until its backlog
// retried it, and meanwhile another replica answered every claim
// IN_PROGRESS from the older copy, after callers of the first had been
// told DUPLICATE. An IN_PROGRESS of the fast tier is confirmed by the
// durable tier, which answers DUPLICATE and repairs the copy.
func TestInProgressCopyOfASettledEventIsDuplicate(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		w.settleRefusedByFast("evt_unheard")
		w.fast.failPut.Store(false)
		dup := w.claim(w.params("evt_unheard", "pod-b", ""))
		if dup.Outcome != tiers.OutcomeDuplicate || dup.ServedBy != tiers.TierDurable || string(dup.Record.Result) != "receipt" {
			t.Fatalf("Claim by another caller = %v served by %v result %q, want DUPLICATE served by DURABLE with %q",
				dup.Outcome, dup.ServedBy, dup.Record.Result, "receipt")
		}
		w.wantFastDuplicate("evt_unheard", "receipt")
	})
}

// The same for a release: the next delivery takes the key over at once
// instead of being told IN_PROGRESS until the released lease would have
// ended.
func TestInProgressCopyOfAReleasedKeyIsTakenOver(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		first := w.endUnheard("evt_let_go", func(ctx context.Context, token uint64) error {
			_, err := w.store.Release(ctx, tiers.ReleaseParams{Key: w.params("evt_let_go", "", "").Key, Now: w.clk.Now(), Token: token, SecretHash: ownerHash})
			return err
		})
		w.fast.failPut.Store(false)
		next := w.claim(w.params("evt_let_go", "pod-b", "att-2"))
		if next.Outcome != tiers.OutcomeAcquired || next.Reason != tiers.ReasonReleased || next.Record.Token != first.Token+1 {
			t.Fatalf("next delivery = %v/%v token %d, want ACQUIRED/RELEASED token %d", next.Outcome, next.Reason, next.Record.Token, first.Token+1)
		}
	})
}

// A copy that is the durable tier's current version is answered as it is,
// served by the fast tier. A copy the durable tier cannot be read to
// confirm is not answered: it may be older than the row (see
// TestUnconfirmedCopyIsNotAnswered); the claim fails UNAVAILABLE, as every
// claim the durable tier cannot decide does. Both pairings, the embedded
// one too: its in-process fast tier misses a write that committed and
// failed, like Redis does.
func TestInProgressCopyIsConfirmed(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		w.started("evt_busy", tiers.StateProcessing)
		other := w.claim(w.params("evt_busy", "pod-b", ""))
		if other.Outcome != tiers.OutcomeInProgress || other.ServedBy != tiers.TierFast || other.Record.Holder != "pod-a" {
			t.Fatalf("Claim of a key in progress = %v served by %v held by %q, want IN_PROGRESS served by FAST held by pod-a",
				other.Outcome, other.ServedBy, other.Record.Holder)
		}
		w.durable.failGet.Store(true)
		defer w.durable.failGet.Store(false)
		if res, err := w.store.Claim(w.ctx(), w.params("evt_busy", "pod-b", "")); !errors.Is(err, tiers.ErrUnavailable) {
			t.Fatalf("Claim with the durable tier unreadable = %v served by %v, %v; want ErrUnavailable", res.Outcome, res.ServedBy, err)
		}
		if n := w.watch.durableErrors.Load(); n != 1 {
			t.Fatalf("durable-tier errors observed = %d, want 1 (the failed confirmation)", n)
		}
	})
}

// Bug: the SETTLED repair ran on the caller's context, so a deadline that
// passed right after the durable commit left the fast tier behind.
func TestSettleRepairOutlivesTheCaller(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		a := w.claim(w.params("evt_late", "pod-a", ""))
		if _, err := w.transition(w.ctx(), "evt_late", a.Record.Token, tiers.StateProcessing, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w.durable.after.Store(&cancel)
		w.transition(ctx, "evt_late", a.Record.Token, tiers.StateSettled, []byte("receipt"))
		w.wantFastDuplicate("evt_late", "receipt")
	})
}

// TestCancelledAtEveryStepConverges cancels each call of a claim's life at
// delays from 0 to 3ms in 75µs steps (before the fast tier, between the
// tiers, after the durable commit) and retries it as a client would. The
// retries get the answers the calls would have had, and once they are done
// the fast tier holds what the durable tier holds: no pending marker, no
// older version.
func TestCancelledAtEveryStepConverges(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		for i := range 41 {
			d := time.Duration(i) * 75 * time.Microsecond
			for _, release := range []bool{false, true} {
				k := fmt.Sprintf("evt_%d_%v", i, release)
				key := w.params(k, "", "").Key
				var got tiers.ClaimResult
				w.cut(d, "Claim", func(ctx context.Context) (err error) {
					got, err = w.store.Claim(ctx, w.params(k, "pod-a", "att-"+k))
					return err
				})
				if got.Outcome != tiers.OutcomeAcquired || got.Record.Token != 1 {
					t.Fatalf("%s: Claim (retried with its attempt_id) = %v token %d, want ACQUIRED token 1", k, got.Outcome, got.Record.Token)
				}
				transition := func(to tiers.State, result []byte) {
					w.cut(d, "Transition →"+to.String(), func(ctx context.Context) error {
						_, err := w.transition(ctx, k, 1, to, result)
						return err
					})
				}
				transition(tiers.StateProcessing, nil)
				w.cut(d, "Renew", func(ctx context.Context) error {
					_, err := w.store.Renew(ctx, tiers.RenewParams{Key: key, Now: w.clk.Now(), Token: 1, SecretHash: ownerHash, Lease: time.Minute})
					return err
				})
				if release {
					w.cut(d, "Release", func(ctx context.Context) error {
						_, err := w.store.Release(ctx, tiers.ReleaseParams{Key: key, Now: w.clk.Now(), Token: 1, SecretHash: ownerHash})
						return err
					})
				} else {
					transition(tiers.StateSettled, []byte("receipt"))
				}

				durable, err := w.durable.Get(w.ctx(), key)
				if err != nil || durable.Token != 1 || durable.Attempt != 1 {
					t.Fatalf("%s: durable record token/attempt = %d/%d, %v; want 1/1", k, durable.Token, durable.Attempt, err)
				}
				fast, err := w.fast.Reserve(w.ctx(), tiers.ReserveParams{Key: key, Now: w.clk.Now(), Nonce: "probe-" + k, PendingTTL: time.Second})
				switch {
				case err != nil:
					t.Fatal(err)
				case release && fast.Verdict != tiers.FastTakeover:
					t.Fatalf("%s: fast tier after a release = verdict %d outcome %v, want the released record (takeover)", k, fast.Verdict, fast.Outcome)
				case !release && (fast.Outcome != tiers.OutcomeDuplicate || fast.Record.Version != durable.Version):
					t.Fatalf("%s: fast tier after settling = verdict %d %v version %d, want DUPLICATE at the durable version %d",
						k, fast.Verdict, fast.Outcome, fast.Record.Version, durable.Version)
				}
			}
		}
	})
}

// cut runs call on a context its client cancels after d, then, if it
// failed, retries it once with time to spare; the retry must succeed.
func (w *repairWorld) cut(d time.Duration, what string, call func(ctx context.Context) error) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(d, cancel)
	err := call(ctx)
	stop.Stop()
	cancel()
	if err == nil {
		return
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, tiers.ErrUnavailable) {
		w.t.Fatalf("%s cut after %v: error = %v, want context.Canceled or ErrUnavailable", what, d, err)
	}
	if err := call(w.ctx()); err != nil {
		w.t.Fatalf("%s retried after a cut at %v: error = %v", what, d, err)
	}
}
