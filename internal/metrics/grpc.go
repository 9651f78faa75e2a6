package metrics

import (
	"context"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// grpcMetrics are go-grpc-middleware's server metrics: grpc_server_started_total,
// grpc_server_handled_total{grpc_code}, grpc_server_msg_{received,sent}_total
// and grpc_server_handling_seconds, by grpc_type, grpc_service and
// grpc_method.
type grpcMetrics struct {
	server *grpcprom.ServerMetrics
}

func newGRPCMetrics() *grpcMetrics {
	return &grpcMetrics{server: grpcprom.NewServerMetrics(
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(LatencyBuckets)),
	)}
}

// ServerOptions returns the interceptors that feed the gRPC server metrics.
// When a call is traced, its counters and histogram observations carry the
// trace id as an exemplar (exposed to scrapers that ask for OpenMetrics), so
// a latency spike on the dashboard leads to a trace.
func (m *Metrics) ServerOptions() []grpc.ServerOption {
	ex := grpcprom.WithExemplarFromContext(exemplar)
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.grpc.server.UnaryServerInterceptor(ex)),
		grpc.ChainStreamInterceptor(m.grpc.server.StreamServerInterceptor(ex)),
	}
}

// InitializeGRPC creates the series of every method registered on srv at
// zero, so that rates and alerts see the first call of each. Call it after
// every service is registered.
func (m *Metrics) InitializeGRPC(srv *grpc.Server) {
	m.grpc.server.InitializeMetrics(srv)
}

func exemplar(ctx context.Context) prometheus.Labels {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return prometheus.Labels{"trace_id": sc.TraceID().String()}
	}
	return nil
}
