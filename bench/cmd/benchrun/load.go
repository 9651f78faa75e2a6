package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Result is one measurement: a load run on a target, or a baseline.
// Latencies are in milliseconds, CPU in seconds per process over the run.
type Result struct {
	Target     string             `json:"target"`
	Scenario   string             `json:"scenario"`
	Client     string             `json:"client"`
	Callers    int                `json:"callers"`
	Seconds    float64            `json:"seconds"`
	Requests   int64              `json:"requests"`
	Errors     int64              `json:"errors"`
	ErrorCodes map[string]int64   `json:"error_codes,omitempty"`
	Rate       float64            `json:"rate"`
	Unit       string             `json:"unit"`
	P50        float64            `json:"p50_ms"`
	P99        float64            `json:"p99_ms"`
	P999       float64            `json:"p999_ms,omitempty"`
	CPU        map[string]float64 `json:"cpu_seconds"`
	// Due is an open loop's events (requests) due per second, Late how many
	// went out more than claimload's lateAfter after they were due, MaxLag
	// the latest (ms); latencies count from when each was due.
	Due    float64 `json:"due_rate,omitempty"`
	Late   int64   `json:"late,omitempty"`
	MaxLag float64 `json:"max_lag_ms,omitempty"`
	// RedisCommands and PGWrites are what the servers did over the run:
	// commands Redis executed (INFO commandstats, a script's own calls
	// included; ScriptCalls counts the scripts) and PostgreSQL
	// transactions that wrote (transaction ids assigned, cluster-wide).
	RedisCommands int64 `json:"redis_commands,omitempty"`
	ScriptCalls   int64 `json:"redis_script_calls,omitempty"`
	PGWrites      int64 `json:"pg_write_transactions,omitempty"`
	// MachineBusy is the CPU seconds the whole machine was busy over the
	// run (/proc/stat): CPU beyond the processes in CPU was other work.
	MachineBusy float64          `json:"machine_busy_seconds,omitempty"`
	Outcomes    map[string]int64 `json:"outcomes,omitempty"`
	ServedBy    map[string]int64 `json:"served_by,omitempty"`
	Check       string           `json:"check,omitempty"`
	CheckOK     *bool            `json:"check_ok,omitempty"`
	// RPCs are the latencies of each RPC of a lifecycle event (claim,
	// processing, settle); Requests then counts events, Rate is events/s.
	RPCs map[string]RPCLatency `json:"rpcs,omitempty"`
	// Replicas is the number of claimd processes of a scaling run.
	Replicas int `json:"replicas,omitempty"`
	// Cores is GOMAXPROCS of the Go processes (0: the runtime's default).
	Cores int `json:"cores,omitempty"`
	// ServerPeakRSS is the largest resident set (VmHWM, MiB) of the
	// server's processes since they started, read after the run: the
	// memory its GC policy traded for CPU.
	ServerPeakRSS float64 `json:"server_peak_rss_mib,omitempty"`
}

// RPCLatency is one RPC's latency within a lifecycle event.
type RPCLatency struct {
	Calls int64   `json:"calls"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms,omitempty"`
}

// spec is how one load run goes: its callers, how long it lasts, and in an
// open loop the events (requests) due per second.
type spec struct {
	callers  int
	duration time.Duration
	rate     float64 // 0: a closed loop
}

// spec is the standard run of scenario: the run's duration, and its
// callers (the contended key has its own number).
func (b *bench) spec(scenario string) spec {
	s := spec{callers: b.opts.callers, duration: b.opts.duration}
	if scenario == scenarioContend {
		s.callers = b.opts.contend
	}
	return s
}

// load runs one scenario under one client against t as the standard run.
func (b *bench) load(t *target, scenario, client string) (Result, error) {
	return b.loadWith(t, scenario, client, b.spec(scenario))
}

