package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// clock sleeps by the monotonic clock to the microsecond.
type clock struct {
	base time.Time // read together with mono
	mono int64     // CLOCK_MONOTONIC at base, in ns
}

func newClock() clock {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return clock{base: time.Now(), mono: ts.Nano()}
}

// sleepUntil blocks the calling thread until t (clock_nanosleep to an
// absolute time, so that an interruption resumes the same wait); a t
// already past returns at once.
func (c clock) sleepUntil(t time.Time) {
	if !time.Now().Before(t) {
		return
	}
	ts := unix.NsecToTimespec(c.mono + int64(t.Sub(c.base)))
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}
