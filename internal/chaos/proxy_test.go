package chaos

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// countingHealth answers every Check SERVING and counts the calls it served.
type countingHealth struct {
	healthpb.UnimplementedHealthServer
	served atomic.Int64
}

func (h *countingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.served.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func TestProxyLosesRepliesTheServerSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := &countingHealth{}
	healthpb.RegisterHealthServer(srv, h)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	p, err := NewProxy(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cc, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	hc := healthpb.NewHealthClient(cc)
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}

	if err := call(); err != nil {
		t.Fatalf("Check through the proxy at drop rate 0: %v", err)
	}
	p.SetDropRate(1)
	err = call()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Check at drop rate 1: %v, want UNAVAILABLE", err)
	}
	if got := h.served.Load(); got != 2 {
		t.Errorf("server served %d calls, want 2 (the lost reply's call was served)", got)
	}
	if got := p.Dropped(); got != 1 {
		t.Errorf("Dropped() = %d, want 1", got)
	}
	p.SetDropRate(0)
	if err := call(); err != nil {
		t.Fatalf("Check after the drop, at rate 0 again: %v", err)
	}
}
