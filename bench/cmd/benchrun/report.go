package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// displayNames name the targets in the report.
var displayNames = map[string]string{
	targetNoop:            "no-op handler",
	targetNaive:           "naive handler",
	targetEmbedded:        "claimd embedded",
	targetEmbeddedRelaxed: "claimd embedded relaxed",
	targetClaimd:          "claimd Redis+PG",
	targetClaimdHeap:      "claimd Redis+PG, heap headroom 128 MiB",
}

var scenarioNames = map[string]string{
	scenarioLifecycle:      "lifecycle: Claim → PROCESSING → SETTLED",
	scenarioLifecycleStart: "lifecycle: Claim(start) → SETTLED",
	scenarioNew:            "all new keys",
	scenarioDup:            "all duplicates (settled)",
	scenarioMix:            "90% dup / 10% new",
	scenarioContend:        "one key, contended",
}

func display(m map[string]string, k string) string {
	if v, ok := m[k]; ok {
		return v
	}
	return k
}

// find returns the run of target, scenario and client, or nil.
func (r *Report) find(target, scenario, client string) *Result {
	for i := range r.Runs {
		x := &r.Runs[i]
		if x.Target == target && x.Scenario == scenario && x.Client == client {
			return x
		}
	}
	return nil
}

// cpuColumns are the processes whose CPU seconds the tables show.
var cpuColumns = []string{"server", "redis", "postgres", "client"}

// writeMarkdown writes the report. notes (a file of hand-written analysis)
// is included when it exists.
func writeMarkdown(path string, r *Report, svg, jsonPath, notes string) error {
	svgRel, jsonRel := relPath(path, svg), relPath(path, jsonPath)
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	secs := r.Options.Duration

	p("# Benchmarks\n\n")
	p("<!-- Written by `make bench` (scripts/bench.sh → bench/cmd/benchrun); edit bench/NOTES.md or the harness, not this file. -->\n\n")
	p("Measured %s on one machine, every figure in the same run: %d × %s, %.1f GiB RAM, Linux %s. ",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Machine.CPUs, r.Machine.CPU, r.Machine.MemoryGiB, r.Machine.Kernel)
	p("Load average (1/5/15 min) %s before the run and %s after it (the run itself keeps about %d busy); ", r.Machine.LoadBefore, r.Machine.LoadAfter, r.Machine.CPUs)
	p("the \"other\" column of [Where the CPU went](#where-the-cpu-went) shows, run by run, how much CPU went to anything but the processes measured.\n\n")
	p("Command: `%s`\n\n", r.Options.Command)
	p("Each load run: %d callers (%d on the contended key), closed loop, %s, over one gRPC connection, loopback. ", r.Options.Callers, r.Options.Contend, secs)
	p("PostgreSQL runs with fsync and synchronous_commit on. claimd runs as `claimd %s` plus its tier flags. ", r.Options.ClaimdArgs)
	p("CPU is in seconds over the run, read from /proc/<pid>/stat for the server, redis-server and every PostgreSQL process (backends, autovacuum and the checkpointer included), and from the load client's rusage. ")
	p("The targets run one after the other (each settles %d keys first for the duplicate scenarios), then the baselines; after each target the harness drops its database, flushes Redis and checkpoints, so no run pays for vacuuming the previous one's rows.\n\n", r.Options.DupKeys)
	// The headline first: the targets, then whole webhook events at full
	// load, few callers and a fixed rate, the Python comparison, the
	// budgets and the scaling runs; the per-scenario detail (rates, CPU per
	// request of every process, baselines) after them.
	writeTargets(&w, r)
	writeLifecycle(&w, r)
	writeLow(&w, r)
	writeOpenLoop(&w, r)
	writePython(&w, r)
	writeGrowth(&w, r)
	writeBudget(&w, r)
	writeLifecycleBudget(&w, r)
	writeScaling(&w, r)
	p("![rate and p99 by scenario](%s)\n\n", svgRel)
	writeRuns(&w, r)
	writeCPUPerRequest(&w, r)
	w.WriteString(profileTable(r))
	writeCPUShares(&w, r)
	writeBaselines(&w, r)
	writeRatios(&w, r)
	if b, err := os.ReadFile(notes); err == nil {
		p("## Analysis\n\n%s\n", strings.TrimSpace(string(b)))
		p("\n")
	}
	p("## Versions\n\n| component | version |\n| --- | --- |\n")
	for _, v := range r.Versions {
		p("| %s | %s |\n", v.Name, strings.ReplaceAll(v.Value, "|", "/"))
	}
	p("\nRaw figures: [%s](%s).\n", jsonRel, jsonRel)
	return os.WriteFile(path, []byte(w.String()), 0o644)
}

