package server

import (
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"

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

// DefaultGCHeapHeadroomMiB is --gc-heap-headroom's default: the least the
// heap may grow between two collections, in MiB, when claimd's records live
// outside the process, however small its live heap. Its live heap is about
// 10 MiB under a benchmark's load, which GOGC=400 alone let grow to 55 MiB,
// a collection every third of a second at 5 000 events a second; each
// collection's concurrent mark phase (about 10 ms on the two cores) slows
// the calls it overlaps, and that was about 1.5 ms of a lifecycle's p99
// at no headroom (bench/NOTES.md). 128 MiB took that away and cost 218 MiB
// of peak RSS; 32 keeps the peak under 128 MiB (BENCHMARKS.md shows both
// and what the lower one costs in CPU). The heap may grow to its live size
// plus this, or five times its live size, whichever is more; a
// container's memory limit (memoryLimitRatio) still bounds both.
const DefaultGCHeapHeadroomMiB = 32

// maxGCHeapHeadroomMiB bounds --gc-heap-headroom: 64 GiB, past any machine
// claimd's heap could use.
const maxGCHeapHeadroomMiB = 64 << 10

// gcPolicy is claimd's GOGC for a fast tier of kind fastKind (tier_embedded.go),
// and the least room between collections heapTuner keeps for it (0: none)
// when --gc-heap-headroom is headroomMiB.
func gcPolicy(fastKind string, headroomMiB int) (percent int, headroom uint64) {
	if fastKind == fastInProcess {
		return 100, 0
	}
	return outsideGCPercent, uint64(headroomMiB) << 20
}

// maxTunedGCPercent bounds what heapTuner sets: the heap of a process
// whose live heap is under a hundredth of the headroom collects a little
// sooner than the headroom would allow.
const maxTunedGCPercent = 10000

// gcPercentFor is the GOGC under which a heap of live bytes may grow by at
// least headroom before the next collection, and never less than floor
// (nor more than maxTunedGCPercent, unless floor is).
func gcPercentFor(live, headroom uint64, floor int) int {
	if live == 0 {
		return floor
	}
	p := min((headroom*100+live-1)/live, maxTunedGCPercent)
	return max(floor, int(p))
}

// heapTuner sets GOGC after every collection to gcPercentFor the live heap
// that collection found: a GC percent is relative to the live heap, so a
// small one alone would mean frequent collections however much memory is
// free. It runs on the runtime's cleanup goroutine, once per collection,
// from a sentinel object that each run allocates anew; stop ends it.
type heapTuner struct {
	headroom uint64
	floor    int
	sample   []metrics.Sample
	stopped  atomic.Bool
	tuned    func(live uint64, gc int) // after each setting, for tests; nil otherwise
}

// heapSentinel is what a collection finds unreachable to run the tuner.
// Sixteen bytes: smaller pointer-free objects share the tiny allocator's
// blocks, whose cleanups run only when the whole block is free.
type heapSentinel [2]uint64

// startHeapTuner tunes GOGC from the next collection on: never below floor,
// and for at least headroom of growth between collections. tuned, when not
// nil, is told each setting.
func startHeapTuner(headroom uint64, floor int, tuned func(live uint64, gc int)) *heapTuner {
	t := &heapTuner{headroom: headroom, floor: floor, tuned: tuned, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.arm()
	return t
}

func (t *heapTuner) arm() { runtime.AddCleanup(new(heapSentinel), (*heapTuner).tune, t) }

// tune sets GOGC for the live heap the last collection found, then waits
// for the next collection.
func (t *heapTuner) tune() {
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample)
	var live uint64
	if s := t.sample[0]; s.Value.Kind() == metrics.KindUint64 {
		live = s.Value.Uint64()
	}
	gc := gcPercentFor(live, t.headroom, t.floor)
	debug.SetGCPercent(gc)
	t.arm()
	if t.tuned != nil {
		t.tuned(live, gc)
	}
}

// stop ends the tuning at the next collection, leaving GOGC as it is.
func (t *heapTuner) stop() { t.stopped.Store(true) }

// memoryLimitRatio is the share of the cgroup's memory limit given to the Go
// runtime as its soft limit (GOMEMLIMIT): near it the collector runs as
// often as it must, whatever the GC percent, so a container is not killed
// for memory the heap would have given back. The rest is for stacks,
// buffers outside the heap and the runtime itself.
const memoryLimitRatio = 0.9

// tuneRuntime applies claimd's GC policy: GOGC=gc, raised after each
// collection for at least headroom bytes of growth (heapTuner, when
// headroom is not 0), unless the environment's GOGC says otherwise; and a
// soft memory limit from limit (the cgroup's memory limit in production)
// unless the environment's GOMEMLIMIT says otherwise (memlimit.Set leaves
// it alone then, and AUTOMEMLIMIT=off turns it off). It logs what it set
// with the timer slack the process runs with (applyTimerSlack's), and
// returns what it set; tuner is nil when none runs.
func tuneRuntime(gc int, headroom uint64, slack time.Duration, limit memlimit.Provider, log *slog.Logger) (gcSet int, memLimit int64, tuner *heapTuner) {
	gcSet = debug.SetGCPercent(-1) // read the current value; restored below
	_, envGC := os.LookupEnv("GOGC")
	if !envGC {
		gcSet = gc
	}
	debug.SetGCPercent(gcSet)
	if !envGC && headroom > 0 {
		tuner = startHeapTuner(headroom, gcSet, nil)
	}
	memLimit, err := memlimit.Set(memlimit.WithProvider(limit), memlimit.WithRatio(memoryLimitRatio), memlimit.WithLogger(log))
	if err != nil {
		// No cgroup (a laptop, a plain VM) is not an error worth more than
		// a line: the heap is bounded by GOGC alone there, as for any Go
		// program.
		log.Debug("no memory limit found for the Go runtime", "err", err)
	}
	attrs := []any{"gogc", gcSet}
	if slack > 0 {
		attrs = append(attrs, "timer_slack", slack.String())
	}
	if tuner != nil {
		attrs = append(attrs, "gc_heap_headroom_bytes", headroom)
	}
	if memLimit > 0 && memLimit < math.MaxInt64 {
		attrs = append(attrs, "gomemlimit_bytes", memLimit)
	}
	log.Info("go runtime", attrs...)
	return gcSet, memLimit, tuner
}
