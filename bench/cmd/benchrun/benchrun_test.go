package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"text/template"
	"time"
)

// TestEventIDTemplate renders ghz's data templates (with a stand-in for
// sprig's mod, which ghz provides) and holds them to claimload's keys
// (cmd/claimload TestAppendKey pins the same strings).
func TestEventIDTemplate(t *testing.T) {
	b := &bench{opts: options{dupKeys: 1000}}
	funcs := template.FuncMap{"mod": func(a int64, m int) int64 { return a % int64(m) }}
	tests := []struct {
		scenario string
		n        int64
		want     string
	}{
		{scenarioNew, 7, "run1-7"},
		{scenarioDup, 1007, "settled-7"},
		{scenarioMix, 20, "run1-20"},
		{scenarioMix, 21, "settled-21"},
		{scenarioContend, 99, "run1"},
	}
	for _, tc := range tests {
		src := b.eventIDTemplate(tc.scenario, "run1")
		tmpl, err := template.New("data").Funcs(funcs).Parse(src)
		if err != nil {
			t.Fatalf("eventIDTemplate(%s) = %q: %v", tc.scenario, src, err)
		}
		var sb strings.Builder
		if err := tmpl.Execute(&sb, struct{ RequestNumber int64 }{tc.n}); err != nil {
			t.Fatal(err)
		}
		if got := sb.String(); got != tc.want {
			t.Errorf("eventIDTemplate(%s) at request %d = %q, want %q", tc.scenario, tc.n, got, tc.want)
		}
	}
}

// TestReadStat parses this process's own /proc entry.
func TestReadStat(t *testing.T) {
	st, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getppid() {
		t.Fatalf("readStat(self).ppid = %d, want %d", st.ppid, os.Getppid())
	}
	if busy, err := machineBusy(); err != nil || busy <= 0 {
		t.Fatalf("machineBusy() = %v, %v; want a positive number of seconds", busy, err)
	}
}

func TestParsePgbench(t *testing.T) {
	out := "number of failed transactions: 3 (0.010%)\nlatency average = 3.9 ms\ntps = 12545.678 (without initial connection time)\n"
	tps, failed, err := parsePgbench(out)
	if err != nil || tps != 12545.678 || failed != 3 {
		t.Fatalf("parsePgbench() = %v, %v, %v; want 12545.678, 3, nil", tps, failed, err)
	}
}