// writeTargets states whether the targets were met: first the current
// issue's (CPU per event against the floor and the naive handler's, the
// low-concurrency path, the open loop, memory), then the standing ones of
// earlier rounds (duplicates against the no-op handler, the embedded
// tier's fsync, the contended key).
func writeTargets(w *strings.Builder, r *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Targets\n\n")
	p("\"other\" is the share of the machine that went to work other than the processes measured during the runs compared (see [Where the CPU went](#where-the-cpu-went)); a comparison where it is large on one side only is unfair to that side. ")
	p("\"client µs/op\" is the load client's own CPU per request (per event in the lifecycle) in each run compared, a speed check where the two runs went at about the same rate (duplicates against the no-op handler): the client then does the same work whichever server answers, so when the two differ by more than a tenth or so, this shared machine ran at another speed in one of the runs and the ratio is off by about as much. Against a slower server the client pays more per request anyway (its goroutines wake from idle for each answer instead of finding the next one ready), so there the column shows that, not the machine. ")
	p("CPU per event or claim is the server side's: claimd, Redis and PostgreSQL together (the load client apart). Rates, and their ratios to the baselines, are in the tables below, not targets.\n\n")
	p("| target | client | figure | other | client µs/op | met |\n| --- | --- | --- | --- | --- | --- |\n")
	if c, f, ok := newKeyFloor(r); ok {
		p("| new-key claim: CPU ≤ 1.25× the floor | claimload | %.0f / %.0f µs = %.2f× (claimd %.0f, Redis %.0f, PostgreSQL %.0f; floor: [below](#a-new-key-claim-against-its-budget)) | %s | %s | %s |\n",
			serverCPU(c), f, serverCPU(c)/f, perCall(c, "server"), perCall(c, "redis"), perCall(c, "postgres"), r.other(c), clientCost(c), yes(serverCPU(c) <= 1.25*f))
	}
	for _, sc := range []string{scenarioLifecycle, scenarioLifecycleStart} {
		c, n := r.find(targetClaimd, sc, clientClaimload), r.find(targetNaive, sc, clientClaimload)
		if c == nil || n == nil || c.Requests == 0 || n.Requests == 0 {
			continue
		}
		ratio := serverCPU(c) / serverCPU(n)
		p("| %s: CPU per event ≤ 0.35× the naive handler's | claimload | %.0f / %.0f µs = %.2f× | %s / %s | %s / %s | %s |\n",
			display(scenarioNames, sc), serverCPU(c), serverCPU(n), ratio, r.other(c), r.other(n), clientCost(c), clientCost(n), yes(ratio <= 0.35))
	}
	if c := r.findLow(targetClaimd); c != nil && c.Requests > 0 {
		name := fmt.Sprintf("%d callers, Claim(start) → SETTLED", c.Callers)
		ev := float64(c.Requests)
		p("| %s: CPU per event ≤ %d µs | claimload | %.0f µs (claimd %.0f, Redis %.0f, PostgreSQL %.0f) | %s | %s | %s |\n",
			name, lowCPUTarget, serverCPU(c), perCall(c, "server"), perCall(c, "redis"), perCall(c, "postgres"), r.other(c), clientCost(c), yes(serverCPU(c) <= lowCPUTarget))
		p("| %s: Redis commands per event ≤ 3 | claimload | %.2f (%.2f of them scripts; a script's own calls count) | %s | %s | %s |\n",
			name, float64(c.RedisCommands)/ev, float64(c.ScriptCalls)/ev, r.other(c), clientCost(c), yes(float64(c.RedisCommands)/ev <= 3))
		p("| %s: PostgreSQL commits per event ≤ 1.0 | claimload | %.2f (transactions that wrote, each a WAL flush) | %s | %s | %s |\n",
			name, float64(c.PGWrites)/ev, r.other(c), clientCost(c), yes(float64(c.PGWrites)/ev <= 1))
		p50 := eventP50(c)
		p("| %s: p50 per event ≤ 4 ms | claimload | %.2f ms (the sum of its RPCs' p50s) | %s | %s | %s |\n", name, p50, r.other(c), clientCost(c), yes(p50 <= 4))
	}
	if c, pt := r.findPython(pyClaimd, pyFirst), r.findPython(pyPowertools, pyFirst); c != nil && pt != nil && pt.Rate > 0 && pt.P50 > 0 {
		p("| Python guard, %d threads, first deliveries: p50 ≤ 1.5× Powertools' (Redis, appendfsync always) | python | %.2f / %.2f ms = %.2f× | %s / %s | – | %s |\n",
			r.Options.PyThreads, c.P50, pt.P50, c.P50/pt.P50, r.other(c), r.other(pt), yes(c.P50 <= 1.5*pt.P50))
		p("| Python guard, %d threads, first deliveries: events/s ≥ 0.67× Powertools' | python | %.0f / %.0f = %.2f× | %s / %s | – | %s |\n",
			r.Options.PyThreads, c.Rate, pt.Rate, c.Rate/pt.Rate, r.other(c), r.other(pt), yes(c.Rate >= pt.Rate/1.5))
	}
	for i := range r.OpenLoop {
		x := &r.OpenLoop[i]
		if x.Target == targetNoop {
			continue // the floor, in its section
		}
		p99, p999 := worstRPC(x)
		p("| open loop, %s at %.0f events/s due (half the naive handler's): p99 per RPC ≤ 5 ms | claimload | %.2f ms (%d late, max lag %.1f ms) | %s | %s | %s |\n",
			display(displayNames, x.Target), x.Due, p99.v, x.Late, x.MaxLag, r.other(x), clientCost(x), yes(p99.v <= 5))
		p("| open loop, %s: p99.9 per RPC ≤ 20 ms | claimload | %.2f ms (%s) | %s | %s | %s |\n",
			display(displayNames, x.Target), p999.v, p999.rpc, r.other(x), clientCost(x), yes(p999.v <= 20))
	}
	if len(r.Growth) > 1 {
		base := &r.Growth[0]
		for i := range r.Growth[1:] {
			g := &r.Growth[i+1]
			cpu, p99 := serverCPU(&g.Run)/serverCPU(&base.Run), g.Run.P99/base.Run.P99
			p("| growth: new-key claim at %s stored claims: CPU ≤ 1.2× at %s | claimload | %.0f / %.0f µs = %.2f× | %s / %s | %s / %s | %s |\n",
				count(g.StoredClaims), count(base.StoredClaims), serverCPU(&g.Run), serverCPU(&base.Run), cpu, r.other(&g.Run), r.other(&base.Run), clientCost(&g.Run), clientCost(&base.Run), yes(cpu <= 1.2))
			p("| growth: new-key claim at %s stored claims: p99 ≤ 1.2× at %s | claimload | %.2f / %.2f ms = %.2f× | %s / %s | %s / %s | %s |\n",
				count(g.StoredClaims), count(base.StoredClaims), g.Run.P99, base.Run.P99, p99, r.other(&g.Run), r.other(&base.Run), clientCost(&g.Run), clientCost(&base.Run), yes(p99 <= 1.2))
		}
	}
	if d := r.PartitionDrop; d != nil {
		p("| dropping a month's audit partition (%s rows) under load < 1 s | claimload | %.2f s (`claimd prune`, start to exit) | %s | %s | %s |\n",
			count(d.Rows), d.Seconds, r.other(&d.Run), clientCost(&d.Run), yes(d.Seconds < 1))
	}
	if peak, ok := r.peakRSS(targetClaimd); ok {
		p("| claimd Redis+PG: peak RSS under the standard load ≤ 128 MiB | both | %.0f MiB | – | – | %s |\n", peak, yes(peak <= 128))
		if before, ok := r.peakRSS(targetClaimdHeap); ok {
			for _, sc := range []string{scenarioLifecycle, scenarioNew} {
				c, h := r.find(targetClaimd, sc, clientClaimload), r.find(targetClaimdHeap, sc, clientClaimload)
				if c == nil || h == nil || c.Requests == 0 || h.Requests == 0 {
					continue
				}
				p("| what the default heap headroom costs, %s: claimd's CPU per %s against %d MiB of headroom (peak RSS %.0f against %.0f MiB), p99 %.2f against %.2f ms | claimload | %.0f / %.0f µs = %.2f× | %s / %s | %s / %s | – |\n",
					display(scenarioNames, sc), unitName(c), heapHeadroomBefore, peak, before, c.P99, h.P99, perCall(c, "server"), perCall(h, "server"), perCall(c, "server")/perCall(h, "server"),
					r.other(c), r.other(h), clientCost(c), clientCost(h))
			}
		}
	}
	for _, cl := range r.Options.Clients {
		c, o := r.find(targetClaimd, scenarioDup, cl), r.find(targetNoop, scenarioDup, cl)
		if c != nil && o != nil {
			ratio := c.Rate / o.Rate
			p("| duplicates ≥ 0.9× no-op rps | %s | %.0f / %.0f rps = %.2f× | %s / %s | %s / %s | %s |\n", cl, c.Rate, o.Rate, ratio, r.other(c), r.other(o), clientCost(c), clientCost(o), yes(ratio >= 0.9))
		}
		f, rl := r.find(targetEmbedded, scenarioNew, cl), r.find(targetEmbeddedRelaxed, scenarioNew, cl)
		if f != nil && rl != nil {
			ratio := f.Rate / rl.Rate
			p("| embedded new keys: fsync per commit (full) ≥ 0.8× relaxed rps | %s | %.0f / %.0f rps = %.2f× | %s / %s | %s / %s | %s |\n", cl, f.Rate, rl.Rate, ratio, r.other(f), r.other(rl), clientCost(f), clientCost(rl), yes(ratio >= 0.8))
		}
		for _, t := range []string{targetClaimd, targetEmbedded} {
			if c := r.find(t, scenarioContend, cl); c != nil && c.CheckOK != nil {
				p("| contended key: one ACQUIRED, no error (%s) | %s | %s; %d errors | %s | %s | %s |\n", display(displayNames, t), cl, c.Check, c.Errors, r.other(c), clientCost(c), yes(*c.CheckOK))
			}
		}
	}
	p("\n")
}

