package tiers

import (
	"context"
	"time"
)

// Polling bounds of ClaimWait. The first re-claim comes quickly (most holders
// settle within milliseconds of a duplicate's arrival); later ones back off so
// a long wait costs the tiers little.
const (
	waitFirstPoll = 2 * time.Millisecond
	waitMaxPoll   = 100 * time.Millisecond
)

// ClaimWait claims p and, while the answer is IN_PROGRESS, claims again (at
// the time now() tells) until the holder finishes or wait has passed. It
// answers the first outcome that is not IN_PROGRESS: DUPLICATE with the
// holder's result when it settled, ACQUIRED when the holder released the key
// or its lease ran out (the waiter then owns it), or IN_PROGRESS when wait ran
// out. Waiting is measured on the wall clock: it bounds how long the caller's
// RPC is held, not a decision of the state machine.
func ClaimWait(ctx context.Context, s Store, p ClaimParams, wait time.Duration, now func() time.Time) (ClaimResult, error) {
	res, err := s.Claim(ctx, p)
	if err != nil || res.Outcome != OutcomeInProgress || wait <= 0 {
		return res, err
	}
	deadline := time.Now().Add(wait)
	poll := waitFirstPoll
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		timer.Reset(min(poll, left))
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-timer.C:
		}
		p.Now = now()
		res, err = s.Claim(ctx, p)
		if err != nil || res.Outcome != OutcomeInProgress {
			return res, err
		}
		poll = min(2*poll, waitMaxPoll)
	}
}