// TestReport writes the report, the plot and the JSON of a made-up run.
func TestReport(t *testing.T) {
	r := &Report{
		Started: time.Now(), Machine: Machine{CPUs: 2, CPU: "test"},
		Options: ReportOptions{Duration: "1s", Callers: 50, Contend: 64, Targets: allTargets, Clients: []string{clientClaimload}, Scenarios: allScenarios, Command: "make bench"},
	}
	ok := true
	for i, tg := range allTargets {
		for _, sc := range allScenarios {
			if !measures(tg, sc) {
				continue
			}
			x := Result{Target: tg, Scenario: sc, Client: clientClaimload, Seconds: 1, Requests: 1000, Rate: float64(1000 * (i + 1)), P50: 1, P99: 5,
				CPU: map[string]float64{"server": 0.5, "client": 0.3}}
			if sc == scenarioContend && tg == targetClaimd {
				x.Check, x.CheckOK = "1 ACQUIRED", &ok
			}
			if lifecycle(sc) {
				x.RPCs = map[string]RPCLatency{"claim": {Calls: 1000, P50: 1, P99: 4}, "settle": {Calls: 1000, P50: 2, P99: 12}}
			}
			r.Runs = append(r.Runs, x)
		}
	}
	r.Scaling = []Result{{Target: targetReplicas(2), Scenario: scenarioLifecycle, Replicas: 2, Seconds: 1, Requests: 500, Rate: 500,
		RPCs: map[string]RPCLatency{"claim": {P99: 3}}, CPU: map[string]float64{"server": 0.1}}}
	r.Options.PyThreads = 8
	r.Python = []Result{
		{Target: pyPowertools, Scenario: pyFirst, Seconds: 1, Requests: 2000, Rate: 2000, P50: 2, CPU: map[string]float64{"redis": 0.1}},
		{Target: pyClaimd, Scenario: pyFirst, Seconds: 1, Requests: 1000, Rate: 1000, P50: 4, CPU: map[string]float64{"server": 0.2}},
	}
	r.Low = []Result{{Target: targetClaimd, Scenario: scenarioLifecycleStart, Callers: 8, Seconds: 1, Requests: 1000, Rate: 1000,
		RPCs:          map[string]RPCLatency{"claim": {P50: 1.5, P99: 3}, "settle": {P50: 2, P99: 4}},
		CPU:           map[string]float64{"server": 0.1, "redis": 0.05, "postgres": 0.1},
		RedisCommands: 2500, ScriptCalls: 2000, PGWrites: 1100}}
	r.OpenLoop = []Result{{Target: targetEmbedded, Scenario: scenarioLifecycle, Seconds: 1, Requests: 1000, Rate: 998, Due: 1000, Late: 2, MaxLag: 3.5,
		RPCs: map[string]RPCLatency{"claim": {P50: 1, P99: 4, P999: 9}, "settle": {P50: 1, P99: 6, P999: 25}},
		CPU:  map[string]float64{"server": 0.2}},
		{Target: targetNoop, Scenario: scenarioNew, Seconds: 1, Requests: 3000, Rate: 3000, Due: 3000, P50: 0.5, P99: 2, P999: 4, MaxLag: 1.5,
			CPU: map[string]float64{"server": 0.06, "client": 0.09}}}
	growthRun := func(cpu, p99 float64) Result {
		return Result{Seconds: 1, Requests: 1000, Rate: 1000, P99: p99, CPU: map[string]float64{"server": cpu}, RedisCommands: 3000, PGWrites: 400}
	}
	r.Growth = []Growth{
		{StoredClaims: 100_000, AuditRows: 300_000, ClaimsBytes: 50 << 20, AuditBytes: 70 << 20, Run: growthRun(0.1, 5)},
		{StoredClaims: 10_000_000, AuditRows: 30_000_000, RedisKeys: 1_000_000, ClaimsBytes: 5 << 30, AuditBytes: 7 << 30, Run: growthRun(0.13, 5.5)},
	}
	r.PartitionDrop = &PartitionDrop{Partition: "audit_log_y2026m11", Rows: 30_000_000, Bytes: 7 << 30, Seconds: 0.4, Run: growthRun(0.1, 9)}
	dir := t.TempDir()
	md, svg := filepath.Join(dir, "BENCHMARKS.md"), filepath.Join(dir, "results.svg")
	if err := writeSVG(svg, r); err != nil {
		t.Fatal(err)
	}
	if err := writeMarkdown(md, r, svg, filepath.Join(dir, "results.json"), filepath.Join(dir, "missing-notes.md")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| growth: new-key claim at 10^7 stored claims: CPU ≤ 1.2× at 10^5 | claimload | 130 / 100 µs = 1.30× | – / – | – / – | **no** |",
		"| growth: new-key claim at 10^7 stored claims: p99 ≤ 1.2× at 10^5 | claimload | 5.50 / 5.00 ms = 1.10× | – / – | – / – | yes |",
		"| dropping a month's audit partition (30,000,000 rows) under load < 1 s | claimload | 0.40 s (`claimd prune`, start to exit) | – | – | yes |",
		"| 10^7 | 30,000,000 | 10^6 | 5.00 | 7.00 | 0 | 0 | 1000 | 0.00 | 5.50 | 0 | 130 | – | – | – | 130 | 3.00 | 0.40 |",
		"At 10^7 stored claims: 537 bytes per claim",
		"## Targets", "| all new keys | claimd Redis+PG | claimload | 5000 |",
		"| lifecycle: Claim → PROCESSING → SETTLED: CPU per event ≤ 0.35× the naive handler's | claimload | 500 / 500 µs = 1.00× | – / – | 300.0 / 300.0 | **no** |",
		"| 8 callers, Claim(start) → SETTLED: CPU per event ≤ 300 µs | claimload | 250 µs (claimd 100, Redis 50, PostgreSQL 100) | – | – | yes |",
		"| 8 callers, Claim(start) → SETTLED: Redis commands per event ≤ 3 | claimload | 2.50 (2.00 of them scripts; a script's own calls count) | – | – | yes |",
		"| 8 callers, Claim(start) → SETTLED: PostgreSQL commits per event ≤ 1.0 | claimload | 1.10 (transactions that wrote, each a WAL flush) | – | – | **no** |",
		"| 8 callers, Claim(start) → SETTLED: p50 per event ≤ 4 ms | claimload | 3.50 ms (the sum of its RPCs' p50s) | – | – | yes |",
		"| Python guard, 8 threads, first deliveries: p50 ≤ 1.5× Powertools' (Redis, appendfsync always) | python | 4.00 / 2.00 ms = 2.00× | – / – | – | **no** |",
		"| open loop, claimd embedded at 1000 events/s due (half the naive handler's): p99 per RPC ≤ 5 ms | claimload | 6.00 ms (2 late, max lag 3.5 ms) | – | – | **no** |",
		"| open loop, claimd embedded: p99.9 per RPC ≤ 20 ms | claimload | 25.00 ms (settle) | – | – | **no** |",
		"| claimd embedded | 1000 | 998 | 1.00 / 4.00 / 9.00 | – | 1.00 / 6.00 / 25.00 | 2 | 3.5 | 0 | 200 |",
		"the no-op handler, which answers a Claim at once, with Claims due at 3000 a second (3 per event: the same RPCs a second) from the same client, p50/p99/p99.9 0.50 / 2.00 / 4.00 ms, 0 late, max lag 1.5 ms, 0 errors; the no-op handler's CPU 20 µs and the client's 30 µs per call.",
		"| claimd Redis+PG | 1000 | 1.50 / 3.00 | 2.00 / 4.00 | 3.50 | 0 | 100 | 50 | 100 | – | 250 | 2.50 | 2.00 | 1.10 |",
		"| embedded new keys: fsync per commit (full) ≥ 0.8× relaxed rps | claimload | 3000 / 4000 rps = 0.75× | – / – | 300.0 / 300.0 | **no** |",
		"| all new keys | claimd embedded relaxed | claimload | 4000 |",
		"![rate and p99 by scenario](results.svg)",
		"## Lifecycle: whole webhook events",
		"| lifecycle: Claim → PROCESSING → SETTLED | claimd Redis+PG | 5000 | 1.00 / 4.00 | – | 2.00 / 12.00 | 0 | 500 | – | – | 300 | 500 |",
		"| 2 | 500 | 3.00 | – | – | 0 | 200 | – | – | – | 200 |",
		"| first | claimd guard | 1000 | 4.00 | 0.00 | 0 | 200 | – | – | – | 200 |",
		"First deliveries: claimd's guard at 0.50× Powertools' events/s and 2.00× its p50",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "open loop, no-op handler") {
		t.Errorf("the open loop's floor is a target row:\n%s", b)
	}
}

