// Command noop serves idempotency.v1.ClaimService with a handler that does
// nothing: every Claim is answered with one prebuilt response of the size
// claimd sends for a settled duplicate. It is the transport limit of the
// benchmarks: what grpc-go, the proto codec and the load client cost on this
// machine when the handler costs nothing.
//
// It runs with grpc-go's default server options, like claimd, and registers
// reflection so that ghz needs no proto files.
//
//	noop --listen 127.0.0.1:50061
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:50061", "gRPC listen address")
	flag.Parse()
	if err := run(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "noop:", err)
		os.Exit(1)
	}
}

func run(listen string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pb.RegisterClaimServiceServer(srv, newHandler(time.Now()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(lis)
}

// handler answers every Claim with the same response.
type handler struct {
	pb.UnimplementedClaimServiceServer
	resp *pb.ClaimResponse
}

// newHandler builds the one response: a settled duplicate with a small
// result, every field claimd fills set, so the codec does the same work.
func newHandler(now time.Time) *handler {
	return &handler{resp: &pb.ClaimResponse{
		Outcome:         pb.Outcome_OUTCOME_DUPLICATE,
		Key:             "evt_1PXyzAbCdEfGhIjKlMnOpQr",
		KeySource:       pb.KeySource_KEY_SOURCE_EVENT_ID,
		FencingToken:    1,
		State:           pb.EventState_EVENT_STATE_SETTLED,
		LeaseExpiresAt:  timestamppb.New(now.Add(time.Minute)),
		WindowExpiresAt: timestamppb.New(now.Add(84 * time.Hour)),
		Ttl:             durationpb.New(84 * time.Hour),
		Attempt:         1,
		FirstSeenAt:     timestamppb.New(now),
		Result:          []byte(`{"charge":"ch_1"}`),
		ServedBy:        pb.Tier_TIER_LOCAL,
		Holder:          "pod-a",
	}}
}

// Claim returns the prebuilt response. grpc-go marshals it after the handler
// returns and never changes it, so sharing it between calls is safe.
func (h *handler) Claim(context.Context, *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	return h.resp, nil
}
