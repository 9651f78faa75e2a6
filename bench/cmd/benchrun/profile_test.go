package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// perfScript is `perf script` output of five samples: claimd's code, gRPC
// allocating (the allocation counts to gRPC), a GC worker, sysmon, and an
// idle scheduler.
const perfScript = `claimd 14324 21145.879093:    1001001 cpu-clock:pppH: 
	          1550a runtime.mapaccess1+0x22a (/tmp/bin/claimd)
	          8f2a1 github.com/claimd/claimd/internal/service.(*Service).Claim+0x45 (/tmp/bin/claimd)
	          93b41 runtime.goexit.abi0+0x1 (/tmp/bin/claimd)

claimd 14324 21145.880093:    1001001 cpu-clock:pppH: 
	          2250a runtime.mallocgc+0x2a (/tmp/bin/claimd)
	          515a65 google.golang.org/grpc/internal/transport.(*http2Server).operateHeaders+0x145 (/tmp/bin/claimd)
	          8f2a1 github.com/claimd/claimd/internal/service.(*Service).Claim+0x45 (/tmp/bin/claimd)

claimd 14325 21145.881093:    1001001 cpu-clock:pppH: 
	          3350a runtime.scanobject+0x2a (/tmp/bin/claimd)
	          4450a runtime.gcBgMarkWorker+0x11 (/tmp/bin/claimd)

claimd 14326 21145.882093:    1001001 cpu-clock:pppH: 
	ffffffff9a1b finish_task_switch.isra.0+0x93 ([kernel.kallsyms])
	          5550a runtime.usleep.abi0+0x2a (/tmp/bin/claimd)
	          6650a runtime.sysmon+0x11 (/tmp/bin/claimd)

claimd 14327 21145.883093:    1001001 cpu-clock:pppH: 
	          7750a runtime.findRunnable+0x2a (/tmp/bin/claimd)
	          8850a runtime.schedule+0x11 (/tmp/bin/claimd)
`

func TestAttribute(t *testing.T) {
	shares, n, err := attribute(strings.NewReader(perfScript))
	if err != nil || n != 5 {
		t.Fatalf("attribute() = %d samples, %v; want 5", n, err)
	}
	want := map[string]float64{compClaimd: 0.2, compGRPC: 0.2, compGC: 0.2, compSysmon: 0.2, compSched: 0.2}
	for _, c := range components {
		if math.Abs(shares[c]-want[c]) > 1e-9 {
			t.Errorf("share of %q = %.2f, want %.2f", c, shares[c], want[c])
		}
	}
	if _, _, err := attribute(strings.NewReader("claimd 1 2.0: 1 cpu-clock:\n\n")); err == nil {
		t.Error("attribute() of samples without call stacks: no error")
	}
}

func TestProfileTable(t *testing.T) {
	r := &Report{Options: ReportOptions{Duration: "15s"}, Profiles: []Profile{
		{Target: targetClaimd, Scenario: scenarioNew, PerOp: 100, Samples: 5000, Shares: map[string]float64{compClaimd: 0.25, compSched: 0.75}},
		{Target: targetEmbedded, Scenario: scenarioLifecycle, Run: "open loop at 800/s, claimd embedded", PerOp: 200, Samples: 4000, Shares: map[string]float64{compSQLite: 0.5, compSched: 0.5}},
	}}
	got := profileTable(r)
	for _, want := range []string{"## Where claimd's CPU goes", "for 10 s", "| claimd's own code | 25.0 (25 %) | 0.0 (0 %) |", "| Go runtime: scheduler | 75.0 (75 %) | 100.0 (50 %) |", "| pgx | 0.0 (0 %) | 0.0 (0 %) |",
		"| SQLite (modernc.org) | 0.0 (0 %) | 100.0 (50 %) |", "| all new keys (100.0 µs) | lifecycle: Claim → PROCESSING → SETTLED, open loop at 800/s, claimd embedded (200.0 µs) |", "| samples | 5000 | 4000 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("profile table lacks %q:\n%s", want, got)
		}
	}
	if profileTable(&Report{}) != "" {
		t.Error("a report without profiles has a profile table")
	}
}

// TestProfileWindowInsideTheRun: perf starts 2 s into the profiled run and
// must stop at least a second before it ends, whatever the measured runs
// last; a smoke run's 2 s once left perf sampling an idle server.
func TestProfileWindowInsideTheRun(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 15 * time.Second, time.Minute} {
		run, secs := profileRun(d), profileSeconds(d)
		if run < d {
			t.Errorf("measured runs of %v: profiled run %v is shorter", d, run)
		}
		if end := 2*time.Second + time.Duration(secs)*time.Second; end > run-time.Second || secs < 1 {
			t.Errorf("measured runs of %v: perf records %d s from 2 s into a run of %v", d, secs, run)
		}
	}
}
