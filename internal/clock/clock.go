// Package clock is the one source of time for claimd's decisions. The server
// reads a Real clock; tests inject a Fake one and move it by hand, so no test
// sleeps to make time pass.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Waiter is a Clock that also wakes whoever waits for time to pass: the
// retries that back off.
type Waiter interface {
	Clock
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock, in UTC, truncated to microseconds (the precision of
// every tier's timestamps, so a value read back equals the value written).
type Real struct{}

// Now returns the current time.
func (Real) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// After waits on the wall clock.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	changed chan struct{} // closed when a waiter arrives; nil until someone watches
}

// waiter is a caller of After that the fake time has not reached yet.
type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a Fake clock reading start, truncated to milliseconds.
func NewFake(start time.Time) *Fake { return &Fake{now: start.UTC().Truncate(time.Millisecond)} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.fire()
}

// Set moves the fake time to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t.UTC()
	f.fire()
}

// After returns a channel that receives the fake time once Advance or Set
// has moved it d past now (at once when d <= 0).
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), ch: ch})
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
	return ch
}

// fire wakes the waiters whose time has come. f.mu is held.
func (f *Fake) fire() {
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- f.now // buffered, and sent to once
	}
	clear(f.waiters[len(kept):])
	f.waiters = kept
}

// AwaitWaiters blocks until at least n callers of After wait for a time
// still to come, or ctx ends: a test knows then that the goroutine it drives
// has gone to sleep, and that moving the clock will wake it.
func (f *Fake) AwaitWaiters(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if len(f.waiters) >= n {
			f.mu.Unlock()
			return nil
		}
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
