package main

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// outsideGCPercent is claimd's garbage collection target (GOGC) when its
// records live outside the process (Redis and PostgreSQL, or PostgreSQL
// alone), unless the environment sets GOGC. Its live heap is then small and
// bounded (the local cache of settled records, 64 MiB at most, and the calls
// in flight) while it allocates a few kilobytes per call: at Go's default of
// 100 the collector, and the stack regrowth that follows each collection's
// stack shrinking, took 15–30 % of claimd's CPU per call (BENCHMARKS.md).
// At 400 the heap may grow to five times its live size between
// collections, a few hundred MiB at most; memoryLimitRatio keeps that
// growth inside a container's memory limit.
//
// The embedded tiers keep Go's default: their in-process fast tier holds
// every record of the window on the heap, which a larger GOGC would
// multiply (measured: 172 against 395 MiB peak RSS after the same short
// runs).
const outsideGCPercent = 400

// gcPercent is claimd's GOGC for a fast tier of kind fastKind (stores.go).
func gcPercent(fastKind string) int {
	if fastKind == fastInProcess {
		return 100
	}
	return outsideGCPercent
}

// memoryLimitRatio is the share of the cgroup's memory limit given to the Go
// runtime as its soft limit (GOMEMLIMIT): near it the collector runs as
// often as it must, whatever the GC percent, so a container is not killed
// for memory the heap would have given back. The rest is for stacks,
// buffers outside the heap and the runtime itself.
const memoryLimitRatio = 0.9

// tuneRuntime applies claimd's GC policy: GOGC=gc unless the environment's
// GOGC says otherwise, and a soft memory limit from limit
// (the cgroup's memory limit in production) unless the environment's
// GOMEMLIMIT says otherwise (memlimit.Set leaves it alone then, and
// AUTOMEMLIMIT=off turns it off). It logs and returns what it set.
func tuneRuntime(gc int, limit memlimit.Provider, log *slog.Logger) (gcSet int, memLimit int64) {
	gcSet = debug.SetGCPercent(-1) // read the current value; restored below
	if _, set := os.LookupEnv("GOGC"); !set {
		gcSet = gc
	}
	debug.SetGCPercent(gcSet)
	memLimit, err := memlimit.Set(memlimit.WithProvider(limit), memlimit.WithRatio(memoryLimitRatio), memlimit.WithLogger(log))
	if err != nil {
		// No cgroup (a laptop, a plain VM) is not an error worth more than
		// a line: the heap is bounded by GOGC alone there, as for any Go
		// program.
		log.Debug("no memory limit found for the Go runtime", "err", err)
	}
	attrs := []any{"gogc", gcSet}
	if memLimit > 0 && memLimit < math.MaxInt64 {
		attrs = append(attrs, "gomemlimit_bytes", memLimit)
	}
	log.Info("go runtime", attrs...)
	return gcSet, memLimit
}
