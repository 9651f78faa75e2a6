//go:build !linux

package main

import "time"

// clock sleeps with the Go runtime's timers, to the millisecond where
// clock_nanosleep is missing.
type clock struct{}

func newClock() clock { return clock{} }

func (clock) sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }
