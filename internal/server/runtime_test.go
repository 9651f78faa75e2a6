package server

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// restoreRuntime puts the test process's GC settings back after a test of
// tuneRuntime.
func restoreRuntime(t *testing.T) {
	t.Helper()
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	mem := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(mem)
	})
}

func TestTuneRuntimeDefaults(t *testing.T) {
	restoreRuntime(t)
	unsetenv(t, "GOGC")
	unsetenv(t, "GOMEMLIMIT")
	unsetenv(t, "AUTOMEMLIMIT")
	const cgroup = 1 << 30
	gc, mem, tuner := tuneRuntime(outsideGCPercent, uint64(DefaultGCHeapHeadroomMiB)<<20, 0, memlimit.Limit(cgroup), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if tuner == nil {
		t.Error("no heap tuner runs for the default headroom")
	} else {
		tuner.stop()
	}
	if gc != outsideGCPercent || debug.SetGCPercent(gc) != outsideGCPercent {
		t.Errorf("GC percent = %d, want %d", gc, outsideGCPercent)
	}
	ratio := memoryLimitRatio
	want := int64(float64(cgroup) * ratio)
	if mem != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("memory limit = %d, want %d (%.0f %% of the cgroup's 1 GiB)", mem, want, memoryLimitRatio*100)
	}
}

func TestTuneRuntimeKeepsTheEnvironment(t *testing.T) {
	restoreRuntime(t)
	debug.SetGCPercent(150) // as the runtime does for GOGC=150
	debug.SetMemoryLimit(256 << 20)
	t.Setenv("GOGC", "150")
	t.Setenv("GOMEMLIMIT", "256MiB")
	gc, mem, tuner := tuneRuntime(outsideGCPercent, uint64(DefaultGCHeapHeadroomMiB)<<20, 0, memlimit.Limit(1<<30), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if gc != 150 || debug.SetGCPercent(gc) != 150 {
		t.Errorf("GC percent = %d, want the environment's 150", gc)
	}
	if tuner != nil {
		tuner.stop()
		t.Error("a heap tuner runs although the environment sets GOGC")
	}
	if mem != 256<<20 || debug.SetMemoryLimit(-1) != 256<<20 {
		t.Errorf("memory limit = %d, want the environment's %d", mem, 256<<20)
	}
}

func TestTuneRuntimeWithoutALimit(t *testing.T) {
	restoreRuntime(t)
	unsetenv(t, "GOMEMLIMIT")
	unsetenv(t, "AUTOMEMLIMIT")
	noLimit := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	if _, mem, _ := tuneRuntime(outsideGCPercent, 0, 0, noLimit, slog.New(slog.NewTextHandler(io.Discard, nil))); mem != math.MaxInt64 {
		t.Errorf("memory limit = %d without a cgroup limit, want none (%d)", mem, int64(math.MaxInt64))
	}
}

// unsetenv unsets key for the test and restores it after.
func unsetenv(t *testing.T, key string) {
	t.Helper()
	t.Setenv(key, "") // registers the restore
	if err := os.Unsetenv(key); err != nil {
		t.Fatal(err)
	}
}

// TestGCPolicyByFastTier: GOGC=400 and the heap headroom only where the
// records live outside the process; the embedded fast tier's records are the
// heap.
func TestGCPolicyByFastTier(t *testing.T) {
	for kind, want := range map[string]struct {
		percent  int
		headroom uint64
	}{
		"redis":  {outsideGCPercent, 32 << 20},
		"none":   {outsideGCPercent, 32 << 20},
		"memory": {100, 0},
	} {
		if percent, headroom := gcPolicy(kind, 32); percent != want.percent || headroom != want.headroom {
			t.Errorf("gcPolicy(%q) = %d, %d; want %d, %d", kind, percent, headroom, want.percent, want.headroom)
		}
	}
}

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		desc           string
		live, headroom uint64
		floor, want    int
	}{
		{"a small live heap gets the headroom", 10 * mib, 128 * mib, 400, 1280},
		{"rounded up, never under the headroom", 3 * mib, 128 * mib, 400, 4267},
		{"a live heap the floor already gives more room", 64 * mib, 128 * mib, 400, 400},
		{"no reading yet keeps the floor", 0, 128 * mib, 400, 400},
		{"a tiny live heap is bounded", 1024, 128 * mib, 400, maxTunedGCPercent},
		{"a floor above the bound stands", 1024, 128 * mib, 2 * maxTunedGCPercent, 2 * maxTunedGCPercent},
	} {
		if got := gcPercentFor(c.live, c.headroom, c.floor); got != c.want {
			t.Errorf("%s: gcPercentFor(%d, %d, %d) = %d, want %d", c.desc, c.live, c.headroom, c.floor, got, c.want)
		}
	}
}

