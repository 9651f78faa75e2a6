package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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
	// ScenarioLifecycle is a webhook's whole event on a new key: Claim,
	// Transition to PROCESSING, Transition to SETTLED with a small result.
	ScenarioLifecycle
	// ScenarioLifecycleStart is the same event with one RPC fewer: a Claim
	// with start (ACQUIRED already in PROCESSING), then SETTLED.
	ScenarioLifecycleStart
)

var scenarioNames = map[Scenario]string{
	ScenarioNew: "new", ScenarioDup: "dup", ScenarioMix: "mix", ScenarioContend: "contend",
	ScenarioLifecycle: "lifecycle", ScenarioLifecycleStart: "lifecycle-start",
}

// Lifecycle reports whether s runs whole events (Claim and Transitions)
// rather than single Claims.
func (s Scenario) Lifecycle() bool { return s == ScenarioLifecycle || s == ScenarioLifecycleStart }

// The RPCs of a lifecycle event, as Summary.RPCs names them.
const (
	rpcClaim      = "claim"
	rpcProcessing = "processing"
	rpcSettle     = "settle"
)

// rpcNames index caller.rpcLat.
var rpcNames = [...]string{rpcClaim, rpcProcessing, rpcSettle}

func (s Scenario) String() string { return scenarioNames[s] }

// ParseScenario is the inverse of Scenario.String.
func ParseScenario(name string) (Scenario, error) {
	for s, n := range scenarioNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown scenario %q: want new, dup, mix, contend, lifecycle or lifecycle-start", name)
}

// Config is one run of the load.
type Config struct {
	// Addrs are the servers (replicas of one service); the connections go
	// to them round robin.
	Addrs     []string
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
	// Token, when set, is sent as "authorization: Bearer <token>" on every
	// call, so that the server's authentication is inside every figure.
	Token string
	// Rate, when positive, makes the run an open loop: requests (events)
	// are due at Rate per second, and latency counts from when each was
	// due (see pacer). Callers then bounds the requests in flight.
	Rate float64
}

// lateAfter is how far past its due time a request may go out and still
// count as on time.
const lateAfter = time.Millisecond

// pacer is the schedule of an open loop: request n is due at start +
// n×interval, whichever caller takes it. One goroutine on a thread of its
// own (run) sleeps until each request is due and hands its number to a
// free caller; one that is overdue (every caller was busy) goes out as soon
// as a caller is free, and its latency still counts from when it was due,
// so the time it waited for a caller is in the figures (no coordinated
// omission). A nil pacer is the closed loop: each request is due when its
// caller is free.
type pacer struct {
	start    time.Time
	interval time.Duration
	end      time.Time   // nothing is due at or after end
	next     chan uint64 // the numbers of requests due, closed when none is left
}

func newPacer(cfg *Config, start time.Time) *pacer {
	if cfg.Rate <= 0 {
		return nil
	}
	return &pacer{start: start, interval: time.Duration(float64(time.Second) / cfg.Rate), end: start.Add(cfg.Duration), next: make(chan uint64)}
}

// due is when request n is due.
func (p *pacer) due(n uint64) time.Time { return p.start.Add(time.Duration(n) * p.interval) }

// run hands each request's number to a caller when it is due, until the
// run's end or stop. Its sleeps are sleepUntil's, on a thread locked to
// it: a Go timer wakes an idle process to the millisecond only (the
// runtime's poller waits in whole milliseconds), which sent requests up to
// a millisecond or two late, against a server that answered at once, and
// counted that against the server.
func (p *pacer) run(stop <-chan struct{}) {
	defer close(p.next)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := newClock()
	for n := uint64(0); ; n++ {
		due := p.due(n)
		if !due.Before(p.end) {
			return
		}
		clock.sleepUntil(due) // the schedule itself, not a stand-in for an event
		select {
		case p.next <- n:
		case <-stop:
			return
		}
	}
}

