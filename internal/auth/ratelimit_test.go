package auth_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimd/claimd/internal/auth"
)

// TestRateLimitFairness: principal flood sends twenty times its rate while
// principal calm keeps to its own; calm's calls all succeed. Both are held
// to 50 calls/s with a burst of 5. Time is the fake clock: each round moves
// it 100ms, which refills each bucket to its burst, and fires all calls of
// the round at once.
func TestRateLimitFairness(t *testing.T) {
	e := newEnv(t)
	c := e.claims(t, nil)
	const (
		rounds        = 20
		burst         = 5
		floodPerRound = 100
		calmPerRound  = burst
	)
	var (
		floodOK, floodLimited, calmOK atomic.Int64
		badRetry                      atomic.Value
	)
	call := func(ctx context.Context, id string, ok, limited *atomic.Int64) {
		_, err := c.Claim(ctx, claimReq("load", id))
		switch st := status.Convert(err); st.Code() {
		case codes.OK:
			ok.Add(1)
		case codes.ResourceExhausted:
			limited.Add(1)
			var (
				delay  time.Duration
				reason string
			)
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.RetryInfo:
					delay = d.GetRetryDelay().AsDuration()
				case *errdetails.ErrorInfo:
					reason = d.GetReason()
				}
			}
			if reason != auth.ReasonRateLimited {
				badRetry.Store(fmt.Sprintf("ErrorInfo reason %q, want %s: %v", reason, auth.ReasonRateLimited, err))
			}
			// One token comes back every 1s/50 = 20ms.
			if delay <= 0 || delay > 20*time.Millisecond {
				badRetry.Store(fmt.Sprintf("RetryInfo delay %v, want (0, 20ms]: %v", delay, err))
			}
		default:
			badRetry.Store(fmt.Sprintf("unexpected error %v", err))
		}
	}
	var calmLimited atomic.Int64
	for round := range rounds {
		e.clk.Advance(100 * time.Millisecond)
		var wg sync.WaitGroup
		for i := range floodPerRound {
			wg.Go(func() { call(as(floodToken), fmt.Sprintf("flood_%d_%d", round, i), &floodOK, &floodLimited) })
		}
		for i := range calmPerRound {
			wg.Go(func() { call(as(calmToken), fmt.Sprintf("calm_%d_%d", round, i), &calmOK, &calmLimited) })
		}
		wg.Wait()
	}
	if msg := badRetry.Load(); msg != nil {
		t.Error(msg)
	}
	calmRate := float64(calmOK.Load()) / float64(rounds*calmPerRound)
	t.Logf("under a flood of %d calls (%d accepted), calm succeeded %d of %d (%.0f%%)",
		rounds*floodPerRound, floodOK.Load(), calmOK.Load(), rounds*calmPerRound, 100*calmRate)
	if calmRate != 1 {
		t.Errorf("calm's success rate under flood's flood = %.2f, want 1 (its own bucket is untouched)", calmRate)
	}
	if got, want := floodOK.Load(), int64(rounds*burst); got != want {
		t.Errorf("flood's accepted calls = %d, want %d (its burst per refill)", got, want)
	}
	if got, want := e.metric(t, "claimd_auth_rate_limited_total", "principal", "flood"), float64(floodLimited.Load()); got != want || got != rounds*(floodPerRound-burst) {
		t.Errorf(`claimd_auth_rate_limited_total{principal="flood"} = %v, want %v (= %d)`, got, want, rounds*(floodPerRound-burst))
	}
	if got := e.metric(t, "claimd_auth_rate_limited_total", "principal", "calm"); got != 0 {
		t.Errorf(`claimd_auth_rate_limited_total{principal="calm"} = %v, want 0`, got)
	}
	// Refused calls wrote nothing: only the accepted claims reached the store.
	if got, want := e.store.Writes.Load(), floodOK.Load()+calmOK.Load(); got != want {
		t.Errorf("store writes = %d, want %d (the accepted claims only)", got, want)
	}

	// A reload does not refill an emptied bucket.
	e.write(t, testFile()+"# edited\n")
	if err := e.a.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(as(floodToken), claimReq("load", "after_reload")); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("flood's call right after a reload error = %v, want ResourceExhausted (the bucket carries over)", err)
	}
}