// loadWith runs one scenario under one client against t as s says.
func (b *bench) loadWith(t *target, scenario, client string, s spec) (Result, error) {
	callers := s.callers
	// New keys (and the contended key) are unique to this run.
	prefix := fmt.Sprintf("%s-%s-%s", scenario, client, strconv.FormatInt(time.Now().UnixNano(), 36))
	var (
		res Result
		cmd *exec.Cmd
	)
	cpu, busy, err := measure(t.meters, func() (err error) {
		switch client {
		case clientGhz:
			if s.rate > 0 {
				return fmt.Errorf("ghz runs closed loops only")
			}
			res, cmd, err = b.ghz(t.addr, scenario, callers, prefix, t.claimd, s.duration)
		case clientClaimload:
			res, cmd, err = b.claimload(t.addrs(), scenario, callers, prefix, t.claimd, s)
		default:
			err = fmt.Errorf("unknown client %q", client)
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}
	res.MachineBusy = busy
	res.Target, res.Scenario, res.Client, res.Callers, res.Unit = t.id, scenario, client, callers, "req/s"
	if lifecycle(scenario) {
		res.Unit = "events/s"
	}
	res.Replicas, res.Cores = len(t.replicas)+1, b.opts.cores
	res.CPU = cpu
	res.CPU["client"] = clientCPU(cmd)
	if res.ServerPeakRSS, err = t.peakRSS(); err != nil {
		return Result{}, err
	}
	if t.id == targetNoop {
		res.ServedBy = nil // its canned answer names a tier that did nothing
	}
	if scenario == scenarioContend && t.claimd {
		b.checkContended(t, prefix, &res)
	}
	return res, nil
}

// eventIDTemplate is the ghz data template of a scenario: the same keys
// claimload sends (cmd/claimload AppendKey), from ghz's request number.
func (b *bench) eventIDTemplate(scenario, prefix string) string {
	dup := fmt.Sprintf("%s-{{mod .RequestNumber %d}}", dupPrefix, b.opts.dupKeys)
	switch scenario {
	case scenarioNew:
		return prefix + "-{{.RequestNumber}}"
	case scenarioDup:
		return dup
	case scenarioMix:
		return fmt.Sprintf("{{if eq (mod .RequestNumber 10) 0}}%s-{{.RequestNumber}}{{else}}%s{{end}}", prefix, dup)
	}
	return prefix
}

// ghzReport is the part of ghz's JSON report benchrun reads. Durations are
// in nanoseconds.
type ghzReport struct {
	Count               int64            `json:"count"`
	Total               int64            `json:"total"`
	RPS                 float64          `json:"rps"`
	StatusCodeDist      map[string]int64 `json:"statusCodeDistribution"`
	LatencyDistribution []struct {
		Percentage int   `json:"percentage"`
		Latency    int64 `json:"latency"`
	} `json:"latencyDistribution"`
}

func (b *bench) ghz(addr, scenario string, callers int, prefix string, authn bool, d time.Duration) (Result, *exec.Cmd, error) {
	data := fmt.Sprintf(`{"namespace":%q,"provider":%q,"holder":"ghz","event_id":"%s"}`,
		benchNamespace, benchProvider, b.eventIDTemplate(scenario, prefix))
	args := []string{"--insecure", "--call", "idempotency.v1.ClaimService.Claim",
		"-c", strconv.Itoa(callers), "-z", d.String(), "--duration-stop", "wait",
		"--format", "json", "-d", data}
	if authn {
		// The calls and the reflection request that finds the method
		// (reflection, too, needs an authenticated principal).
		md := fmt.Sprintf(`{"authorization":"Bearer %s"}`, b.token)
		args = append(args, "--metadata", md, "--reflect-metadata", md)
	}
	cmd := exec.CommandContext(b.ctx, b.opts.ghz, append(args, addr)...)
	cmd.Env = b.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, nil, fmt.Errorf("ghz: %w\n%s", err, stderr.String())
	}
	var r ghzReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return Result{}, nil, fmt.Errorf("ghz report: %w\n%s", err, stdout.String())
	}
	res := Result{Seconds: float64(r.Total) / 1e9, Requests: r.Count, Rate: r.RPS}
	for code, n := range r.StatusCodeDist {
		if code != "OK" {
			if res.ErrorCodes == nil {
				res.ErrorCodes = map[string]int64{}
			}
			res.ErrorCodes[code] += n
			res.Errors += n
		}
	}
	for _, l := range r.LatencyDistribution {
		switch l.Percentage {
		case 50:
			res.P50 = float64(l.Latency) / 1e6
		case 99:
			res.P99 = float64(l.Latency) / 1e6
		}
	}
	return res, cmd, nil
}

// claimloadSummary is claimload's JSON summary (cmd/claimload Summary).
type claimloadSummary struct {
	Seconds    float64               `json:"seconds"`
	Requests   int64                 `json:"requests"`
	Errors     int64                 `json:"errors"`
	ErrorCodes map[string]int64      `json:"error_codes"`
	RPS        float64               `json:"rps"`
	P50        float64               `json:"p50_ms"`
	P99        float64               `json:"p99_ms"`
	P999       float64               `json:"p999_ms"`
	Rate       float64               `json:"rate"`
	Late       int64                 `json:"late"`
	MaxLag     float64               `json:"max_lag_ms"`
	Outcomes   map[string]int64      `json:"outcomes"`
	ServedBy   map[string]int64      `json:"served_by"`
	RPCs       map[string]RPCLatency `json:"rpcs"`
}

