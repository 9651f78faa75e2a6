package main

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// defaultGCPercent is claimd's garbage collection target (GOGC) unless the
// environment sets GOGC. Go's default of 100 collects every time the heap
// doubles its live size, and claimd's live heap is small (the local cache
// and the calls in flight) while it allocates a few kilobytes per call: at
// 100 the collector, and the stack regrowth that follows each collection's
// stack shrinking, took 15–30 % of claimd's CPU per new claim
// (BENCHMARKS.md, "Memory and garbage collection"). At 400 the heap may grow
// to five times its live size between collections; memoryLimitRatio keeps
// that growth inside a container's memory limit.
const defaultGCPercent = 400

// memoryLimitRatio is the share of the cgroup's memory limit given to the Go
// runtime as its soft limit (GOMEMLIMIT): near it the collector runs as
// often as it must, whatever the GC percent, so a container is not killed
// for memory the heap would have given back. The rest is for stacks,
// buffers outside the heap and the runtime itself.
const memoryLimitRatio = 0.9

// tuneRuntime applies claimd's GC policy: GOGC=defaultGCPercent unless the
// environment's GOGC says otherwise, and a soft memory limit from limit
// (the cgroup's memory limit in production) unless the environment's
// GOMEMLIMIT says otherwise (memlimit.Set leaves it alone then, and
// AUTOMEMLIMIT=off turns it off). It logs and returns what it set.
func tuneRuntime(limit memlimit.Provider, log *slog.Logger) (gcPercent int, memLimit int64) {
	gcPercent = debug.SetGCPercent(-1) // read the current value; restored below
	if _, set := os.LookupEnv("GOGC"); !set {
		gcPercent = defaultGCPercent
	}
	debug.SetGCPercent(gcPercent)
	memLimit, err := memlimit.Set(memlimit.WithProvider(limit), memlimit.WithRatio(memoryLimitRatio), memlimit.WithLogger(log))
	if err != nil {
		// No cgroup (a laptop, a plain VM) is not an error worth more than
		// a line: the heap is bounded by GOGC alone there, as for any Go
		// program.
		log.Debug("no memory limit found for the Go runtime", "err", err)
	}
	attrs := []any{"gogc", gcPercent}
	if memLimit > 0 && memLimit < math.MaxInt64 {
		attrs = append(attrs, "gomemlimit_bytes", memLimit)
	}
	log.Info("go runtime", attrs...)
	return gcPercent, memLimit
}
