package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// These tests hold the durable tier to "no partial state" when calls are
// cut short: by a client that cancels at every point of a call, and by a
// pool with no connection to give. Whatever a cut call did, it did all of it
// or none: each record's version counts exactly its audited changes, no
// audit row outlives its record, no session is left inside a transaction,
// no connection stays checked out, and the client's retry of the same call
// (same attempt_id, same token, same result) gets the answer it would have
// had.

const satLease, satTTL = time.Minute, 84 * time.Hour

// checkNoPartialState compares every record of namespace ns with its audit
// rows, and the server's sessions and s's pool with an idle state.
// satSalt and satHash are the ownership fields of every claim here: the
// fenced writes present the hash the claim stored.
var (
	satSalt = bytes.Repeat([]byte{0x5a}, tiers.SaltBytes)
	satHash = bytes.Repeat([]byte{0xa5}, tiers.SecretHashBytes)
)

func checkNoPartialState(t *testing.T, s *Store, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A change is a claim that acquired, or a transition, renew or release
	// (only those that changed the record are audited). The repeated
	// ACQUIRED of an attempt is audited too, with the version it found, so
	// claim rows count once per version.
	rows, err := s.pool.Query(ctx, `
		SELECT c.key, c.version,
		       coalesce((SELECT array_agg(v ORDER BY v) FROM (
		           SELECT DISTINCT a.version AS v FROM audit_log a
		           WHERE a.namespace = c.namespace AND a.provider = c.provider AND a.key = c.key
		             AND a.op = 'claim' AND a.outcome = $2
		           UNION ALL
		           SELECT a.version FROM audit_log a
		           WHERE a.namespace = c.namespace AND a.provider = c.provider AND a.key = c.key
		             AND a.op <> 'claim') AS changes), '{}')
		FROM claims c WHERE c.namespace = $1`, ns, int16(tiers.OutcomeAcquired))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key     string
			version int64
			changes []int64
		)
		if err := rows.Scan(&key, &version, &changes); err != nil {
			t.Fatal(err)
		}
		want := make([]int64, version)
		for i := range want {
			want[i] = int64(i + 1)
		}
		if !slices.Equal(changes, want) {
			t.Errorf("%s: record at version %d, audited changes at versions %v; want one per version", key, version, changes)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var orphans, inTx int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_log a WHERE a.namespace = $1
		AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.namespace = a.namespace AND c.provider = a.provider AND c.key = a.key)`, ns).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Errorf("%d audit rows of namespace %s have no record", orphans, ns)
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'`).Scan(&inTx); err != nil {
		t.Fatal(err)
	}
	if inTx != 0 {
		t.Errorf("%d sessions left idle in a transaction", inTx)
	}
	// pgxpool gives back a connection whose query was cancelled from a
	// goroutine of its own (it must first drain or close it), so "returned"
	// means "returned within a bound", polled, not at this instant.
	deadline := time.Now().Add(5 * time.Second)
	for s.pool.Stat().AcquiredConns() != 0 && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d pool connections still checked out 5s after every call returned", n)
	}
}

// cutCall runs call on a context its client cancels after d (0: before the
// call starts), then, if it failed, retries it once with time to spare, as
// a client would; the retry must succeed.
func cutCall(t *testing.T, d time.Duration, what string, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(d, cancel)
	err := call(ctx)
	stop.Stop()
	cancel()
	if err == nil {
		return
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("%s cut after %v: error = %v, want context.Canceled or ErrUnavailable", what, d, err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if err := call(rctx); err != nil {
		t.Fatalf("%s retried after a cut at %v: error = %v", what, d, err)
	}
}

// TestCancelledAtEveryStepLeavesNoPartialState cancels each call of a
// claim's life (claim, transitions, renew, settle; claim and release) at
// delays from 0 to 4ms in 100µs steps, so that the cut lands before the
// statement is sent, while it runs, and after it committed.
func TestCancelledAtEveryStepLeavesNoPartialState(t *testing.T) {
	for _, tc := range []struct {
		desc     string
		maxBatch int
	}{{"group commit", 0}, {"one statement per claim", 1}} {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := New(context.Background(), Config{URL: testenv.Postgres(t, Migrate), MaxBatch: tc.maxBatch})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			clk := clock.NewFake(time.Now())
			const ns = "cut"
			for i := range 41 {
				d := time.Duration(i) * 100 * time.Microsecond
				for _, release := range []bool{false, true} {
					k := tiers.Key{Namespace: ns, Provider: "stripe", Key: fmt.Sprintf("evt_%d_%v", i, release)}
					att := "att-" + k.Key
					var got tiers.ClaimResult
					cutCall(t, d, "Claim", func(ctx context.Context) (err error) {
						got, err = s.Claim(ctx, tiers.ClaimParams{Key: k, Now: clk.Now(), Lease: satLease, TTL: satTTL, Holder: "pod-a", AttemptID: att, Salt: satSalt, SecretHash: satHash})
						return err
					})
					if got.Outcome != tiers.OutcomeAcquired || got.Reason != tiers.ReasonNew || got.Record.Token != 1 {
						t.Fatalf("%s: Claim (retried with its attempt_id) = %v/%v token %d, want ACQUIRED/NEW token 1", k.Key, got.Outcome, got.Reason, got.Record.Token)
					}
					transition := func(to tiers.State, result []byte) {
						cutCall(t, d, "Transition →"+to.String(), func(ctx context.Context) error {
							_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: k, Now: clk.Now(), Token: 1, SecretHash: satHash, To: to, Result: result})
							return err
						})
					}
					transition(tiers.StateProcessing, nil)
					cutCall(t, d, "Renew", func(ctx context.Context) error {
						_, err := s.Renew(ctx, tiers.RenewParams{Key: k, Now: clk.Now(), Token: 1, SecretHash: satHash, Lease: satLease})
						return err
					})
					if release {
						cutCall(t, d, "Release", func(ctx context.Context) error {
							_, err := s.Release(ctx, tiers.ReleaseParams{Key: k, Now: clk.Now(), Token: 1, SecretHash: satHash})
							return err
						})
					} else {
						transition(tiers.StateSettled, []byte("receipt"))
					}
					rec, err := s.Get(context.Background(), k)
					switch {
					case err != nil:
						t.Fatalf("Get(%s) error = %v", k.Key, err)
					case release && !rec.Released, !release && (rec.State != tiers.StateSettled || string(rec.Result) != "receipt"):
						t.Fatalf("Get(%s) = %v released %v result %q after its life", k.Key, rec.State, rec.Released, rec.Result)
					case rec.Token != 1 || rec.Attempt != 1:
						t.Fatalf("Get(%s) token/attempt = %d/%d, want 1/1: a retry acquired again", k.Key, rec.Token, rec.Attempt)
					}
				}
			}
			checkNoPartialState(t, s, ns)
		})
	}
}

