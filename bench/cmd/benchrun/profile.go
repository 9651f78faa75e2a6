package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Profile is where claimd's CPU went in one scenario, by component: an
// extra load run of the scenario (not among the runs measured) with perf
// recording the server in its middle, its samples attributed by their call
// stacks.
type Profile struct {
	Target   string `json:"target"`
	Scenario string `json:"scenario"`
	// Run names a run other than the scenario's standard one: the
	// low-concurrency run's callers, or the open loop.
	Run string `json:"run,omitempty"`
	// PerOp is the server's CPU µs per operation in the scenario's
	// measured run (the profiled run's when there is none).
	PerOp   float64 `json:"server_cpu_us_per_op"`
	Samples int     `json:"samples"`
	// Shares are each component's share of the samples (0..1).
	Shares map[string]float64 `json:"shares"`
}

// profiledScenarios are the scenarios profiled on claimd (Redis +
// PostgreSQL): a call answered in process, a first claim, a whole event.
var profiledScenarios = []string{scenarioDup, scenarioNew, scenarioLifecycleStart}

// The components, in the report's order. A library's allocations and
// system calls count to it; the collections they cause later count to the
// runtime.
const (
	compClaimd   = "claimd's own code"
	compGRPC     = "gRPC"
	compProto    = "protobuf"
	compMetrics  = "Prometheus middleware"
	compCrypto   = "crypto"
	compRedis    = "go-redis"
	compPgx      = "pgx"
	compSQLite   = "SQLite (modernc.org)"
	compSched    = "Go runtime: scheduler"
	compSysmon   = "Go runtime: sysmon"
	compGC       = "Go runtime: GC and stack growth"
	compOther    = "Go runtime and kernel: other"
	profileHertz = 999
)

var components = []string{compClaimd, compGRPC, compProto, compMetrics, compCrypto, compRedis, compPgx, compSQLite, compSched, compSysmon, compGC, compOther}

// libraries name the component of a Go function by its package path, first
// match wins.
var libraries = []struct{ part, comp string }{
	{"github.com/claimd/claimd/gen/", compProto},
	{"github.com/claimd/claimd/", compClaimd},
	{"google.golang.org/grpc", compGRPC},
	{"golang.org/x/net/http2", compGRPC},
	{"go-grpc-middleware", compMetrics},
	{"prometheus", compMetrics},
	{"google.golang.org/protobuf", compProto},
	{"redis/go-redis", compRedis},
	{"jackc/", compPgx},
	{"modernc.org/", compSQLite},
	{"crypto/", compCrypto},
}

// classify names the component of one sample, its frames innermost first.
func classify(frames []string) string {
	has := func(names ...string) bool {
		return slices.ContainsFunc(frames, func(f string) bool { return slices.Contains(names, f) })
	}
	switch {
	case slices.ContainsFunc(frames, func(f string) bool { return strings.HasPrefix(f, "runtime.gcBgMarkWorker") }),
		has("runtime.gcAssistAlloc", "runtime.gcAssistAlloc1", "runtime.deductAssistCredit"),
		has("runtime.newstack", "runtime.morestack", "runtime.morestack.abi0"):
		return compGC
	case has("runtime.sysmon"):
		// The runtime's monitor thread: its wake-ups, and the processors it
		// retakes from system calls and hands to other threads.
		return compSysmon
	}
	for _, f := range frames {
		for _, l := range libraries {
			if strings.Contains(f, l.part) {
				return l.comp
			}
		}
	}
	if has("runtime.mcall", "runtime.park_m", "runtime.schedule", "runtime.findRunnable", "runtime.goexit0") {
		return compSched
	}
	return compOther
}

// attribute reads `perf script` output (samples with call stacks) and
// returns each component's share of the samples and their number.
func attribute(r io.Reader) (map[string]float64, int, error) {
	counts := map[string]int{}
	total := 0
	var frames []string
	flush := func() {
		if len(frames) > 0 {
			counts[classify(frames)]++
			total++
		}
		frames = frames[:0]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" {
			flush()
			continue
		}
		// A frame is an indented "<address> <symbol>+<offset> (<object>)";
		// a sample's header line starts with the command's name.
		if raw[0] != '\t' && raw[0] != ' ' {
			continue
		}
		addr, rest, ok := strings.Cut(line, " ")
		if _, err := strconv.ParseUint(addr, 16, 64); !ok || err != nil {
			continue
		}
		sym, _, _ := strings.Cut(rest, " (")
		if i := strings.LastIndexByte(sym, '+'); i > 0 {
			sym = sym[:i]
		}
		frames = append(frames, sym)
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("no samples with call stacks")
	}
	shares := make(map[string]float64, len(counts))
	for c, n := range counts {
		shares[c] = float64(n) / float64(total)
	}
	return shares, total, nil
}

