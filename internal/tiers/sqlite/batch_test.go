package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// pause swaps s's committer for one that is not started yet, so that a test
// can queue writes and then let exactly one committer take them: the batch
// a test builds is the batch that runs. Records set up before pause commit
// as usual.
func pause(s *Store) {
	s.commit.queue.Close()
	s.commit = newCommitter(s, defaultMaxBatch)
}

// call is one write running against a paused store.
type call struct {
	desc    string
	cancel  context.CancelFunc
	done    chan struct{}
	claim   tiers.ClaimResult // of a Claim
	rec     tiers.Record      // of a Transition
	changed bool
	err     error
}

// goCall starts fn on its own goroutine with a context of its own.
func goCall(t *testing.T, desc string, fn func(ctx context.Context, c *call)) *call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	c := &call{desc: desc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		fn(ctx, c)
	}()
	return c
}

func goClaim(t *testing.T, s *Store, desc string, p tiers.ClaimParams) *call {
	return goCall(t, desc, func(ctx context.Context, c *call) { c.claim, c.err = s.Claim(ctx, p) })
}

func goTransition(t *testing.T, s *Store, desc string, p tiers.TransitionParams) *call {
	return goCall(t, desc, func(ctx context.Context, c *call) { c.rec, c.changed, c.err = s.Transition(ctx, p) })
}

// waitQueued returns once n writes wait in s's paused committer.
func waitQueued(s *Store, n int) {
	for s.commit.queue.Len() < n {
		runtime.Gosched() // the callers are about to enqueue; nothing else to wait on
	}
}

// resume starts the committer and waits for every call's answer.
func resume(s *Store, calls ...*call) {
	s.commit.start()
	for _, c := range calls {
		<-c.done
	}
}

