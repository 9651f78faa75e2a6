//go:build !linux

package server

import "time"

// ExecSelf is nil where there is no timer slack to apply.
var ExecSelf func(env []string) error

// applyTimerSlack does nothing where the kernel has no timer slack to set:
// claimd runs with what the system gives it (0: unknown).
func applyTimerSlack(time.Duration, func(env []string) error) (time.Duration, error) { return 0, nil }