// profileRun is how long the profiled load run lasts when the measured
// runs last d: as long, but never under minProfileRun, so that a smoke run
// (BENCH_DURATION=2s) still has a middle for perf to sample.
func profileRun(d time.Duration) time.Duration {
	return max(d, minProfileRun)
}

const minProfileRun = 6 * time.Second

// profileSeconds is how long perf records within the profiled run when the
// measured runs last d: from 2 s in (past the connections' warm-up) to at
// least 1 s before its end.
func profileSeconds(d time.Duration) int {
	return max(1, min(10, int(profileRun(d).Seconds())-3))
}

// profile runs scenario once more on t under claimload as run says, with
// perf recording the server, and adds where its CPU went to the report.
// label names the run when it is not the scenario's standard one; the
// shares divide measured's server CPU per operation, the profiled run's own
// when measured is nil.
func (b *bench) profile(t *target, scenario string, run spec, label string, measured *Result) error {
	data := filepath.Join(b.opts.workDir, fmt.Sprintf("perf-%d.data", len(b.report.Profiles)))
	secs := profileSeconds(run.duration)
	recorded := make(chan error, 1)
	go func() {
		select {
		case <-time.After(2 * time.Second):
		case <-b.ctx.Done():
			recorded <- b.ctx.Err()
			return
		}
		cmd := exec.CommandContext(b.ctx, b.opts.perf, "record", "-q", "-F", strconv.Itoa(profileHertz), "-g",
			"-p", strconv.Itoa(t.server.pid()), "-o", data, "--", "sleep", strconv.Itoa(secs))
		if out, err := cmd.CombinedOutput(); err != nil {
			recorded <- fmt.Errorf("perf record: %w: %s", err, strings.TrimSpace(string(out)))
			return
		}
		recorded <- nil
	}()
	run.duration = profileRun(run.duration)
	res, err := b.loadWith(t, scenario, clientClaimload, run)
	if rerr := <-recorded; err == nil {
		err = rerr
	}
	if err != nil {
		return err
	}
	defer os.Remove(data)
	cmd := exec.CommandContext(b.ctx, b.opts.perf, "script", "-i", data)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	shares, n, aerr := attribute(out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("perf script: %w", err)
	}
	if aerr != nil {
		return fmt.Errorf("perf script of %s: %w", data, aerr)
	}
	// The shares apply to the measured run's CPU per operation: the
	// profiled run's own pays for perf's sampling too.
	perOp := res.CPU["server"] / float64(res.Requests) * 1e6
	logf("profiled %s %s %s: %d samples, %.1f µs of server CPU per operation while profiled", t.id, scenario, label, n, perOp)
	if measured != nil && measured.Requests > 0 {
		perOp = measured.CPU["server"] / float64(measured.Requests) * 1e6
	}
	p := Profile{Target: t.id, Scenario: scenario, Run: label, PerOp: perOp, Samples: n, Shares: shares}
	b.report.Profiles = append(b.report.Profiles, p)
	return nil
}

// profileTable renders the profiles: µs per operation of each component,
// and its share.
func profileTable(r *Report) string {
	if len(r.Profiles) == 0 {
		return ""
	}
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	p("## Where claimd's CPU goes\n\n")
	p("One more run of each scenario on claimd (Redis + PostgreSQL unless the column says embedded) under claimload, not among the figures above: `perf record -g` (%d Hz) samples the server for %d s in its middle, and each sample counts to what spent it, by its call stack: claimd's own code, a library (its allocations and system calls included), or the Go runtime's own work. µs per operation are each component's share (in parentheses) of the server's CPU per operation in the scenario's measured run above (the profiled run pays for the sampling too).\n\n", profileHertz, profileSeconds(mustDuration(r.Options.Duration)))
	p("| component |")
	for _, x := range r.Profiles {
		name := display(scenarioNames, x.Scenario)
		if x.Run != "" {
			name += ", " + x.Run
		}
		p(" %s (%.1f µs) |", name, x.PerOp)
	}
	p("\n| --- |%s\n", strings.Repeat(" ---: |", len(r.Profiles)))
	for _, c := range components {
		p("| %s |", c)
		for _, x := range r.Profiles {
			p(" %.1f (%.0f %%) |", x.Shares[c]*x.PerOp, x.Shares[c]*100)
		}
		p("\n")
	}
	p("| samples |")
	for _, x := range r.Profiles {
		p(" %d |", x.Samples)
	}
	p("\n\n")
	return sb.String()
}

func mustDuration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}