// TestMeasures: the relaxed embedded tier runs only the scenario it is the
// yardstick for, the no-op handler (every Claim a DUPLICATE) no lifecycle,
// the heap headroom's yardstick only new keys and whole events; every other
// target runs every scenario.
func TestMeasures(t *testing.T) {
	for _, tg := range allTargets {
		for _, sc := range allScenarios {
			want := (tg != targetEmbeddedRelaxed || sc == scenarioNew) && (tg != targetNoop || !lifecycle(sc)) &&
				(tg != targetClaimdHeap || sc == scenarioNew || lifecycle(sc))
			if got := measures(tg, sc); got != want {
				t.Errorf("measures(%q, %q) = %v, want %v", tg, sc, got, want)
			}
		}
	}
}

// TestClientRuns: ghz sends single Claims, so only claimload runs whole
// events.
func TestClientRuns(t *testing.T) {
	for _, sc := range allScenarios {
		if !clientRuns(clientClaimload, sc) {
			t.Errorf("clientRuns(claimload, %q) = false, want true", sc)
		}
		if got, want := clientRuns(clientGhz, sc), !lifecycle(sc); got != want {
			t.Errorf("clientRuns(ghz, %q) = %v, want %v", sc, got, want)
		}
	}
}

func TestReadPeakRSS(t *testing.T) {
	before, err := readPeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	grown := make([]byte, 64<<20)
	for i := range grown {
		grown[i] = 1 // touch every page, so it is resident
	}
	after, err := readPeakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || after < before+60 {
		t.Errorf("peak RSS %.1f MiB before and %.1f MiB after touching 64 MiB, want it to grow by about 64", before, after)
	}
	runtime.KeepAlive(grown)
}