// unitName is what x's runs count: a claim or an event.
func unitName(x *Result) string {
	if lifecycle(x.Scenario) {
		return "event"
	}
	return "claim"
}

// serverCPU is x's server-side CPU per request (per event): claimd (or
// the handler), Redis and PostgreSQL, in µs.
func serverCPU(x *Result) float64 {
	return perCall(x, "server") + perCall(x, "redis") + perCall(x, "postgres")
}

// newKeyFloor is claimd's new-key claim run (Redis+PG, claimload) and the
// floor of its server side: what the no-op handler spends on a gRPC call,
// Redis on one SET NX, PostgreSQL on two rows (the claim and its audit
// row), each measured in this run.
func newKeyFloor(r *Report) (*Result, float64, bool) {
	c, o := r.find(targetClaimd, scenarioNew, clientClaimload), r.find(targetNoop, scenarioNew, clientClaimload)
	rb, pb := r.baseline(baselineRedis), r.baseline(baselinePgBatch)
	if c == nil || o == nil || rb == nil || pb == nil || c.Requests == 0 || o.Requests == 0 || rb.Rate == 0 || pb.Rate == 0 {
		return nil, 0, false
	}
	return c, perCall(o, "server") + perUnit(rb, "redis") + 2*perUnit(pb, "postgres"), true
}

// eventP50 is a lifecycle run's p50 per event: the sum of its RPCs' p50s.
func eventP50(x *Result) float64 {
	sum := 0.0
	for _, l := range x.RPCs {
		sum += l.P50
	}
	return sum
}

// named is a latency and the RPC it belongs to.
type named struct {
	v   float64
	rpc string
}

// worstRPC is the slowest RPC of a lifecycle run at p99 and at p99.9.
func worstRPC(x *Result) (p99, p999 named) {
	for name, l := range x.RPCs {
		if l.P99 > p99.v {
			p99 = named{l.P99, name}
		}
		if l.P999 > p999.v {
			p999 = named{l.P999, name}
		}
	}
	return p99, p999
}

// findLow is the low-concurrency Claim(start) → SETTLED run of target, or
// nil.
func (r *Report) findLow(target string) *Result {
	return r.findLowOf(target, scenarioLifecycleStart)
}

// findLowOf is the low-concurrency run of target and scenario, or nil.
func (r *Report) findLowOf(target, scenario string) *Result {
	for i := range r.Low {
		if x := &r.Low[i]; x.Target == target && x.Scenario == scenario {
			return x
		}
	}
	return nil
}

// findPython is the Python baseline's run of impl and mode, or nil.
func (r *Report) findPython(impl, mode string) *Result {
	for i := range r.Python {
		if x := &r.Python[i]; x.Target == impl && x.Scenario == mode {
			return x
		}
	}
	return nil
}

// peakRSS is the largest peak RSS of target's standard runs.
func (r *Report) peakRSS(target string) (float64, bool) {
	peak := 0.0
	for i := range r.Runs {
		if x := &r.Runs[i]; x.Target == target {
			peak = max(peak, x.ServerPeakRSS)
		}
	}
	return peak, peak > 0
}

