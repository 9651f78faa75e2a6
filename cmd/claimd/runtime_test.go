package main

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

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
	gc, mem := tuneRuntime(outsideGCPercent, memlimit.Limit(cgroup), slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	gc, mem := tuneRuntime(outsideGCPercent, memlimit.Limit(1<<30), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if gc != 150 || debug.SetGCPercent(gc) != 150 {
		t.Errorf("GC percent = %d, want the environment's 150", gc)
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
	if _, mem := tuneRuntime(outsideGCPercent, noLimit, slog.New(slog.NewTextHandler(io.Discard, nil))); mem != math.MaxInt64 {
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

// TestGCPercentByFastTier: GOGC=400 only where the records live outside the
// process; the embedded fast tier's records are the heap.
func TestGCPercentByFastTier(t *testing.T) {
	for kind, want := range map[string]int{"redis": outsideGCPercent, "none": outsideGCPercent, "memory": 100} {
		if got := gcPercent(kind); got != want {
			t.Errorf("gcPercent(%q) = %d, want %d", kind, got, want)
		}
	}
}
