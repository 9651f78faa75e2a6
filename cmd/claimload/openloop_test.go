package main

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

func TestPacerSchedule(t *testing.T) {
	start := time.Unix(1_700_000_000, 0) // long past
	p := newPacer(&Config{Rate: 250, Duration: time.Second}, start)
	if got := p.due(0); !got.Equal(start) {
		t.Errorf("due(0) = %v, want the start", got)
	}
	if got := p.due(10); !got.Equal(start.Add(40 * time.Millisecond)) {
		t.Errorf("due(10) at 250/s = %v, want start+40ms", got)
	}
	// start is long past: every request is overdue and goes out at once,
	// in order; request 250 falls at the end of the 1 s run.
	go p.run(make(chan struct{}))
	var got []uint64
	for n := range p.next {
		got = append(got, n)
	}
	if len(got) != 250 || got[0] != 0 || got[249] != 249 {
		t.Errorf("a 1 s run at 250/s handed out %d requests (%v…), want 0 to 249", len(got), got[:min(len(got), 3)])
	}
	if closed := newPacer(&Config{Duration: time.Second}, start); closed != nil {
		t.Errorf("newPacer without a rate = %+v, want nil (closed loop)", closed)
	}
}

// TestPacerStops: a schedule cut short hands out nothing more and closes.
func TestPacerStops(t *testing.T) {
	p := newPacer(&Config{Rate: 1000, Duration: time.Hour}, time.Now())
	stop := make(chan struct{})
	go p.run(stop)
	if n := <-p.next; n != 0 {
		t.Fatalf("first request %d, want 0", n)
	}
	close(stop)
	for range p.next { // at most the one it was handing out
	}
}

// TestClockSleepsUntil: the pacer's sleeps end at their time, not before,
// and a time already past does not sleep.
func TestClockSleepsUntil(t *testing.T) {
	c := newClock()
	for _, d := range []time.Duration{300 * time.Microsecond, 2 * time.Millisecond} {
		until := time.Now().Add(d)
		c.sleepUntil(until)
		if early := time.Until(until); early > 0 {
			t.Errorf("sleepUntil(now+%v) returned %v early", d, early)
		}
	}
	before := time.Now()
	c.sleepUntil(before.Add(-time.Hour))
	if took := time.Since(before); took > time.Second {
		t.Errorf("sleepUntil(an hour ago) took %v", took)
	}
}

// slowClaims answers every Claim after a fixed service time.
type slowClaims struct {
	pb.UnimplementedClaimServiceServer
	service time.Duration
}

func (s slowClaims) Claim(context.Context, *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	time.Sleep(s.service) // the work a server does, not a wait for an event
	return &pb.ClaimResponse{Outcome: pb.Outcome_OUTCOME_ACQUIRED}, nil
}

// TestOpenLoopCountsTheWait: one caller against a server that takes 10 ms a
// call, asked for 200 calls a second (one every 5 ms), falls further behind
// with every call. The closed loop reports the 10 ms service time; the open
// loop charges each call for the time it waited behind the others, so its
// p99 is far above the service time and nearly every call went out late.
func TestOpenLoopCountsTheWait(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterClaimServiceServer(srv, slowClaims{service: 10 * time.Millisecond})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	run := func(rate float64) Summary {
		t.Helper()
		cfg := Config{Addrs: []string{lis.Addr().String()}, Callers: 1, Duration: 400 * time.Millisecond, Conns: 1,
			Scenario: ScenarioNew, Namespace: "bench", Provider: "stripe", Prefix: "p", DupPrefix: "d", DupKeys: 1, Rate: rate}
		sum, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	closed := run(0)
	open := run(200)
	if closed.P99 > 60 {
		t.Logf("closed loop p99 %.1fms: a loaded machine", closed.P99)
	}
	// 400 ms at 200/s is 80 calls due; at 10 ms each one caller sends
	// about 40, the last of them due ~200 ms before it went out.
	if open.P99 < 100 || open.P99 < 3*closed.P50 {
		t.Errorf("open loop p99 = %.1fms (closed loop p50 %.1fms), want the waits counted: ≥ 100ms", open.P99, closed.P50)
	}
	if open.Late < open.Requests/2 || open.MaxLag < 100 {
		t.Errorf("open loop late %d of %d, max lag %.1fms; want most calls late by up to ~200ms", open.Late, open.Requests, open.MaxLag)
	}
	if closed.Late != 0 || closed.Rate != 0 {
		t.Errorf("closed loop late %d rate %v, want 0, 0", closed.Late, closed.Rate)
	}
}