// budgetReport is a report of runs on 2 cores, with the budget tables'
// baselines: Redis 10 µs per SET NX, PostgreSQL 20 µs per row.
func budgetReport(runs ...Result) *Report {
	return &Report{Machine: Machine{CPUs: 2}, Runs: runs,
		Baselines: []Result{
			{Target: baselineRedis, Rate: 100000, Seconds: 1, CPU: map[string]float64{"redis": 1}},
			{Target: baselinePgBatch, Rate: 50000, Seconds: 1, CPU: map[string]float64{"postgres": 1}},
		},
	}
}

// TestLifecycleBudget: a whole event's CPU against what 3× the naive
// handler's events/s leaves it, the floors counted per RPC and per row.
func TestLifecycleBudget(t *testing.T) {
	report := func(naiveRate float64) string {
		r := budgetReport(
			Result{Target: targetClaimd, Scenario: scenarioLifecycle, Client: clientClaimload, Requests: 1000, Rate: 2000,
				CPU: map[string]float64{"server": 0.3, "client": 0.12, "redis": 0.06, "postgres": 0.18}},
			Result{Target: targetNaive, Scenario: scenarioLifecycle, Client: clientClaimload, Requests: 1000, Rate: naiveRate},
			Result{Target: targetNoop, Scenario: scenarioNew, Client: clientClaimload, Requests: 1000, Rate: 20000, Seconds: 10, MachineBusy: 16,
				CPU: map[string]float64{"server": 0.03, "client": 0.02}},
		)
		return written(writeLifecycleBudget, r)
	}
	// Floors of three RPCs and six rows: client 3 × 20, claimd 3 × 30,
	// Redis 3 × 10, PostgreSQL 6 × 20.
	wantContains(t, "lifecycle budget, naive at 500 events/s", report(500),
		"| load client | 120.0 | 60.0 |", "| claimd | 300.0 | 90.0 |", "| Redis | 60.0 | 30.0 |", "| PostgreSQL | 180.0 | 120.0 |",
		"| all four | 660.0 | 300.0 |",
		"3 × the naive handler's 500 events/s leaves each event at most 1333 µs with every core busy, 1067 µs as busy as the no-op run (80%)",
		"the floors (300 µs) are under both, and claimd's run spent 360 µs above them, 210 in claimd above its bare gRPC calls")
	// Budgets of 333 µs (267 at the no-op run's utilization) and 133 µs.
	wantContains(t, "lifecycle budget, naive at 2000 events/s", report(2000), "the floors (300 µs) are under the first and above the second")
	wantContains(t, "lifecycle budget, naive at 5000 events/s", report(5000), "the floors alone (300 µs) exceed it")
	if got := report(0); got != "" {
		t.Errorf("lifecycle budget without a naive rate = %q, want nothing", got)
	}
}

