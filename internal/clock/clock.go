// Package clock is the one source of time for claimd's decisions. The server
// reads a Real clock; tests inject a Fake one and move it by hand, so no test
// sleeps to make time pass.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock, in UTC, truncated to microseconds (the precision of
// every tier's timestamps, so a value read back equals the value written).
type Real struct{}

// Now returns the current time.
func (Real) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Fake is a clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
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
}

// Set moves the fake time to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t.UTC()
}