// TestHeapTunerFollowsTheLiveHeap: after each collection GOGC is what
// gcPercentFor gives the live heap that collection found, so it falls to
// the floor while a large live heap already leaves the headroom, and rises
// again once that heap is garbage.
func TestHeapTunerFollowsTheLiveHeap(t *testing.T) {
	restoreRuntime(t)
	const headroom, floor, ballastBytes = 64 << 20, 400, 96 << 20
	type setting struct {
		live uint64
		gc   int
	}
	tuned := make(chan setting, 64)
	tuner := startHeapTuner(headroom, floor, func(live uint64, gc int) { tuned <- setting{live, gc} })
	t.Cleanup(tuner.stop)
	// reported says whether the tuner reports setting GOGC to gc within
	// 10s: a collection of another test's garbage can run it again between
	// the report collect read and collect's look at GOGC, and it reports
	// each setting after making it.
	reported := func(gc int) bool {
		for {
			select {
			case s := <-tuned:
				if s.gc == gc {
					return true
				}
			case <-time.After(10 * time.Second):
				return false
			}
		}
	}
	// collect runs collections until the tuner's setting after one is
	// what want accepts, and returns it; GOGC must be that setting (or, if
	// the tuner ran again meanwhile, the one it reports next).
	collect := func(desc string, want func(setting) bool) setting {
		t.Helper()
		var s setting
		for range 5 {
			runtime.GC()
			select {
			case s = <-tuned:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the tuner did not run within 10s of a collection", desc)
			}
			if want(s) {
				if got := debug.SetGCPercent(s.gc); got != s.gc && !reported(got) {
					t.Fatalf("%s: GOGC = %d after the tuner set %d", desc, got, s.gc)
				}
				return s
			}
		}
		t.Fatalf("%s: after 5 collections the tuner's last setting was live %d, GOGC %d", desc, s.live, s.gc)
		return s
	}

	ballast := make([]byte, ballastBytes)
	held := collect("96 MiB live", func(s setting) bool { return s.live >= ballastBytes })
	runtime.KeepAlive(ballast)
	if held.gc != floor {
		t.Errorf("96 MiB live: GOGC %d, want the floor %d (the live heap alone leaves the headroom)", held.gc, floor)
	}

	ballast = nil
	freed := collect("96 MiB freed", func(s setting) bool { return s.live < ballastBytes })
	if want := gcPercentFor(freed.live, headroom, floor); freed.gc != want || freed.gc <= floor {
		t.Errorf("96 MiB freed: live %d, GOGC %d; want %d, above the floor", freed.live, freed.gc, want)
	}
}

// TestHeapTunerStops: a stopped tuner neither sets GOGC nor waits for
// another collection.
func TestHeapTunerStops(t *testing.T) {
	restoreRuntime(t)
	before := debug.SetGCPercent(-1)
	debug.SetGCPercent(before)
	calls := 0
	tuner := &heapTuner{headroom: 64 << 20, floor: 400, tuned: func(uint64, int) { calls++ }}
	tuner.stop()
	tuner.tune()
	if calls != 0 || debug.SetGCPercent(before) != before {
		t.Errorf("a stopped tuner ran: %d settings, GOGC changed", calls)
	}
}