func countRows(t *testing.T, s *Store, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.r.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestBatchOneTransaction puts writes of every kind into one batch: one
// transaction commits them all, and each caller gets the answer its write
// would get alone, after the writes queued before it (NEW for absent keys,
// the record's answer for stored ones, IN_PROGRESS for a key's second claim,
// the state machine's for transitions, refusals included).
func TestBatchOneTransaction(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	settled := mustClaim(t, s, claimAt("evt_settled", t0))
	mustTransition(t, s, "evt_settled", settled.Record.Token, t0, tiers.StateProcessing, nil)
	mustTransition(t, s, "evt_settled", settled.Record.Token, t0, tiers.StateSettled, []byte("ok"))
	mustClaim(t, s, claimAt("evt_live", t0))
	mustClaim(t, s, claimAt("evt_expired", t0.Add(-2*lease)))
	mustClaim(t, s, claimAt("evt_move", t0))
	withPayload := claimAt("evt_payload", t0)
	withPayload.PayloadHash = make([]byte, 32)
	mustClaim(t, s, withPayload)
	pause(s)

	type want struct {
		outcome tiers.Outcome
		reason  tiers.Reason
		token   uint64
	}
	mismatch := claimAt("evt_payload", t0)
	mismatch.PayloadHash = append(make([]byte, 31), 1)
	claims := []struct {
		desc string
		p    tiers.ClaimParams
		want []want // acceptable answers (either order for a key claimed twice)
	}{
		{"absent key", claimAt("evt_new_1", t0), []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}}},
		{"another absent key", claimAt("evt_new_2", t0), []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}}},
		{"absent key claimed twice (1)", claimAt("evt_twice", t0), []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}, {tiers.OutcomeInProgress, 0, 1}}},
		{"absent key claimed twice (2)", claimAt("evt_twice", t0), []want{{tiers.OutcomeAcquired, tiers.ReasonNew, 1}, {tiers.OutcomeInProgress, 0, 1}}},
		{"settled key", claimAt("evt_settled", t0), []want{{tiers.OutcomeDuplicate, 0, 1}}},
		{"live lease", claimAt("evt_live", t0), []want{{tiers.OutcomeInProgress, 0, 1}}},
		{"lease over", claimAt("evt_expired", t0), []want{{tiers.OutcomeAcquired, tiers.ReasonLeaseExpired, 2}}},
		{"payload differs", mismatch, []want{{tiers.OutcomePayloadMismatch, 0, 1}}},
	}
	var calls []*call
	for _, c := range claims {
		calls = append(calls, goClaim(t, s, c.desc, c.p))
	}
	moved := goTransition(t, s, "transition", tiers.TransitionParams{Key: key("evt_move"), Now: t0, Token: 1, SecretHash: ownerHash, To: tiers.StateProcessing})
	stale := goTransition(t, s, "stale transition", tiers.TransitionParams{Key: key("evt_live"), Now: t0, Token: 7, SecretHash: ownerHash, To: tiers.StateProcessing})
	all := append(calls, moved, stale)
	waitQueued(s, len(all))
	resume(s, all...)

	if n := s.commit.batches.Load(); n != 1 {
		t.Errorf("transactions = %d, want 1 for %d writes queued together", n, len(all))
	}
	if n := s.commit.committed.Load(); n != int64(len(all)) {
		t.Errorf("writes committed = %d, want %d (a refused transition commits its audit row)", n, len(all))
	}
	twice := map[want]int{}
	for i, c := range claims {
		got := calls[i]
		if got.err != nil {
			t.Errorf("%s: Claim(%q) error = %v", c.desc, c.p.Key.Key, got.err)
			continue
		}
		g := want{got.claim.Outcome, got.claim.Reason, got.claim.Record.Token}
		ok := false
		for _, w := range c.want {
			ok = ok || w == g
		}
		if !ok {
			t.Errorf("%s: Claim(%q) = %v/%v token %d, want one of %+v", c.desc, c.p.Key.Key, g.outcome, g.reason, g.token, c.want)
		}
		if c.p.Key.Key == "evt_twice" {
			twice[g]++
		}
		if got.claim.Outcome == tiers.OutcomeAcquired && got.claim.Reason == tiers.ReasonNew {
			stored, err := s.Get(ctx, c.p.Key)
			if err != nil {
				t.Fatalf("Get(%q) error = %v", c.p.Key.Key, err)
			}
			if diff := cmp.Diff(stored, got.claim.Record); diff != "" {
				t.Errorf("%s: Claim(%q) record (-stored +answered):\n%s", c.desc, c.p.Key.Key, diff)
			}
		}
	}
	if len(twice) != 2 {
		t.Errorf("Claims of evt_twice = %v, want one ACQUIRED and one IN_PROGRESS", twice)
	}
	if moved.err != nil || !moved.changed || moved.rec.State != tiers.StateProcessing {
		t.Errorf("Transition(evt_move, →PROCESSING) = %v changed %v, %v; want PROCESSING, changed", moved.rec.State, moved.changed, moved.err)
	}
	if !errors.Is(stale.err, tiers.ErrStaleToken) {
		t.Errorf("Transition(evt_live, token 7) error = %v, want ErrStaleToken", stale.err)
	}
	// Every write's audit row committed with it: seven set-up rows, and one
	// per write of the batch but the stale Transition, which changed nothing
	// and so is not audited.
	if n := countRows(t, s, `SELECT count(*) FROM audit_log`); n != 7+len(all)-1 {
		t.Errorf("audit rows = %d, want %d", n, 7+len(all)-1)
	}
}