// count writes n as 10^k when it is a power of ten, else with separators.
func count(n int64) string {
	k := 0
	for m := n; m >= 10 && m%10 == 0; m /= 10 {
		k++
	}
	if n > 0 && n == pow10(k) && k >= 3 {
		return fmt.Sprintf("10^%d", k)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func pow10(k int) int64 {
	n := int64(1)
	for range k {
		n *= 10
	}
	return n
}

// writeGrowth is the new-key runs at growing stored work.
func writeGrowth(w *strings.Builder, r *Report) {
	if len(r.Growth) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Growth: cost against stored work\n\n")
	p("New keys on one claimd (Redis + PostgreSQL), %d callers, claimload, %s, after its database was topped up to each size with settled claims copied from one claimd claimed and settled itself (every column, index and partition its own), each with its three audit rows, in last month's audit partition; then VACUUM ANALYZE and a checkpoint, as autovacuum would have done. ", r.Options.Callers, r.Options.Duration)
	p("From %s stored claims on, Redis holds %s settled records, put there by claimd (a duplicate of each, answered from PostgreSQL, repairs its copy). Sizes are with indexes (pg_total_relation_size; Redis's used_memory).\n\n", count(growthRedisKeys), count(growthRedisKeys))
	p("| stored claims | audit rows | Redis keys | claims GiB | audit GiB | Redis MiB | loaded in s | rps | p50 ms | p99 ms | errors | CPU µs/claim server | redis | postgres | client | server+redis+postgres | Redis commands/claim | PostgreSQL writes/claim |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i := range r.Growth {
		g := &r.Growth[i]
		x := &g.Run
		per := func(n int64) string {
			if x.Requests == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f", float64(n)/float64(x.Requests))
		}
		p("| %s | %s | %s | %.2f | %.2f | %.0f | %.0f | %.0f | %.2f | %.2f | %s | %s | %s | %s | %s |\n", count(g.StoredClaims), count(g.AuditRows), count(g.RedisKeys),
			float64(g.ClaimsBytes)/(1<<30), float64(g.AuditBytes)/(1<<30), float64(g.RedisBytes)/(1<<20), g.LoadSeconds,
			x.Rate, x.P50, x.P99, errorsCell(x), perRequestCells(x), serverTotal(x), per(x.RedisCommands), per(x.PGWrites))
	}
	if n := len(r.Growth); n > 0 && r.Growth[n-1].StoredClaims > 0 {
		g := &r.Growth[n-1]
		p("\nAt %s stored claims: %.0f bytes per claim in PostgreSQL's claims table with its indexes, %.0f per audit row (the partitions with theirs).\n", count(g.StoredClaims),
			float64(g.ClaimsBytes)/float64(g.StoredClaims), float64(g.AuditBytes)/float64(max(g.AuditRows, 1)))
	}
	if d := r.PartitionDrop; d != nil {
		p("\nThen `claimd prune`, with a retention that ends at last month's end, dropped %s (%s rows, %.2f GiB) in %.2f s, start to exit, while a new-key load ran: %.0f rps, p99 %.2f ms, %s errors.\n",
			d.Partition, count(d.Rows), float64(d.Bytes)/(1<<30), d.Seconds, d.Run.Rate, d.Run.P99, errorsCell(&d.Run))
	}
	p("\n")
}

// writeLow is the low-concurrency runs: a receiver's few workers, each
// doing one event at a time.
func writeLow(w *strings.Builder, r *Report) {
	if len(r.Low) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## The low-concurrency path\n\n")
	p("Claim(start) → SETTLED on new keys from %d callers (claimload, closed loop, %s), the way a receiver with a few workers runs, after each target's standard runs (its tables hold their rows). ", r.Low[0].Callers, r.Options.Duration)
	p("Redis commands are INFO commandstats' calls over the run (a script's own calls included, the harness's INFO readings not); PostgreSQL writes are the transaction ids assigned over the run, cluster-wide: each a transaction that wrote and so a WAL flush at commit.\n\n")
	p("| target | events/s | claim p50/p99 ms | settle p50/p99 ms | p50 per event ms | errors | CPU µs/event server | redis | postgres | client | server+redis+postgres | Redis commands/event | scripts/event | PostgreSQL writes/event |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i := range r.Low {
		x := &r.Low[i]
		if x.Scenario != scenarioLifecycleStart {
			continue // the no-op handler's floor, below
		}
		lat := func(rpc string) string {
			if l, ok := x.RPCs[rpc]; ok {
				return fmt.Sprintf("%.2f / %.2f", l.P50, l.P99)
			}
			return "–"
		}
		per := func(n int64) string {
			if x.Requests == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f", float64(n)/float64(x.Requests))
		}
		p("| %s | %.0f | %s | %s | %.2f | %s | %s | %s | %s | %s | %s |\n", display(displayNames, x.Target), x.Rate, lat("claim"), lat("settle"), eventP50(x),
			errorsCell(x), perRequestCells(x), serverTotal(x), per(x.RedisCommands), per(x.ScriptCalls), per(x.PGWrites))
	}
	p("\n")
	writeLowFloor(w, r)
}

// writeLowFloor sets claimd's low-concurrency event (Redis+PG) beside the
// least its parts cost: two gRPC calls as the no-op handler answers them
// from as many callers, two Redis commands and four durable rows (the
// claim and the settle, an audit row each) at their cheapest.
func writeLowFloor(w *strings.Builder, r *Report) {
	c, o := r.findLow(targetClaimd), r.findLowOf(targetNoop, scenarioNew)
	rb, pb := r.baseline(baselineRedis), r.baseline(baselinePgBatch)
	if c == nil || o == nil || rb == nil || pb == nil || c.Requests == 0 || o.Requests == 0 || rb.Rate == 0 || pb.Rate == 0 {
		return
	}
	const rpcs, commands, rows = 2, 2, 4
	procs := []struct {
		name, cpu string
		floor     float64
		how       string
	}{
		{"load client", "client", rpcs * perCall(o, "client"), fmt.Sprintf("%d × its CPU per call against the no-op handler, %d callers", rpcs, o.Callers)},
		{"claimd", "server", rpcs * perCall(o, "server"), fmt.Sprintf("%d × the no-op handler's CPU per call, %d callers (%.0f calls/s): a gRPC call answered at once", rpcs, o.Callers, o.Rate)},
		{"Redis", "redis", commands * perUnit(rb, "redis"), fmt.Sprintf("%d commands × redis-benchmark's Redis CPU per SET NX (%d clients)", commands, rb.Callers)},
		{"PostgreSQL", "postgres", rows * perUnit(pb, "postgres"), fmt.Sprintf("%d rows × pgbench's PostgreSQL CPU per row, %d rows per statement", rows, batchRows)},
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("claimd's event (Redis+PG) against the least its parts cost, each measured in this run (Redis and PostgreSQL at their standard concurrency, where a command or a row costs less than at 8): two gRPC calls, two Redis commands, four rows (the claim and the settle, an audit row each).\n\n")
	p("| process | spent µs | floor µs | floor measured as |\n| --- | ---: | ---: | --- |\n")
	var spent, floor, serverSpent, serverFloor float64
	for i, x := range procs {
		s := perCall(c, x.cpu)
		p("| %s | %.1f | %.1f | %s |\n", x.name, s, x.floor, x.how)
		spent, floor = spent+s, floor+x.floor
		if i > 0 {
			serverSpent, serverFloor = serverSpent+s, serverFloor+x.floor
		}
	}
	p("| all four | %.1f | %.1f | |\n\n", spent, floor)
	p("The target counts claimd, Redis and PostgreSQL: %.0f µs spent against floors of %.0f. ", serverSpent, serverFloor)
	if serverFloor > lowCPUTarget {
		p("The floors alone exceed its %d µs: on this machine no server making these calls and writes meets it.", lowCPUTarget)
	} else {
		p("The floors are under its %d µs; claimd's run spent %.0f µs above them, %.0f in claimd above its bare gRPC calls and %.0f in PostgreSQL above its rows.",
			lowCPUTarget, serverSpent-serverFloor, perCall(c, "server")-procs[1].floor, perCall(c, "postgres")-procs[3].floor)
	}
	if sb := r.baseline(baselinePgSingle); sb != nil && sb.Rate > 0 {
		p(" A row committed alone (pgbench, one row per transaction, %d clients) costs PostgreSQL %.1f µs; claimd's run committed %.2f times per event.",
			sb.Callers, perUnit(sb, "postgres"), float64(c.PGWrites)/float64(c.Requests))
	}
	p("\n\n")
}

// writeOpenLoop is the lifecycle scenario at a fixed arrival rate.
func writeOpenLoop(w *strings.Builder, r *Report) {
	if len(r.OpenLoop) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Open loop: deliveries at their own pace\n\n")
	p("The lifecycle scenario (Claim → PROCESSING → SETTLED) with events due at a fixed rate, half the naive handler's saturated lifecycle rate in this run, up to %d in flight (claimload -rate), each tier mode started afresh. ", r.Options.Callers)
	p("A latency counts from when its event was due, not from when a caller got to send it, so a stall shows in every event it delays (no coordinated omission); \"late\" counts events sent more than claimload's lateness bound after they were due.\n\n")
	p("| target | due events/s | done events/s | claim p50/p99/p99.9 ms | processing p50/p99/p99.9 ms | settle p50/p99/p99.9 ms | late | max lag ms | errors | server+redis+postgres µs/event |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var floor *Result
	for i := range r.OpenLoop {
		x := &r.OpenLoop[i]
		if x.Target == targetNoop {
			floor = x
			continue
		}
		lat := func(rpc string) string {
			if l, ok := x.RPCs[rpc]; ok {
				return fmt.Sprintf("%.2f / %.2f / %.2f", l.P50, l.P99, l.P999)
			}
			return "–"
		}
		p("| %s | %.0f | %.0f | %s | %s | %s | %d | %.1f | %s | %s |\n", display(displayNames, x.Target), x.Due, x.Rate,
			lat("claim"), lat("processing"), lat("settle"), x.Late, x.MaxLag, errorsCell(x), serverTotal(x))
	}
	p("\n")
	if floor != nil && floor.Requests > 0 {
		p("The floor of these latencies on this machine: the no-op handler, which answers a Claim at once, with Claims due at %.0f a second (%d per event: the same RPCs a second) from the same client, p50/p99/p99.9 %.2f / %.2f / %.2f ms, %d late, max lag %.1f ms, %s errors; the no-op handler's CPU %.0f µs and the client's %.0f µs per call.\n\n",
			floor.Due, lifecycleRPCs, floor.P50, floor.P99, floor.P999, floor.Late, floor.MaxLag, errorsCell(floor), perCall(floor, "server"), perCall(floor, "client"))
	}
}

// other is the share of the machine's CPU that went to work other than
// x's processes during x's run.
func (r *Report) other(x *Result) string {
	if x.MachineBusy == 0 || x.Seconds == 0 {
		return "–"
	}
	used := 0.0
	for _, v := range x.CPU {
		used += v
	}
	return fmt.Sprintf("%.0f%%", max(0, 100*(x.MachineBusy-used)/(float64(r.Machine.CPUs)*x.Seconds)))
}

// clientCost is the load client's CPU µs per request of x's run.
func clientCost(x *Result) string {
	c, ok := x.CPU["client"]
	if !ok || x.Requests == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", 1e6*c/float64(x.Requests))
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func writeRuns(w *strings.Builder, r *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Results\n\n")
	p("Peak RSS is the server's largest resident set since it started (its runs go in this table's order), read after each run.\n\n")
	p("| scenario | target | client | rps | p50 ms | p99 ms | errors | CPU s server | CPU s redis | CPU s postgres | CPU s client | server peak RSS MiB | served by |\n")
	p("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, sc := range r.Options.Scenarios {
		for _, cl := range r.Options.Clients {
			for _, t := range r.Options.Targets {
				x := r.find(t, sc, cl)
				if x == nil {
					continue
				}
				p("| %s | %s | %s | %.0f | %.2f | %.2f | %s | %s | %s | %s |\n",
					display(scenarioNames, sc), display(displayNames, t), cl, x.Rate, x.P50, x.P99,
					errorsCell(x), cpuCells(x), rssCell(x), servedBy(x))
			}
		}
	}
	p("\n")
}

func rssCell(x *Result) string {
	if x.ServerPeakRSS == 0 {
		return "–" // a run measured before the column existed
	}
	return fmt.Sprintf("%.0f", x.ServerPeakRSS)
}

func errorsCell(x *Result) string {
	if x.Errors == 0 {
		return "0"
	}
	var parts []string
	for code, n := range x.ErrorCodes {
		parts = append(parts, fmt.Sprintf("%s %d", code, n))
	}
	return fmt.Sprintf("%d (%s)", x.Errors, strings.Join(parts, ", "))
}

func cpuCells(x *Result) string {
	cells := make([]string, len(cpuColumns))
	for i, c := range cpuColumns {
		if v, ok := x.CPU[c]; ok {
			cells[i] = fmt.Sprintf("%.1f", v)
		} else {
			cells[i] = "–"
		}
	}
	return strings.Join(cells, " | ")
}

func servedBy(x *Result) string {
	if len(x.ServedBy) == 0 {
		return ""
	}
	var parts []string
	for _, t := range []string{"TIER_LOCAL", "TIER_FAST", "TIER_DURABLE"} {
		n := x.ServedBy[t]
		if n == 0 {
			continue
		}
		pct := 100 * float64(n) / float64(x.Requests-x.Errors)
		if pct < 1 {
			parts = append(parts, fmt.Sprintf("%s <1%% (%d)", strings.TrimPrefix(t, "TIER_"), n))
		} else {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", strings.TrimPrefix(t, "TIER_"), pct))
		}
	}
	return strings.Join(parts, ", ")
}

func writeBaselines(w *strings.Builder, r *Report) {
	if len(r.Baselines) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Baselines: the servers alone\n\n")
	p("Their own tools, %d callers, on the same servers: `redis-benchmark … SET bench:__rand_int__ v NX EX 302400`; ", r.Options.Callers)
	p("`pgbench -M prepared` with a transaction per `INSERT … ON CONFLICT DO NOTHING` into claimd's claims table (no audit row), one row or %d rows per statement.\n\n", batchRows)
	p("| baseline | rate | p50 ms | p99 ms | errors | CPU s redis | CPU s postgres | CPU s client |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.Baselines {
		cell := func(k string) string {
			if v, ok := x.CPU[k]; ok {
				return fmt.Sprintf("%.1f", v)
			}
			return "–"
		}
		p("| %s (%s) | %.0f %s | %.2f | %.2f | %d | %s | %s | %s |\n", x.Target, x.Scenario, x.Rate, x.Unit, x.P50, x.P99, x.Errors,
			cell("redis"), cell("postgres"), cell("client"))
	}
	p("\n")
}

// writeRatios compares claimd with each baseline, scenario by scenario,
// under the same client.
func writeRatios(w *strings.Builder, r *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Ratios\n\nrps of claimd over rps of the baseline, same scenario, same client, same run.\n\n")
	p("| scenario | client | Redis+PG / naive | Redis+PG / no-op | embedded / naive | embedded / no-op |\n| --- | --- | ---: | ---: | ---: | ---: |\n")
	ratio := func(a, b *Result) string {
		if a == nil || b == nil || b.Rate == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", a.Rate/b.Rate)
	}
	for _, sc := range r.Options.Scenarios {
		for _, cl := range r.Options.Clients {
			c, e := r.find(targetClaimd, sc, cl), r.find(targetEmbedded, sc, cl)
			n, o := r.find(targetNaive, sc, cl), r.find(targetNoop, sc, cl)
			p("| %s | %s | %s | %s | %s | %s |\n", display(scenarioNames, sc), cl, ratio(c, n), ratio(c, o), ratio(e, n), ratio(e, o))
		}
	}
	if len(r.Baselines) > 0 {
		p("\nAgainst the servers alone (claimd Redis+PG, claimload):\n\n")
		if c := r.find(targetClaimd, scenarioNew, clientClaimload); c != nil {
			for _, x := range r.Baselines {
				p("- new keys: %.0f claims/s = %.2f× %s (%.0f %s)\n", c.Rate, c.Rate/x.Rate, x.Target, x.Rate, x.Unit)
			}
		}
	}
	p("\n")
}

// writeCPUShares says where the machine's CPU went in each claimd run: the
// share of the available core-seconds each process used.
func writeCPUShares(w *strings.Builder, r *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Where the CPU went\n\nShare of the machine's %d cores over each run (100%% = all cores busy for the whole run). ", r.Machine.CPUs)
	p("\"other\" is what /proc/stat counts busy beyond these processes: other work on the machine, and kernel work (loopback networking, mostly) charged to no process; on an otherwise idle machine it is a few percent.\n\n")
	p("| scenario | target | client | server | redis | postgres | client | other | idle |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, sc := range r.Options.Scenarios {
		for _, cl := range r.Options.Clients {
			for _, t := range r.Options.Targets {
				x := r.find(t, sc, cl)
				if x == nil || x.Seconds == 0 {
					continue
				}
				avail := float64(r.Machine.CPUs) * x.Seconds
				used := 0.0
				cells := make([]string, len(cpuColumns))
				for i, c := range cpuColumns {
					v, ok := x.CPU[c]
					if !ok {
						cells[i] = "–"
						continue
					}
					used += v
					cells[i] = fmt.Sprintf("%.0f%%", 100*v/avail)
				}
				other, idle := "–", fmt.Sprintf("%.0f%%", max(0, 100*(avail-used)/avail))
				if x.MachineBusy > 0 {
					other = fmt.Sprintf("%.0f%%", max(0, 100*(x.MachineBusy-used)/avail))
					idle = fmt.Sprintf("%.0f%%", max(0, 100*(avail-x.MachineBusy)/avail))
				}
				p("| %s | %s | %s | %s | %s | %s |\n", display(scenarioNames, sc), display(displayNames, t), cl,
					strings.Join(cells, " | "), other, idle)
			}
		}
	}
	p("\n")
}

// writeLifecycle is the headline: whole webhook events per second, the
// latency of each RPC, and the CPU each process spent per event.
func writeLifecycle(w *strings.Builder, r *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	var rows []*Result
	for _, sc := range []string{scenarioLifecycle, scenarioLifecycleStart} {
		for _, t := range r.Options.Targets {
			if x := r.find(t, sc, clientClaimload); x != nil {
				rows = append(rows, x)
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	p("## Lifecycle: whole webhook events\n\n")
	p("Each event is what a handler does with a new delivery: Claim, Transition to PROCESSING, Transition to SETTLED with a small result ")
	p("(or Claim with `start`, answered already in PROCESSING, then SETTLED), each on a new key, %d callers, claimload, authenticated (bearer token) on claimd. ", r.Options.Callers)
	p("The naive handler does the same work its obvious way: SET NX + INSERT, then an UPDATE per Transition, each its own commit. ")
	p("Latency is per RPC; CPU is µs per event completed (errors included), per process.\n\n")
	p("| scenario | target | events/s | claim p50/p99 ms | processing p50/p99 ms | settle p50/p99 ms | errors | CPU µs/event server | redis | postgres | client | server+redis+postgres |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range rows {
		lat := func(rpc string) string {
			l, ok := x.RPCs[rpc]
			if !ok {
				return "–"
			}
			return fmt.Sprintf("%.2f / %.2f", l.P50, l.P99)
		}
		p("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", display(scenarioNames, x.Scenario), display(displayNames, x.Target), x.Rate,
			lat("claim"), lat("processing"), lat("settle"), errorsCell(x), perRequestCells(x), serverTotal(x))
	}
	p("\n")
}

// writeScaling is the lifecycle scenario on 1, 2, 4… claimd replicas
// sharing one Redis and one PostgreSQL.
func writeScaling(w *strings.Builder, r *Report) {
	if len(r.Scaling) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Scaling: claimd replicas on one Redis and one PostgreSQL\n\n")
	p("The lifecycle scenario (Claim → PROCESSING → SETTLED), %d callers, claimload with one connection per replica (round robin), on this machine's %d cores", r.Options.Callers, r.Machine.CPUs)
	if r.Options.Cores > 0 {
		p(" (GOMAXPROCS=%d)", r.Options.Cores)
	}
	p(". \"server\" sums every replica's CPU.\n\n")
	p("| replicas | events/s | claim p99 ms | processing p99 ms | settle p99 ms | errors | CPU µs/event server | redis | postgres | client | server+redis+postgres |\n")
	p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i := range r.Scaling {
		x := &r.Scaling[i]
		p99 := func(rpc string) string {
			if l, ok := x.RPCs[rpc]; ok {
				return fmt.Sprintf("%.2f", l.P99)
			}
			return "–"
		}
		p("| %d | %.0f | %s | %s | %s | %s | %s | %s |\n", x.Replicas, x.Rate, p99("claim"), p99("processing"), p99("settle"), errorsCell(x), perRequestCells(x), serverTotal(x))
	}
	p("\n")
}

// perRequestCells are the cpuColumns of x in µs per request (per event).
func perRequestCells(x *Result) string {
	cells := make([]string, len(cpuColumns))
	for i, c := range cpuColumns {
		v, ok := x.CPU[c]
		if !ok || x.Requests == 0 {
			cells[i] = "–"
			continue
		}
		cells[i] = fmt.Sprintf("%.0f", 1e6*v/float64(x.Requests))
	}
	return strings.Join(cells, " | ")
}

// serverTotal is the µs of CPU per request of the server side: the
// handler, Redis and PostgreSQL (not the load client).
func serverTotal(x *Result) string {
	if x.Requests == 0 {
		return "–"
	}
	total := 0.0
	for _, c := range []string{"server", "redis", "postgres"} {
		total += x.CPU[c]
	}
	return fmt.Sprintf("%.0f", 1e6*total/float64(x.Requests))
}

// writeCPUPerRequest divides each process's CPU by the requests answered:
// what one claim costs each of them, independent of how busy the machine
// was.
func writeCPUPerRequest(w *strings.Builder, r *Report) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## CPU per request\n\nMicroseconds of CPU each process spent per request answered (errors included; in the lifecycle scenarios per event, several RPCs), over the whole run.\n\n")
	p("| scenario | target | client | server | redis | postgres | client | total |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, sc := range r.Options.Scenarios {
		for _, cl := range r.Options.Clients {
			for _, t := range r.Options.Targets {
				x := r.find(t, sc, cl)
				if x == nil || x.Requests == 0 {
					continue
				}
				total := 0.0
				cells := make([]string, len(cpuColumns))
				for i, c := range cpuColumns {
					v, ok := x.CPU[c]
					if !ok {
						cells[i] = "–"
						continue
					}
					us := 1e6 * v / float64(x.Requests)
					total += us
					cells[i] = fmt.Sprintf("%.0f", us)
				}
				p("| %s | %s | %s | %s | %.0f |\n", display(scenarioNames, sc), display(displayNames, t), cl, strings.Join(cells, " | "), total)
			}
		}
	}
	p("\n")
}

// relPath is target relative to the directory of from, for links.
func relPath(from, target string) string {
	rel, err := filepath.Rel(filepath.Dir(from), target)
	if err != nil {
		return target
	}
	return filepath.ToSlash(rel)
}

// writePython compares claimd's Python guard with Powertools' idempotency
// utility on Redis: the same handler, the same threads, the same run.
func writePython(w *strings.Builder, r *Report) {
	if len(r.Python) == 0 {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## From a Python handler: claimd's guard and Powertools' idempotency\n\n")
	p("bench/python/guard_vs_powertools.py, %d threads in one process, one handler (it builds a small result from the event). ", r.Options.PyThreads)
	p("claimd's guard (clients/python, the checkout's) calls claimd on Redis + PostgreSQL (fsync on), authenticated, over the Connect transport its README recommends for receivers (unary Connect over kept-alive HTTP/1.1 to claimd's HTTP listener); ")
	p("AWS Lambda Powertools' `@idempotent_function` (aws-lambda-powertools 3.37.0, RedisCachePersistenceLayer) keeps its records in Redis only, so its runs have Redis write an append-only file fsync'd on every write (`appendfsync always`): nothing it acknowledged is lost on a crash, as with claimd's PostgreSQL; claimd's runs have it off. ")
	p("\"first\": every event new; \"dup\": events settled before the run, delivered again. CPU is µs per event; claimd's column is its server, idle during Powertools' runs.\n\n")
	p("| events | layer | events/s | p50 ms | p99 ms | errors | CPU µs/event claimd | redis | postgres | python | claimd+redis+postgres |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	names := map[string]string{pyClaimd: "claimd guard", pyPowertools: "Powertools (Redis)"}
	for i := range r.Python {
		x := &r.Python[i]
		p("| %s | %s | %.0f | %.2f | %.2f | %s | %s | %s |\n", x.Scenario, display(names, x.Target), x.Rate, x.P50, x.P99, errorsCell(x), perRequestCells(x), serverTotal(x))
	}
	find := r.findPython
	if c, pt := find(pyClaimd, pyFirst), find(pyPowertools, pyFirst); c != nil && pt != nil && c.Rate > 0 && pt.P50 > 0 {
		p("\nFirst deliveries: claimd's guard at %.2f× Powertools' events/s and %.2f× its p50 (target: events/s ≥ 1/1.5 = 0.67×, p50 ≤ 1.5×). ", c.Rate/pt.Rate, c.P50/pt.P50)
	}
	if c, pt := find(pyClaimd, pyDup), find(pyPowertools, pyDup); c != nil && pt != nil && pt.Rate > 0 {
		p("Duplicates: %.2f× Powertools' events/s (target: > 1×).", c.Rate/pt.Rate)
	}
	p("\n\n")
}

// writeBudget sets a new-key claim's CPU against what 3× the naive
// handler's rate leaves it on this machine, process by process, next to
// the least each process could spend on the same round trips, measured in
// this run: whether the target is out of reach of the round trips
// themselves, or what claimd spends above them.
func writeBudget(w *strings.Builder, r *Report) {
	c, n := r.find(targetClaimd, scenarioNew, clientClaimload), r.find(targetNaive, scenarioNew, clientClaimload)
	o := r.find(targetNoop, scenarioNew, clientClaimload)
	rb, pb := r.baseline(baselineRedis), r.baseline(baselinePgBatch)
	if c == nil || n == nil || o == nil || rb == nil || pb == nil || c.Requests == 0 || o.Requests == 0 || n.Rate == 0 {
		return
	}
	rows := []struct {
		process      string
		spent, floor float64
		how          string
	}{
		{"load client", perCall(c, "client"), perCall(o, "client"), "its CPU per call against the no-op handler"},
		{"claimd", perCall(c, "server"), perCall(o, "server"), "the no-op handler's CPU per call: a gRPC call answered at once"},
		{"Redis", perCall(c, "redis"), perUnit(rb, "redis"), "one round trip (the pending marker): redis-benchmark's Redis CPU per SET NX"},
		{"PostgreSQL", perCall(c, "postgres"), 2 * perUnit(pb, "postgres"), fmt.Sprintf("two rows, the claim and its audit row: 2 × pgbench's PostgreSQL CPU per row, %d rows per statement", batchRows)},
	}
	budget := float64(r.Machine.CPUs) * 1e6 / (3 * n.Rate)
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## A new-key claim against its budget\n\n")
	p("Everything runs on the same %d cores, so 3× the naive handler's new-key rate (3 × %.0f claims/s) leaves each claim at most %.0f µs of CPU for the load client, claimd, Redis and PostgreSQL together. ", r.Machine.CPUs, n.Rate, budget)
	p("What each spent per claim in claimd's run (Redis+PG, claimload), and the least it could spend on the same round trips, measured in this run:\n\n")
	p("| process | spent µs | floor µs | floor measured as |\n| --- | ---: | ---: | --- |\n")
	var spent, floor float64
	for _, x := range rows {
		p("| %s | %.1f | %.1f | %s |\n", x.process, x.spent, x.floor, x.how)
		spent, floor = spent+x.spent, floor+x.floor
	}
	p("| all four | %.1f | %.1f | budget for 3× naive: %.0f |\n\n", spent, floor, budget)
	p("Each floor is that process at its cheapest (the no-op handler and its client at their own rate, pgbench at %d rows per statement, the budget with every core busy all the time), so the floors are lower bounds and the budget an upper one. ", batchRows)
	if floor > budget {
		p("The floors alone exceed the budget: on this machine no server making these round trips reaches 3× the naive handler's rate.\n\n")
		return
	}
	p("The floors sum to %.0f µs, under the budget: the round trips themselves do not rule the target out here. What stands between is %.0f µs spent above the floors, %.0f of them in claimd above a bare gRPC call ([Where claimd's CPU goes](#where-claimds-cpu-goes) splits claimd's share).\n\n",
		floor, spent-floor, rows[1].spent-rows[1].floor)
	writeReachableBudget(w, r, c, n, o, budget, floor)
}

// perCall is x's CPU of process k in µs per request (per event in the
// lifecycle runs), errors included.
func perCall(x *Result, k string) float64 { return 1e6 * x.CPU[k] / float64(x.Requests) }

// perUnit is a baseline's CPU of process k in µs per unit it counts
// (request or row).
func perUnit(x *Result, k string) float64 { return 1e6 * x.CPU[k] / (x.Rate * x.Seconds) }

// busyShare is how busy x kept the machine's cores over its run, 0 to 1.
func busyShare(r *Report, x *Result) float64 {
	if x.Seconds == 0 {
		return 0
	}
	return x.MachineBusy / (float64(r.Machine.CPUs) * x.Seconds)
}

// writeLifecycleBudget does for a whole event what writeBudget does for a
// new-key claim: its CPU against what 3× the naive handler's events/s
// leaves it, next to the floors of its round trips and rows. An event's
// floors are its RPCs' (each a no-op gRPC call for the client and for
// claimd, and one Redis script), and its durable rows' (pgbench's CPU per
// row; an update writes a row version as an insert does).
func writeLifecycleBudget(w *strings.Builder, r *Report) {
	o := r.find(targetNoop, scenarioNew, clientClaimload)
	rb, pb := r.baseline(baselineRedis), r.baseline(baselinePgBatch)
	if o == nil || rb == nil || pb == nil || o.Requests == 0 || rb.Rate == 0 || pb.Rate == 0 {
		return
	}
	type event struct {
		sc         string
		rpcs, rows float64
		c, n       *Result
	}
	var events []event
	for _, e := range []event{{sc: scenarioLifecycle, rpcs: 3, rows: 6}, {sc: scenarioLifecycleStart, rpcs: 2, rows: 4}} {
		e.c, e.n = r.find(targetClaimd, e.sc, clientClaimload), r.find(targetNaive, e.sc, clientClaimload)
		if e.c != nil && e.n != nil && e.c.Requests > 0 && e.n.Rate > 0 {
			events = append(events, e)
		}
	}
	if len(events) == 0 {
		return
	}
	procs := []struct {
		name, cpu string
		floor     func(e event) float64
	}{
		{"load client", "client", func(e event) float64 { return e.rpcs * perCall(o, "client") }},
		{"claimd", "server", func(e event) float64 { return e.rpcs * perCall(o, "server") }},
		{"Redis", "redis", func(e event) float64 { return e.rpcs * perUnit(rb, "redis") }},
		{"PostgreSQL", "postgres", func(e event) float64 { return e.rows * perUnit(pb, "postgres") }},
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## A lifecycle event against its budget\n\n")
	p("The same for whole events (claimd on Redis+PG, claimload): an event of n RPCs has for floors n no-op gRPC calls (the load client's and the no-op handler's CPU per call), n Redis round trips (one script per RPC: redis-benchmark's Redis CPU per SET NX) and its durable rows (the claim and each Transition, with an audit row each: pgbench's PostgreSQL CPU per row, %d rows per statement).\n\n", batchRows)
	p("| process |")
	for _, e := range events {
		p(" %s: spent µs | floor µs |", display(scenarioNames, e.sc))
	}
	p("\n| --- |%s\n", strings.Repeat(" ---: | ---: |", len(events)))
	spent, floor := make([]float64, len(events)), make([]float64, len(events))
	for _, x := range procs {
		p("| %s |", x.name)
		for i, e := range events {
			s, f := perCall(e.c, x.cpu), x.floor(e)
			spent[i], floor[i] = spent[i]+s, floor[i]+f
			p(" %.1f | %.1f |", s, f)
		}
		p("\n")
	}
	p("| all four |")
	for i := range events {
		p(" %.1f | %.1f |", spent[i], floor[i])
	}
	p("\n\n")
	for i, e := range events {
		budget := float64(r.Machine.CPUs) * 1e6 / (3 * e.n.Rate)
		reach := budget
		p("%s: 3 × the naive handler's %.0f events/s leaves each event at most %.0f µs with every core busy", display(scenarioNames, e.sc), e.n.Rate, budget)
		if b := busyShare(r, o); b > 0 {
			reach = budget * b
			p(", %.0f µs as busy as the no-op run (%.0f%%)", reach, 100*b)
		}
		switch {
		case floor[i] > budget:
			p("; the floors alone (%.0f µs) exceed it: no server making these round trips and writes reaches 3× here.\n\n", floor[i])
		case floor[i] > reach:
			p("; the floors (%.0f µs) are under the first and above the second: only a machine kept busier than the no-op run kept this one could reach 3× with these round trips and writes.\n\n", floor[i])
		default:
			p("; the floors (%.0f µs) are under both, and claimd's run spent %.0f µs above them, %.0f in claimd above its bare gRPC calls.\n\n",
				floor[i], spent[i]-floor[i], perCall(e.c, "server")-procs[1].floor(e))
		}
	}
}

// writeReachableBudget sets the budget against how busy a closed loop of
// callers can keep this machine at all: the no-op handler's run, which has
// nothing to wait for, is the most it got.
func writeReachableBudget(w *strings.Builder, r *Report, c, n, o *Result, budget, floor float64) {
	busy := func(x *Result) float64 { return busyShare(r, x) }
	if c.MachineBusy == 0 || o.MachineBusy == 0 || c.Seconds == 0 || o.Seconds == 0 {
		return
	}
	reach := budget * busy(o)
	fmt.Fprintf(w, "The budget counts every core busy all the time, which a closed loop of %d callers does not get from this machine even against the no-op handler, with nothing to wait for: its run kept the cores %.0f%% busy, claimd's %.0f%% (the rest waited: on wake-ups across processes, and in claimd's run on PostgreSQL's WAL flushes too). ",
		c.Callers, 100*busy(o), 100*busy(c))
	verdict := "under it as well"
	if floor > reach {
		verdict = "above it: at that utilization no server making these round trips reaches 3× here"
	}
	fmt.Fprintf(w, "As busy as the no-op run, the budget is %.0f µs per claim, and the floors are %s. ", reach, verdict)
	fmt.Fprintf(w, "With the machine time it spent per claim, claimd's run as busy as the no-op run would have answered %.0f claims/s, %.2f× the naive handler (it measured %.2f×): the idle time explains that much of the gap to 3×, the CPU per claim the rest.\n\n",
		c.Rate*busy(o)/busy(c), c.Rate*busy(o)/busy(c)/n.Rate, c.Rate/n.Rate)
}

// baseline is the baseline run named target, or nil.
func (r *Report) baseline(target string) *Result {
	for i := range r.Baselines {
		if r.Baselines[i].Target == target {
			return &r.Baselines[i]
		}
	}
	return nil
}