// TestPoolExhaustedLeavesNoPartialState holds every connection of a small
// pool while claims, transitions, renews and releases arrive with short
// deadlines: each fails within its deadline, and once connections are back
// the retries find whatever each cut call left and finish the job.
func TestPoolExhaustedLeavesNoPartialState(t *testing.T) {
	s, err := New(context.Background(), Config{URL: testenv.Postgres(t, Migrate), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	clk := clock.NewFake(time.Now())
	const ns = "pool"
	key := func(k string) tiers.Key { return tiers.Key{Namespace: ns, Provider: "stripe", Key: k} }
	claimParams := func(k string) tiers.ClaimParams {
		return tiers.ClaimParams{Key: key(k), Now: clk.Now(), Lease: satLease, TTL: satTTL, Holder: "pod-a", AttemptID: "att-" + k, Salt: satSalt, SecretHash: satHash}
	}
	ctx := context.Background()
	for _, k := range []string{"evt_settle", "evt_renew", "evt_release"} {
		if _, err := s.Claim(ctx, claimParams(k)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key(k), Now: clk.Now(), Token: 1, SecretHash: satHash, To: tiers.StateProcessing}); err != nil {
			t.Fatal(err)
		}
	}

	// Exhaust the pool.
	var held []interface{ Release() }
	for range 2 {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	const deadline = 200 * time.Millisecond
	calls := map[string]func(ctx context.Context) error{
		"Transition": func(ctx context.Context) error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_settle"), Now: clk.Now(), Token: 1, SecretHash: satHash, To: tiers.StateSettled, Result: []byte("receipt")})
			return err
		},
		"Renew": func(ctx context.Context) error {
			_, err := s.Renew(ctx, tiers.RenewParams{Key: key("evt_renew"), Now: clk.Now(), Token: 1, SecretHash: satHash, Lease: satLease})
			return err
		},
		"Release": func(ctx context.Context) error {
			_, err := s.Release(ctx, tiers.ReleaseParams{Key: key("evt_release"), Now: clk.Now(), Token: 1, SecretHash: satHash})
			return err
		},
	}
	for i := range 16 {
		k := fmt.Sprintf("evt_new_%d", i)
		calls["Claim "+k] = func(ctx context.Context) error {
			res, err := s.Claim(ctx, claimParams(k))
			if err == nil && (res.Outcome != tiers.OutcomeAcquired || res.Record.Token != 1) {
				return fmt.Errorf("Claim(%s) = %v token %d, want ACQUIRED token 1", k, res.Outcome, res.Record.Token)
			}
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make(map[string]error)
	var mu sync.Mutex
	for name, call := range calls {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			started := time.Now()
			err := call(cctx)
			if took := time.Since(started); took > deadline+time.Second {
				err = fmt.Errorf("returned after %v, long past its %v deadline (%v)", took, deadline, err)
			}
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	for name, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, tiers.ErrUnavailable) {
			t.Errorf("%s with the pool exhausted: error = %v, want DeadlineExceeded or ErrUnavailable", name, err)
		}
	}
	for _, c := range held {
		c.Release()
	}

	// The clients retry, with connections to spare.
	for name, call := range calls {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := call(rctx); err != nil {
			t.Errorf("%s retried: error = %v", name, err)
		}
		cancel()
	}
	for k, check := range map[string]func(tiers.Record) bool{
		"evt_settle":  func(r tiers.Record) bool { return r.State == tiers.StateSettled && string(r.Result) == "receipt" },
		"evt_renew":   func(r tiers.Record) bool { return r.State == tiers.StateProcessing && !r.Released },
		"evt_release": func(r tiers.Record) bool { return r.Released },
	} {
		if rec, err := s.Get(ctx, key(k)); err != nil || !check(rec) || rec.Token != 1 {
			t.Errorf("Get(%s) = %+v, %v; not what its retried call asked for", k, rec, err)
		}
	}
	checkNoPartialState(t, s, ns)
}
