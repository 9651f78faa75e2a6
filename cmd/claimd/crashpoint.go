//go:build !chaos

package main

import "github.com/claimd/claimd/internal/tiers"

// crashPoints returns the tiers unchanged: the crash points of the fault
// suite exist only in a binary built with -tags chaos (crashpoint_chaos.go).
func crashPoints(f tiers.Fast, d tiers.Durable) (tiers.Fast, tiers.Durable) { return f, d }

// crashStep is nil: no step of a durable tier's transaction is a crash point
// outside a -tags chaos build.
func crashStep() func(string, tiers.Key) { return nil }