// TestLowFloor: the low-concurrency event's CPU beside the floors of its
// two calls (the no-op handler's at the same concurrency), two Redis
// commands and four rows, and the verdict against the 300 µs target.
func TestLowFloor(t *testing.T) {
	report := func(noopServer float64) string {
		r := budgetReport()
		r.Baselines = append(r.Baselines, Result{Target: baselinePgSingle, Callers: 50, Rate: 10000, Seconds: 1, CPU: map[string]float64{"postgres": 1}})
		r.Low = []Result{
			{Target: targetNoop, Scenario: scenarioNew, Callers: 8, Requests: 1000, Rate: 9000, CPU: map[string]float64{"server": noopServer, "client": 0.02}},
			{Target: targetClaimd, Scenario: scenarioLifecycleStart, Callers: 8, Requests: 1000, PGWrites: 750,
				CPU: map[string]float64{"server": 0.25, "client": 0.15, "redis": 0.03, "postgres": 0.25}},
		}
		return written(writeLowFloor, r)
	}
	// Floors: client 2 × 20, claimd 2 × 30, Redis 2 × 10, PostgreSQL 4 × 20.
	wantContains(t, "low floor", report(0.03),
		"| load client | 150.0 | 40.0 | 2 × its CPU per call against the no-op handler, 8 callers |",
		"| claimd | 250.0 | 60.0 |", "| Redis | 30.0 | 20.0 |", "| PostgreSQL | 250.0 | 80.0 |", "| all four | 680.0 | 200.0 | |",
		"530 µs spent against floors of 160",
		"claimd's run spent 370 µs above them, 190 in claimd above its bare gRPC calls and 170 in PostgreSQL above its rows",
		"costs PostgreSQL 100.0 µs; claimd's run committed 0.75 times per event")
	// A no-op call of 110 µs: floors of 220 + 20 + 80 µs.
	wantContains(t, "low floor over the target", report(0.11), "The floors alone exceed its 300 µs")
	if got := written(writeLowFloor, budgetReport()); got != "" {
		t.Errorf("low floor without low runs = %q, want nothing", got)
	}
}

// written is what write writes of r.
func written(write func(*strings.Builder, *Report), r *Report) string {
	var w strings.Builder
	write(&w, r)
	return w.String()
}

// wantContains fails t for each of wants that got lacks.
func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, got)
		}
	}
}

// TestBudget: a new-key claim's CPU against what 3× the naive handler's
// rate leaves it, with each process's floor from the same run.
func TestBudget(t *testing.T) {
	report := func(naiveRate float64) string {
		r := budgetReport(
			Result{Target: targetClaimd, Scenario: scenarioNew, Client: clientClaimload, Requests: 1000, Rate: 5000, Callers: 50, Seconds: 10, MachineBusy: 14,
				CPU: map[string]float64{"server": 0.1, "client": 0.05, "redis": 0.04, "postgres": 0.05}},
			Result{Target: targetNaive, Scenario: scenarioNew, Client: clientClaimload, Requests: 1000, Rate: naiveRate},
			Result{Target: targetNoop, Scenario: scenarioNew, Client: clientClaimload, Requests: 1000, Rate: 20000, Seconds: 10, MachineBusy: 16,
				CPU: map[string]float64{"server": 0.03, "client": 0.03}},
		)
		return written(writeBudget, r)
	}
	wantContains(t, "budget, naive at 1000 claims/s", report(1000),
		"3 × 1000 claims/s) leaves each claim at most 667 µs",
		"| claimd | 100.0 | 30.0 |", "| load client | 50.0 | 30.0 |", "| Redis | 40.0 | 10.0 |", "| PostgreSQL | 50.0 | 40.0 |",
		"| all four | 240.0 | 110.0 | budget for 3× naive: 667 |",
		"The floors sum to 110 µs, under the budget", "130 µs spent above the floors, 70 of them in claimd",
		"closed loop of 50 callers", "kept the cores 80% busy, claimd's 70%", "the budget is 533 µs per claim, and the floors are under it as well",
		"would have answered 5714 claims/s, 5.71× the naive handler (it measured 5.00×)")
	// Budgets of 133 µs (107 at the no-op run's utilization) and 67 µs,
	// against floors of 110 µs.
	wantContains(t, "budget, naive at 5000 claims/s", report(5000), "the budget is 107 µs per claim, and the floors are above it")
	wantContains(t, "budget, naive at 10000 claims/s", report(10000), "The floors alone exceed the budget")
	if got := report(0); got != "" {
		t.Errorf("budget without a naive rate = %q, want nothing", got)
	}
}

// TestCommandCounts sums INFO commandstats' calls, the scripts apart, and
// leaves out the harness's own INFO.
func TestCommandCounts(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_get:calls=3,usec=3,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=2,usec=97,usec_per_call=48.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=130,usec_per_call=130.00,rejected_calls=0,failed_calls=0\r\n"
	if cmds, scripts := commandCounts(info); cmds != 6 || scripts != 2 {
		t.Fatalf("commandCounts() = %d, %d; want 6, 2", cmds, scripts)
	}
}