func (b *bench) claimload(addrs []string, scenario string, callers int, prefix string, authn bool, s spec) (Result, *exec.Cmd, error) {
	args := []string{"-addr", strings.Join(addrs, ","), "-c", strconv.Itoa(callers), "-d", s.duration.String(),
		"-scenario", scenario, "-namespace", benchNamespace, "-provider", benchProvider,
		"-prefix", prefix, "-dup-prefix", dupPrefix, "-dup-keys", strconv.Itoa(b.opts.dupKeys), "-json"}
	if authn {
		args = append(args, "-token-file", b.tokenFile)
	}
	if s.rate > 0 {
		args = append(args, "-rate", strconv.FormatFloat(s.rate, 'f', 1, 64))
	}
	cmd := exec.CommandContext(b.ctx, b.bin("claimload"), args...)
	cmd.Env = b.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, nil, fmt.Errorf("claimload: %w\n%s", err, stderr.String())
	}
	var sum claimloadSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		return Result{}, nil, fmt.Errorf("claimload summary: %w\n%s", err, stdout.String())
	}
	return Result{
		Seconds: sum.Seconds, Requests: sum.Requests, Errors: sum.Errors, ErrorCodes: sum.ErrorCodes,
		Rate: sum.RPS, P50: sum.P50, P99: sum.P99, P999: sum.P999, Outcomes: sum.Outcomes, ServedBy: sum.ServedBy, RPCs: sum.RPCs,
		Due: sum.Rate, Late: sum.Late, MaxLag: sum.MaxLag,
	}, cmd, nil
}

// checkContended verifies that the contended key was acquired exactly once:
// its record has token 1 and attempt 1 (a second ACQUIRED would have taken
// it over), and claimload counted one ACQUIRED answer.
func (b *bench) checkContended(t *target, key string, res *Result) {
	ok := true
	var notes []string
	cc, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		defer cc.Close()
		ctx, cancel := context.WithTimeout(b.withToken(b.ctx), 10*time.Second)
		defer cancel()
		var resp *pb.GetResponse
		resp, err = pb.NewClaimServiceClient(cc).Get(ctx, &pb.GetRequest{Namespace: benchNamespace, Provider: benchProvider, Key: key})
		if err == nil {
			r := resp.GetRecord()
			notes = append(notes, fmt.Sprintf("record token %d, attempt %d", r.GetFencingToken(), r.GetAttempt()))
			ok = r.GetFencingToken() == 1 && r.GetAttempt() == 1
		}
	}
	if err != nil {
		ok = false
		notes = append(notes, fmt.Sprintf("Get: %v", err))
	}
	if res.Outcomes != nil {
		acquired := res.Outcomes[pb.Outcome_OUTCOME_ACQUIRED.String()]
		notes = append(notes, fmt.Sprintf("%d ACQUIRED", acquired))
		ok = ok && acquired == 1
	}
	if res.Errors > 0 {
		ok = false
	}
	res.Check = strings.Join(notes, ", ")
	res.CheckOK = &ok
}

// settle prepares the keys the duplicate scenarios claim: on claimd,
// claimed, moved to PROCESSING and SETTLED with a result (so they are
// answered as settled duplicates); on the naive handler, claimed (its only
// state); the no-op handler has no state.
func (b *bench) settle(t *target) error {
	if t.id == targetNoop {
		return nil
	}
	cc, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	client := pb.NewClaimServiceClient(cc)
	ctx, cancel := context.WithTimeout(b.withToken(b.ctx), 5*time.Minute)
	defer cancel()

	return forEach(16, int64(b.opts.dupKeys), func(i int64) error {
		return settleKey(ctx, client, t.claimd, fmt.Sprintf("%s-%d", dupPrefix, i))
	})
}

// forEach calls fn for 0 ≤ i < n from workers goroutines and returns the
// first error (the workers stop at it).
func forEach(workers int, n int64, fn func(i int64) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
	)
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < n && !failed.Load(); i = next.Add(1) - 1 {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func settleKey(ctx context.Context, c pb.ClaimServiceClient, transition bool, key string) error {
	claim, err := c.Claim(ctx, &pb.ClaimRequest{Namespace: benchNamespace, Provider: benchProvider,
		Key: &pb.ClaimRequest_EventId{EventId: key}, Holder: "benchrun"})
	if err != nil {
		return fmt.Errorf("Claim(%q): %w", key, err)
	}
	if !transition || claim.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
		return nil
	}
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		req := &pb.TransitionRequest{Namespace: benchNamespace, Provider: benchProvider, Key: key,
			FencingToken: claim.GetFencingToken(), LeaseSecret: claim.GetLeaseSecret(), To: to}
		if to == pb.EventState_EVENT_STATE_SETTLED {
			req.Result = []byte(`{"charge":"ch_` + key + `"}`)
		}
		if _, err := c.Transition(ctx, req); err != nil {
			return fmt.Errorf("Transition(%q, %v): %w (%v)", key, to, err, status.Code(err))
		}
	}
	return nil
}

// fmtCPU renders a CPU map in a stable order, for the log.
func fmtCPU(cpu map[string]float64) string {
	names := make([]string, 0, len(cpu))
	for k := range cpu {
		names = append(names, k)
	}
	sort.Strings(names)
	var sb strings.Builder
	for i, k := range names {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%s=%.1fs", k, cpu[k])
	}
	return sb.String()
}