// AppendKey appends the event id of request number n to dst.
func (c *Config) AppendKey(dst []byte, n uint64) []byte {
	isNew := c.Scenario == ScenarioNew || c.Scenario.Lifecycle() || (c.Scenario == ScenarioMix && n%10 == 0)
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

// Summary is the result of a run. Latencies are in milliseconds. In a
// lifecycle scenario Requests counts events (each several RPCs), RPS is
// events per second, and the percentiles are over every RPC; RPCs has
// them per RPC.
type Summary struct {
	Scenario   string           `json:"scenario"`
	Callers    int              `json:"callers"`
	Seconds    float64          `json:"seconds"`
	Requests   int64            `json:"requests"`
	Calls      int64            `json:"calls"` // RPCs sent, errors included
	Errors     int64            `json:"errors"`
	ErrorCodes map[string]int64 `json:"error_codes,omitempty"`
	RPS        float64          `json:"rps"`
	P50        float64          `json:"p50_ms"`
	P90        float64          `json:"p90_ms"`
	P99        float64          `json:"p99_ms"`
	P999       float64          `json:"p999_ms"`
	Max        float64          `json:"max_ms"`
	// Rate is the open loop's requests due per second (0: closed loop);
	// Late counts the requests that went out more than lateAfter after
	// they were due, MaxLag the latest.
	Rate     float64          `json:"rate,omitempty"`
	Late     int64            `json:"late,omitempty"`
	MaxLag   float64          `json:"max_lag_ms,omitempty"`
	Outcomes map[string]int64 `json:"outcomes"`
	ServedBy map[string]int64 `json:"served_by"`
	RPCs     map[string]RPC   `json:"rpcs,omitempty"`
}

// RPC is the latency of one RPC of a lifecycle event.
type RPC struct {
	Calls int64   `json:"calls"` // answered without error
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
}

func (s Summary) String() string {
	out := fmt.Sprintf("%s: %d requests in %.2fs, %.0f rps, p50 %.2fms p90 %.2fms p99 %.2fms p99.9 %.2fms max %.2fms, %d errors %v, outcomes %v, served by %v",
		s.Scenario, s.Requests, s.Seconds, s.RPS, s.P50, s.P90, s.P99, s.P999, s.Max, s.Errors, s.ErrorCodes, s.Outcomes, s.ServedBy)
	if s.Rate > 0 {
		out += fmt.Sprintf("; open loop at %.0f/s: %d late, max lag %.2fms", s.Rate, s.Late, s.MaxLag)
	}
	for _, n := range rpcNames {
		if r, ok := s.RPCs[n]; ok {
			out += fmt.Sprintf("; %s p50 %.2fms p99 %.2fms p99.9 %.2fms", n, r.P50, r.P99, r.P999)
		}
	}
	return out
}

// caller is one closed loop. Its counters are its own, so the hot loop
// shares nothing but the request sequence and the stop flag.
type caller struct {
	lat      []time.Duration // successful calls (lifecycle: events) only
	rpcLat   [len(rpcNames)][]time.Duration
	calls    int64
	late     int64
	maxLag   time.Duration
	errCodes map[string]int64
	outcomes [5]int64 // by pb.Outcome
	served   [4]int64 // by pb.Tier
}

// Run drives cfg's load until cfg.Duration has passed (callers finish the
// call they are in) or ctx ends.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	conns := make([]*grpc.ClientConn, max(cfg.Conns, len(cfg.Addrs)))
	for i := range conns {
		cc, err := grpc.NewClient(cfg.Addrs[i%len(cfg.Addrs)], grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	pace := newPacer(&cfg, start)
	stop := make(chan struct{})
	if pace != nil {
		go pace.run(stop)
	}
	for i := range callers {
		c := &caller{lat: make([]time.Duration, 0, 1<<16), errCodes: map[string]int64{}}
		callers[i] = c
		cc := conns[i%len(conns)]
		cctx := withToken(ctx, cfg.Token)
		if cfg.Scenario.Lifecycle() {
			for r := range c.rpcLat {
				c.rpcLat[r] = make([]time.Duration, 0, 1<<15)
			}
			wg.Go(func() { c.lifecycle(cctx, cc, &cfg, pace, &seq, &stopped) })
			continue
		}
		wg.Go(func() { c.loop(cctx, cc, &cfg, pace, &seq, &stopped) })
	}
	timer := time.NewTimer(cfg.Duration)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	stopped.Store(true)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return Summary{}, err
	}
	return summarize(cfg, callers, elapsed), nil
}

// next takes the next request number and returns when it was due (after
// waiting for it in an open loop); ok is false when the run is over.
func (c *caller) next(pace *pacer, seq *atomic.Uint64) (n uint64, due time.Time, ok bool) {
	if pace == nil {
		return seq.Add(1) - 1, time.Now(), true
	}
	if n, ok = <-pace.next; !ok {
		return 0, time.Time{}, false
	}
	due = pace.due(n)
	lag := time.Since(due)
	if lag > lateAfter {
		c.late++
	}
	c.maxLag = max(c.maxLag, lag)
	return n, due, ok
}

func (c *caller) loop(ctx context.Context, cc *grpc.ClientConn, cfg *Config, pace *pacer, seq *atomic.Uint64, stopped *atomic.Bool) {
	req := &pb.ClaimRequest{Namespace: cfg.Namespace, Provider: cfg.Provider, Holder: cfg.Holder}
	key := &pb.ClaimRequest_EventId{}
	req.Key = key
	resp := &pb.ClaimResponse{}
	var buf []byte
	for !stopped.Load() && ctx.Err() == nil {
		n, t0, ok := c.next(pace, seq)
		if !ok {
			return
		}
		buf = cfg.AppendKey(buf[:0], n)
		key.EventId = string(buf)
		err := cc.Invoke(ctx, pb.ClaimService_Claim_FullMethodName, req, resp)
		d := time.Since(t0)
		c.calls++
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

// withToken returns ctx carrying the bearer token, once per caller rather
// than per call (as a client with a static token does).
func withToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// lifecycle runs whole events on new keys: Claim (with start for
// ScenarioLifecycleStart), Transition to PROCESSING (without start), and
// Transition to SETTLED with a small result. An event counts when all its
// RPCs succeeded; a Claim that does not acquire is an error
// ("NOT_ACQUIRED"), since every key is new.
//
// In an open loop the Claim's latency, and the event's, count from when the
// event was due; each Transition's from when it was sent, right after the
// answer before it.
func (c *caller) lifecycle(ctx context.Context, cc *grpc.ClientConn, cfg *Config, pace *pacer, seq *atomic.Uint64, stopped *atomic.Bool) {
	start := cfg.Scenario == ScenarioLifecycleStart
	req := &pb.ClaimRequest{Namespace: cfg.Namespace, Provider: cfg.Provider, Holder: cfg.Holder, Start: start}
	key := &pb.ClaimRequest_EventId{}
	req.Key = key
	resp := &pb.ClaimResponse{}
	tr := &pb.TransitionRequest{Namespace: cfg.Namespace, Provider: cfg.Provider}
	tresp := &pb.TransitionResponse{}
	var buf []byte
	invoke := func(rpc int, from time.Time, method string, in, out any) bool {
		t0 := from
		err := cc.Invoke(ctx, method, in, out)
		d := time.Since(t0)
		c.calls++
		if err != nil {
			c.errCodes[status.Code(err).String()]++
			return false
		}
		c.rpcLat[rpc] = append(c.rpcLat[rpc], d)
		return true
	}
	for !stopped.Load() && ctx.Err() == nil {
		n, t0, ok := c.next(pace, seq)
		if !ok {
			return
		}
		buf = cfg.AppendKey(buf[:0], n)
		key.EventId = string(buf)
		if !invoke(0, t0, pb.ClaimService_Claim_FullMethodName, req, resp) {
			continue
		}
		if o := int(resp.GetOutcome()); o < len(c.outcomes) {
			c.outcomes[o]++
		}
		if t := int(resp.GetServedBy()); t < len(c.served) {
			c.served[t]++
		}
		if resp.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
			c.errCodes["NOT_ACQUIRED"]++
			continue
		}
		tr.Key, tr.FencingToken, tr.LeaseSecret = resp.GetKey(), resp.GetFencingToken(), resp.GetLeaseSecret()
		if !start {
			tr.To, tr.Result = pb.EventState_EVENT_STATE_PROCESSING, nil
			if !invoke(1, time.Now(), pb.ClaimService_Transition_FullMethodName, tr, tresp) {
				continue
			}
		}
		tr.To = pb.EventState_EVENT_STATE_SETTLED
		tr.Result = append(tr.Result[:0], `{"charge":"ch_`...)
		tr.Result = append(tr.Result, buf...)
		tr.Result = append(tr.Result, `"}`...)
		if !invoke(2, time.Now(), pb.ClaimService_Transition_FullMethodName, tr, tresp) {
			continue
		}
		c.lat = append(c.lat, time.Since(t0))
	}
}

func summarize(cfg Config, callers []*caller, elapsed time.Duration) Summary {
	s := Summary{
		Scenario: cfg.Scenario.String(),
		Callers:  cfg.Callers,
		Seconds:  elapsed.Seconds(),
		Rate:     cfg.Rate,
		Outcomes: map[string]int64{},
		ServedBy: map[string]int64{},
	}
	var lat []time.Duration
	var rpcLat [len(rpcNames)][]time.Duration
	for _, c := range callers {
		lat = append(lat, c.lat...)
		s.Calls += c.calls
		s.Late += c.late
		s.MaxLag = max(s.MaxLag, ms(c.maxLag))
		for r := range rpcLat {
			rpcLat[r] = append(rpcLat[r], c.rpcLat[r]...)
		}
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
	if cfg.Scenario.Lifecycle() {
		// Events: a failed RPC ends its event, so each error is one
		// event that did not complete.
		var all []time.Duration
		s.RPCs = map[string]RPC{}
		for r, l := range rpcLat {
			if len(l) == 0 {
				continue
			}
			slices.Sort(l)
			s.RPCs[rpcNames[r]] = RPC{Calls: int64(len(l)), P50: ms(Percentile(l, 50)), P99: ms(Percentile(l, 99)), P999: ms(Percentile(l, 99.9))}
			all = append(all, l...)
		}
		s.RPS = float64(len(lat)) / elapsed.Seconds()
		lat = all
	} else {
		s.RPS = float64(s.Requests) / elapsed.Seconds()
	}
	slices.Sort(lat)
	s.P50, s.P90, s.P99, s.P999 = ms(Percentile(lat, 50)), ms(Percentile(lat, 90)), ms(Percentile(lat, 99)), ms(Percentile(lat, 99.9))
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
