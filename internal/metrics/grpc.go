package metrics

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics are the gRPC server metrics of go-grpc-middleware's Prometheus
// provider, by the same names, help and labels (grpc_test.go holds them to
// the provider's): grpc_server_started_total, grpc_server_handled_total
// {grpc_code}, grpc_server_msg_{received,sent}_total and
// grpc_server_handling_seconds, by grpc_type, grpc_service and grpc_method.
//
// claimd feeds them with its own interceptors, which find a method's series
// once and then only add to them. The provider's looked up five label sets
// and allocated a reporter and its label slices on every call: about 3 µs of
// the 33 µs a duplicate costs claimd, a tenth of it (bench/NOTES.md).
type grpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec

	methods sync.Map // full method name → *methodSeries
}

// methodSeries are the series of one method.
type methodSeries struct {
	started, received, sent prometheus.Counter
	handling                prometheus.Observer
	handled                 [codes.Unauthenticated + 1]prometheus.Counter // by code
	labels                  []string                                      // grpc_type, grpc_service, grpc_method
}

func newGRPCMetrics() *grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &grpcMetrics{
		started:  counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels...),
		handled:  counter("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", append(labels, "grpc_code")...),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels...),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels...),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: LatencyBuckets,
		}, labels),
	}
}

func (g *grpcMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.started, g.handled, g.received, g.sent, g.handling}
}

// series returns the series of fullMethod ("/package.Service/Method"), of
// type typ, creating them (at zero, every code) the first time.
func (g *grpcMetrics) series(fullMethod, typ string) *methodSeries {
	if s, ok := g.methods.Load(fullMethod); ok {
		return s.(*methodSeries)
	}
	service, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	lv := []string{typ, service, method}
	s := &methodSeries{
		started:  g.started.WithLabelValues(lv...),
		received: g.received.WithLabelValues(lv...),
		sent:     g.sent.WithLabelValues(lv...),
		handling: g.handling.WithLabelValues(lv...),
		labels:   lv,
	}
	for c := range s.handled {
		s.handled[c] = g.handled.WithLabelValues(typ, service, method, codes.Code(c).String())
	}
	actual, _ := g.methods.LoadOrStore(fullMethod, s)
	return actual.(*methodSeries)
}

// handledCounter is the handled series of code.
func (g *grpcMetrics) handledCounter(s *methodSeries, code codes.Code) prometheus.Counter {
	if int(code) < len(s.handled) {
		return s.handled[code]
	}
	return g.handled.WithLabelValues(append(s.labels, code.String())...)
}

// call is one RPC being counted: its series, start and exemplar.
type call struct {
	series   *methodSeries
	start    time.Time
	exemplar prometheus.Labels // nil unless the call is traced and sampled
}

func (g *grpcMetrics) begin(ctx context.Context, fullMethod, typ string) call {
	c := call{series: g.series(fullMethod, typ), start: time.Now(), exemplar: exemplar(ctx)}
	add(c.series.started, c.exemplar)
	return c
}

// end counts the call handled with err's code, as grpc-go answers it
// (a context error is CANCELLED or DEADLINE_EXCEEDED).
func (g *grpcMetrics) end(c call, err error) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	add(g.handledCounter(c.series, st.Code()), c.exemplar)
	if c.exemplar == nil {
		c.series.handling.Observe(time.Since(c.start).Seconds())
		return
	}
	c.series.handling.(prometheus.ExemplarObserver).ObserveWithExemplar(time.Since(c.start).Seconds(), c.exemplar)
}

func add(c prometheus.Counter, exemplar prometheus.Labels) {
	if exemplar == nil {
		c.Inc()
		return
	}
	c.(prometheus.ExemplarAdder).AddWithExemplar(1, exemplar)
}

func (g *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c := g.begin(ctx, info.FullMethod, "unary")
	add(c.series.received, c.exemplar)
	resp, err := handler(ctx, req)
	if err == nil {
		add(c.series.sent, c.exemplar)
	}
	g.end(c, err)
	return resp, err
}

func (g *grpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c := g.begin(ss.Context(), info.FullMethod, streamType(info.IsClientStream, info.IsServerStream))
	err := handler(srv, &countedStream{ServerStream: ss, call: c})
	g.end(c, err)
	return err
}

func streamType(client, server bool) string {
	switch {
	case client && server:
		return "bidi_stream"
	case client:
		return "client_stream"
	case server:
		return "server_stream"
	}
	return "unary"
}

// countedStream counts the messages of a stream.
type countedStream struct {
	grpc.ServerStream
	call call
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		add(s.call.series.sent, s.call.exemplar)
	}
	return err
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		add(s.call.series.received, s.call.exemplar)
	}
	return err
}

// ServerOptions returns the interceptors that feed the gRPC server metrics.
// When a call is traced, its counters and histogram observations carry the
// trace id as an exemplar (exposed to scrapers that ask for OpenMetrics), so
// a latency spike on the dashboard leads to a trace.
func (m *Metrics) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.grpc.unary),
		grpc.ChainStreamInterceptor(m.grpc.stream),
	}
}

// InitializeGRPC creates the series of every method registered on srv at
// zero, so that rates and alerts see the first call of each. Call it after
// every service is registered.
func (m *Metrics) InitializeGRPC(srv *grpc.Server) {
	for service, info := range srv.GetServiceInfo() {
		for _, method := range info.Methods {
			m.grpc.series("/"+service+"/"+method.Name, streamType(method.IsClientStream, method.IsServerStream))
		}
	}
}

func exemplar(ctx context.Context) prometheus.Labels {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return prometheus.Labels{"trace_id": sc.TraceID().String()}
	}
	return nil
}
