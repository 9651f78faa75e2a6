package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Scenario chooses the key of each request.
type Scenario uint8

// The scenarios of the benchmark (see the package comment).
const (
	ScenarioNew Scenario = iota + 1
	ScenarioDup
	ScenarioMix
	ScenarioContend
)

var scenarioNames = map[Scenario]string{
	ScenarioNew: "new", ScenarioDup: "dup", ScenarioMix: "mix", ScenarioContend: "contend",
}

func (s Scenario) String() string { return scenarioNames[s] }

// ParseScenario is the inverse of Scenario.String.
func ParseScenario(name string) (Scenario, error) {
	for s, n := range scenarioNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown scenario %q: want new, dup, mix or contend", name)
}

// Config is one run of the load.
type Config struct {
	Addr      string
	Callers   int
	Duration  time.Duration
	Conns     int
	Scenario  Scenario
	Namespace string
	Provider  string
	Prefix    string
	DupPrefix string
	DupKeys   int
	Holder    string
}

// AppendKey appends the event id of request number n to dst.
func (c *Config) AppendKey(dst []byte, n uint64) []byte {
	isNew := c.Scenario == ScenarioNew || (c.Scenario == ScenarioMix && n%10 == 0)
	switch {
	case c.Scenario == ScenarioContend:
		return append(dst, c.Prefix...)
	case isNew:
		dst = append(dst, c.Prefix...)
		dst = append(dst, '-')
		return strconv.AppendUint(dst, n, 10)
	default:
		dst = append(dst, c.DupPrefix...)
		dst = append(dst, '-')
		return strconv.AppendUint(dst, n%uint64(c.DupKeys), 10)
	}
}

// Summary is the result of a run. Latencies are in milliseconds.
type Summary struct {
	Scenario   string           `json:"scenario"`
	Callers    int              `json:"callers"`
	Seconds    float64          `json:"seconds"`
	Requests   int64            `json:"requests"`
	Errors     int64            `json:"errors"`
	ErrorCodes map[string]int64 `json:"error_codes,omitempty"`
	RPS        float64          `json:"rps"`
	P50        float64          `json:"p50_ms"`
	P90        float64          `json:"p90_ms"`
	P99        float64          `json:"p99_ms"`
	Max        float64          `json:"max_ms"`
	Outcomes   map[string]int64 `json:"outcomes"`
	ServedBy   map[string]int64 `json:"served_by"`
}

func (s Summary) String() string {
	return fmt.Sprintf("%s: %d requests in %.2fs, %.0f rps, p50 %.2fms p90 %.2fms p99 %.2fms max %.2fms, %d errors %v, outcomes %v, served by %v",
		s.Scenario, s.Requests, s.Seconds, s.RPS, s.P50, s.P90, s.P99, s.Max, s.Errors, s.ErrorCodes, s.Outcomes, s.ServedBy)
}

// caller is one closed loop. Its counters are its own, so the hot loop
// shares nothing but the request sequence and the stop flag.
type caller struct {
	lat      []time.Duration // successful calls only
	errCodes map[string]int64
	outcomes [5]int64 // by pb.Outcome
	served   [4]int64 // by pb.Tier
}

// Run drives cfg's load until cfg.Duration has passed (callers finish the
// call they are in) or ctx ends.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	conns := make([]*grpc.ClientConn, cfg.Conns)
	for i := range conns {
		cc, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return Summary{}, err
		}
		defer cc.Close()
		conns[i] = cc
	}
	// Connect before the clock starts.
	for _, cc := range conns {
		cc.Connect()
	}

	var (
		seq     atomic.Uint64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	callers := make([]*caller, cfg.Callers)
	start := time.Now()
	for i := range callers {
		c := &caller{lat: make([]time.Duration, 0, 1<<16), errCodes: map[string]int64{}}
		callers[i] = c
		cc := conns[i%len(conns)]
		wg.Go(func() { c.loop(ctx, cc, &cfg, &seq, &stopped) })
	}
	timer := time.NewTimer(cfg.Duration)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	stopped.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Summary{}, err
	}
	return summarize(cfg, callers, elapsed), nil
}

func (c *caller) loop(ctx context.Context, cc *grpc.ClientConn, cfg *Config, seq *atomic.Uint64, stopped *atomic.Bool) {
	req := &pb.ClaimRequest{Namespace: cfg.Namespace, Provider: cfg.Provider, Holder: cfg.Holder}
	key := &pb.ClaimRequest_EventId{}
	req.Key = key
	resp := &pb.ClaimResponse{}
	var buf []byte
	for !stopped.Load() && ctx.Err() == nil {
		buf = cfg.AppendKey(buf[:0], seq.Add(1)-1)
		key.EventId = string(buf)
		t0 := time.Now()
		err := cc.Invoke(ctx, pb.ClaimService_Claim_FullMethodName, req, resp)
		d := time.Since(t0)
		if err != nil {
			c.errCodes[status.Code(err).String()]++
			continue
		}
		c.lat = append(c.lat, d)
		if o := int(resp.GetOutcome()); o < len(c.outcomes) {
			c.outcomes[o]++
		}
		if t := int(resp.GetServedBy()); t < len(c.served) {
			c.served[t]++
		}
	}
}

func summarize(cfg Config, callers []*caller, elapsed time.Duration) Summary {
	s := Summary{
		Scenario: cfg.Scenario.String(),
		Callers:  cfg.Callers,
		Seconds:  elapsed.Seconds(),
		Outcomes: map[string]int64{},
		ServedBy: map[string]int64{},
	}
	var lat []time.Duration
	for _, c := range callers {
		lat = append(lat, c.lat...)
		for code, n := range c.errCodes {
			if s.ErrorCodes == nil {
				s.ErrorCodes = map[string]int64{}
			}
			s.ErrorCodes[code] += n
			s.Errors += n
		}
		for o, n := range c.outcomes {
			if n > 0 {
				s.Outcomes[pb.Outcome(o).String()] += n
			}
		}
		for t, n := range c.served {
			if n > 0 {
				s.ServedBy[pb.Tier(t).String()] += n
			}
		}
	}
	s.Requests = int64(len(lat)) + s.Errors
	s.RPS = float64(s.Requests) / elapsed.Seconds()
	slices.Sort(lat)
	s.P50, s.P90, s.P99 = ms(Percentile(lat, 50)), ms(Percentile(lat, 90)), ms(Percentile(lat, 99))
	if len(lat) > 0 {
		s.Max = ms(lat[len(lat)-1])
	}
	return s
}

// Percentile returns the p-th percentile (nearest rank) of sorted, or 0
// when it is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
