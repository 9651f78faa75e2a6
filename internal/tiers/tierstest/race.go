package tierstest

import (
	"context"
	"sync"
	"testing"

	"github.com/claimd/claimd/internal/tiers"
)

// race runs call(0) … call(n-1) on n goroutines that all wait for one start
// signal, so that they reach the store as nearly at once as the scheduler
// allows, and returns when every call has.
func race(n int, call func(i int)) {
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			call(i)
		})
	}
	close(start)
	wg.Wait()
}

// ClaimRace is the suite's race harness, for backends that check more of a
// race than the suite can see (their audit rows): it claims params(i) on n
// goroutines at once and requires that no call failed, exactly one was
// ACQUIRED and every other one IN_PROGRESS. It returns the answers in the
// order of i. Every params(i) is made before the race starts.
func ClaimRace(t *testing.T, s tiers.Store, n int, params func(i int) tiers.ClaimParams) []tiers.ClaimResult {
	t.Helper()
	ps := make([]tiers.ClaimParams, n)
	for i := range n {
		ps[i] = params(i)
	}
	results := make([]tiers.ClaimResult, n)
	errs := make([]error, n)
	race(n, func(i int) { results[i], errs[i] = s.Claim(context.Background(), ps[i]) })
	acquired := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Claim #%d error = %v", i, errs[i])
		}
		switch results[i].Outcome {
		case tiers.OutcomeAcquired:
			acquired++
		case tiers.OutcomeInProgress:
		default:
			t.Errorf("Claim #%d outcome = %v, want ACQUIRED or IN_PROGRESS", i, results[i].Outcome)
		}
	}
	if acquired != 1 {
		t.Fatalf("%d concurrent claims: %d ACQUIRED, want exactly 1", n, acquired)
	}
	return results
}
