package metrics_test

import (
	"context"
	"net"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/metrics"
)

// answering answers a Claim of namespace "ok" DUPLICATE, of "cancelled"
// with a context error (which grpc-go answers CANCELLED), and every other
// one UNAVAILABLE.
type answering struct {
	pb.UnimplementedClaimServiceServer
}

func (answering) Claim(_ context.Context, req *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	switch req.GetNamespace() {
	case "ok":
		return &pb.ClaimResponse{Outcome: pb.Outcome_OUTCOME_DUPLICATE}, nil
	case "cancelled":
		return nil, context.Canceled
	default:
		return nil, status.Error(codes.Unavailable, "down")
	}
}

// TestGRPCSeriesMatchTheProvider holds claimd's gRPC server metrics to
// go-grpc-middleware's Prometheus provider, whose series they replace:
// one server runs both interceptors, each onto its own registry, and every
// family (name, help, type), series (labels) and count must be the same,
// at zero after InitializeGRPC and after unary calls of three codes and a
// server stream.
func TestGRPCSeriesMatchTheProvider(t *testing.T) {
	ours, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	m, err := metrics.New(ours, metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lib := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(metrics.LatencyBuckets)))
	theirs.MustRegister(lib)

	srv := grpc.NewServer(append(m.ServerOptions(),
		grpc.ChainUnaryInterceptor(lib.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lib.StreamServerInterceptor()))...)
	pb.RegisterClaimServiceServer(srv, answering{})
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	m.InitializeGRPC(srv)
	lib.InitializeMetrics(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	compareGRPC(t, "after InitializeGRPC", ours, theirs)

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx := context.Background()
	claims := pb.NewClaimServiceClient(cc)
	for _, ns := range []string{"ok", "ok", "unavailable", "cancelled"} {
		claims.Claim(ctx, &pb.ClaimRequest{Namespace: ns}) // the codes are what is counted
	}
	// A server stream: the first status, then the server's end of it.
	wctx, cancel := context.WithCancel(ctx)
	w, err := healthpb.NewHealthClient(cc).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	hs.Shutdown() // sends NOT_SERVING: a second message
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	srv.GracefulStop() // waits for the stream's handler to return, so both interceptors have counted it
	compareGRPC(t, "after the calls", ours, theirs)

	if got := counter(t, ours, "grpc_server_handled_total", "Claim", "Unavailable"); got != 1 {
		t.Errorf("grpc_server_handled_total{Claim, Unavailable} = %v, want 1", got)
	}
	if got := counter(t, ours, "grpc_server_msg_sent_total", "Watch", ""); got != 2 {
		t.Errorf("grpc_server_msg_sent_total{Watch} = %v, want 2", got)
	}
}

// compareGRPC fails unless the grpc_server_ families of both registries
// are the same: names, help, types, label sets, counter values and
// histogram sample counts (not their seconds).
func compareGRPC(t *testing.T, when string, ours, theirs *prometheus.Registry) {
	t.Helper()
	a, b := grpcFamilies(t, ours), grpcFamilies(t, theirs)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("%s: %d grpc_server_ families, the provider %d", when, len(a), len(b))
	}
	for name, fa := range a {
		fb, ok := b[name]
		if !ok {
			t.Errorf("%s: %s is not the provider's", when, name)
			continue
		}
		if fa.GetHelp() != fb.GetHelp() || fa.GetType() != fb.GetType() {
			t.Errorf("%s: %s is %v %q, the provider's %v %q", when, name, fa.GetType(), fa.GetHelp(), fb.GetType(), fb.GetHelp())
		}
		sa, sb := seriesOf(fa), seriesOf(fb)
		if len(sa) != len(sb) {
			t.Errorf("%s: %s has %d series, the provider's %d", when, name, len(sa), len(sb))
		}
		for labels, v := range sb {
			if got, ok := sa[labels]; !ok || got != v {
				t.Errorf("%s: %s{%s} = %v (present %v), the provider's %v", when, name, labels, got, ok, v)
			}
		}
	}
}

func grpcFamilies(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "grpc_server_") {
			out[mf.GetName()] = mf
		}
	}
	return out
}

// seriesOf maps each series' labels to its count: a counter's value, a
// histogram's sample count.
func seriesOf(mf *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, s := range mf.GetMetric() {
		var l []string
		for _, lp := range s.GetLabel() {
			l = append(l, lp.GetName()+"="+lp.GetValue())
		}
		labels := strings.Join(l, ",")
		if h := s.GetHistogram(); h != nil {
			out[labels] = float64(h.GetSampleCount())
			continue
		}
		out[labels] = s.GetCounter().GetValue()
	}
	return out
}

// counter is the value of the grpc_server_ counter name of method (and
// code, when set).
func counter(t *testing.T, reg *prometheus.Registry, name, method, code string) float64 {
	t.Helper()
	mf, ok := grpcFamilies(t, reg)[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
	for _, s := range mf.GetMetric() {
		match := true
		for _, lp := range s.GetLabel() {
			switch lp.GetName() {
			case "grpc_method":
				match = match && lp.GetValue() == method
			case "grpc_code":
				match = match && lp.GetValue() == code
			}
		}
		if match {
			return s.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s{grpc_method=%q, grpc_code=%q}", name, method, code)
	return 0
}