// TestBatchFailedWriteAlone: a write whose statements fail is rolled back to
// its savepoint and answered with its error; the writes before and after it
// in the same transaction commit.
func TestBatchFailedWriteAlone(t *testing.T) {
	s := newStore(t, tempPath(t))
	pause(s)
	before := goClaim(t, s, "before", claimAt("evt_before", t0))
	waitQueued(s, 1)
	bad := goCall(t, "bad", func(ctx context.Context, c *call) {
		c.err = s.write(ctx, "bad", func(t *txn) error {
			rec := canonical(tiers.NewRecord(claimAt("evt_bad", t0)))
			if err := t.put(&rec, ""); err != nil {
				return err
			}
			// audit_log.op allows only the four operations.
			_, err := t.tx.ExecContext(t.ctx, insertAudit, (&auditRow{at: t0, key: key("evt_bad"), op: "bogus"}).args()...)
			return err
		})
	})
	waitQueued(s, 2)
	after := goClaim(t, s, "after", claimAt("evt_after", t0))
	waitQueued(s, 3)
	resume(s, before, bad, after)

	if bad.err == nil {
		t.Fatal("write violating a CHECK constraint: error = nil, want it")
	}
	if errors.Is(bad.err, tiers.ErrUnavailable) {
		t.Errorf("write violating a CHECK constraint: error = %v, want a plain error, not ErrUnavailable", bad.err)
	}
	for _, c := range []*call{before, after} {
		if c.err != nil || c.claim.Outcome != tiers.OutcomeAcquired {
			t.Errorf("Claim %s the failed write = %v, %v; want ACQUIRED", c.desc, c.claim.Outcome, c.err)
		}
	}
	if n := s.commit.batches.Load(); n != 1 {
		t.Errorf("transactions = %d, want 1", n)
	}
	ctx := context.Background()
	if _, err := s.Get(ctx, key("evt_bad")); !errors.Is(err, tiers.ErrNotFound) {
		t.Errorf("Get(evt_bad) error = %v, want ErrNotFound: its put was rolled back with it", err)
	}
	for _, k := range []string{"evt_before", "evt_after"} {
		if _, err := s.Get(ctx, key(k)); err != nil {
			t.Errorf("Get(%q) error = %v, want the committed record", k, err)
		}
	}
}

// TestBatchCallerLeaves: a caller whose context ends while its write waits
// in the queue gets its context's error and nothing is written for it; the
// others in the batch are not disturbed.
func TestBatchCallerLeaves(t *testing.T) {
	s := newStore(t, tempPath(t))
	pause(s)
	var calls []*call
	for i, k := range []string{"evt_stays_1", "evt_leaves", "evt_stays_2"} {
		calls = append(calls, goClaim(t, s, k, claimAt(k, t0)))
		waitQueued(s, i+1)
	}
	calls[1].cancel()
	<-calls[1].done // gone before the committer starts
	resume(s, calls...)

	if !errors.Is(calls[1].err, context.Canceled) {
		t.Errorf("Claim(evt_leaves) after its caller left error = %v, want context.Canceled", calls[1].err)
	}
	if _, err := s.Get(context.Background(), key("evt_leaves")); !errors.Is(err, tiers.ErrNotFound) {
		t.Errorf("Get(evt_leaves) error = %v, want ErrNotFound: nothing is written for a caller that left", err)
	}
	for _, i := range []int{0, 2} {
		if calls[i].err != nil || calls[i].claim.Outcome != tiers.OutcomeAcquired {
			t.Errorf("Claim(%q) = %v, %v; want ACQUIRED", calls[i].desc, calls[i].claim.Outcome, calls[i].err)
		}
	}
}

// TestBatchCallerLeavesMidWrite: a caller whose context ends after its write
// ran is not waited for, and its write commits with the batch (the
// ambiguity write documents): it hears its context's error or, if the
// COMMIT won the race, its answer.
func TestBatchCallerLeavesMidWrite(t *testing.T) {
	s := newStore(t, tempPath(t))
	pause(s)
	leaving := goCall(t, "leaving", func(ctx context.Context, c *call) {
		c.err = s.write(ctx, "claim", func(t *txn) error {
			c.cancel() // the caller gives up while its write runs
			rec := canonical(tiers.NewRecord(claimAt("evt_left", t0)))
			return t.put(&rec, "")
		})
	})
	waitQueued(s, 1)
	other := goClaim(t, s, "other", claimAt("evt_other", t0))
	waitQueued(s, 2)
	resume(s, leaving, other)
	s.commit.queue.Close() // the batch has committed once the committer is done

	if leaving.err != nil && !errors.Is(leaving.err, context.Canceled) {
		t.Errorf("write whose caller left mid-write: error = %v, want context.Canceled or nil", leaving.err)
	}
	if _, err := s.Get(context.Background(), key("evt_left")); err != nil {
		t.Errorf("Get(evt_left) error = %v, want the record: a write that ran commits with its batch", err)
	}
	if other.err != nil || other.claim.Outcome != tiers.OutcomeAcquired {
		t.Errorf("Claim(evt_other) = %v, %v; want ACQUIRED", other.claim.Outcome, other.err)
	}
}

