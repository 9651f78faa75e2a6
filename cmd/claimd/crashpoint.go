//go:build !chaos

package main

import "github.com/claimd/claimd/internal/server"

// withCrashPoints leaves c as it is: the crash points of the fault suite
// exist only in a binary built with -tags chaos (crashpoint_chaos.go).
func withCrashPoints(*server.TierConfig) {}
