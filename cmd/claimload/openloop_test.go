package main

import (
	"context"
	"net"
	"sync/atomic"
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
	var stopped atomic.Bool
	// start is long past: request 1 is overdue, goes out at once, and says
	// how late; request 250 falls at the end of the 1 s run.
	if due, lag, ok := p.wait(1, &stopped); !ok || !due.Equal(start.Add(4*time.Millisecond)) || lag < time.Hour {
		t.Errorf("wait(1) = %v, lag %v, %v; want its due time, a lag of years, ok", due, lag, ok)
	}
	if _, _, ok := p.wait(250, &stopped); ok {
		t.Error("wait(250) at 250/s for 1s = ok, want the run over")
	}
	if closed := newPacer(&Config{Duration: time.Second}, start); closed != nil {
		t.Errorf("newPacer without a rate = %+v, want nil (closed loop)", closed)
	}
	if due, lag, ok := (*pacer)(nil).wait(7, &stopped); !ok || lag != 0 || time.Since(due) > time.Minute {
		t.Errorf("closed loop wait = %v, %v, %v; want now, no lag, ok", due, lag, ok)
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