// TestBatchLockedFile: when BEGIN cannot take the write lock (another
// process holds it past the busy timeout), every caller in the batch gets an
// error wrapping tiers.ErrUnavailable and nothing is written.
func TestBatchLockedFile(t *testing.T) {
	path := tempPath(t)
	s, err := New(context.Background(), Config{Path: path, BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	pause(s)
	other, err := sql.Open("sqlite", dsn(path, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var calls []*call
	for i := range 3 {
		k := fmt.Sprintf("evt_locked_%d", i)
		calls = append(calls, goClaim(t, s, k, claimAt(k, t0)))
	}
	waitQueued(s, len(calls))
	resume(s, calls...)
	for _, c := range calls {
		if !errors.Is(c.err, tiers.ErrUnavailable) {
			t.Errorf("Claim(%q) with the file locked: error = %v, want ErrUnavailable", c.desc, c.err)
		}
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM claims`); n != 0 {
		t.Errorf("claims rows after a batch that could not begin = %d, want 0", n)
	}
}

// TestBatchesFormUnderLoad: with many concurrent callers, writes wait behind
// the COMMIT in flight and go out together, and every caller still gets its
// own exact answers: ACQUIRED for its new key, its transitions applied, and
// DUPLICATE once it settled.
func TestBatchesFormUnderLoad(t *testing.T) {
	s := newStore(t, tempPath(t))
	const callers, each = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			ctx := context.Background()
			for i := range each {
				k := fmt.Sprintf("evt_load_%d_%d", c, i)
				err := func() error {
					res, err := s.Claim(ctx, claimAt(k, t0))
					if err != nil || res.Outcome != tiers.OutcomeAcquired || res.Record.Token != 1 {
						return fmt.Errorf("Claim(%q) = %v token %d, %v; want ACQUIRED token 1", k, res.Outcome, res.Record.Token, err)
					}
					for _, to := range []tiers.State{tiers.StateProcessing, tiers.StateSettled} {
						rec, changed, err := s.Transition(ctx, tiers.TransitionParams{Key: key(k), Now: t0, Token: 1, SecretHash: ownerHash, To: to, Result: []byte(k)})
						if err != nil || !changed || rec.State != to {
							return fmt.Errorf("Transition(%q, →%v) = %v changed %v, %v", k, to, rec.State, changed, err)
						}
					}
					dup, err := s.Claim(ctx, claimAt(k, t0.Add(time.Second)))
					if err != nil || dup.Outcome != tiers.OutcomeDuplicate || string(dup.Record.Result) != k {
						return fmt.Errorf("Claim(%q) after settling = %v result %q, %v; want DUPLICATE with its own result", k, dup.Outcome, dup.Record.Result, err)
					}
					return nil
				}()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	batches, committed := s.commit.batches.Load(), s.commit.committed.Load()
	if want := int64(callers * each * 4); committed != want {
		t.Errorf("writes committed = %d, want %d", committed, want)
	}
	if batches >= committed {
		t.Fatalf("%d writes from %d callers in %d transactions, want batches of more than one write", committed, callers, batches)
	}
	t.Logf("%d writes from %d callers in %d transactions", committed, callers, batches)
}

// TestMaxBatchOne: MaxBatch 1 gives every write its own transaction.
func TestMaxBatchOne(t *testing.T) {
	s, err := New(context.Background(), Config{Path: tempPath(t), MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Claim(context.Background(), claimAt(fmt.Sprintf("evt_%d", i), t0)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if b, c := s.commit.batches.Load(), s.commit.committed.Load(); b != 8 || c != 8 {
		t.Fatalf("MaxBatch 1: %d transactions for %d writes, want 8 for 8", b, c)
	}
}
