package telemetry_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/telemetry"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

func TestEnabledByEnv(t *testing.T) {
	tests := []struct {
		desc string
		env  map[string]string
		want bool
	}{
		{"unset: off (autoexport alone would pick otlp)", nil, false},
		{"empty: off", map[string]string{"OTEL_TRACES_EXPORTER": " "}, false},
		{"none: off", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{"otlp: on", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"console: on", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{"SDK disabled wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := telemetry.EnabledByEnv(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("EnabledByEnv(%v) = %v, want %v", tc.env, got, tc.want)
			}
		})
	}
}

func TestSetupFollowsEnvironment(t *testing.T) {
	tests := []struct {
		desc     string
		exporter string
		want     bool
	}{
		{"unset", "", false},
		{"none", "none", false},
		{"console", "console", true},
		{"otlp (exporter made, nothing dialled until spans flush)", "otlp", true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_EXPORTER", tc.exporter)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			tr, err := telemetry.Setup(context.Background(), "test")
			if err != nil {
				t.Fatalf("Setup() with OTEL_TRACES_EXPORTER=%q error = %v", tc.exporter, err)
			}
			defer tr.Shutdown(context.Background())
			if tr.Enabled() != tc.want || (len(tr.ServerOptions()) > 0) != tc.want {
				t.Errorf("Setup() with OTEL_TRACES_EXPORTER=%q: enabled %v, %d server options; want %v",
					tc.exporter, tr.Enabled(), len(tr.ServerOptions()), tc.want)
			}
		})
	}
	t.Run("unknown exporter is an error", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
		if _, err := telemetry.Setup(context.Background(), "test"); err == nil {
			t.Error("Setup() with OTEL_TRACES_EXPORTER=carrier-pigeon = nil error, want one")
		}
	})
}

// logLines are the JSON log lines in b.
func logLines(t *testing.T, b *testenv.LogBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestServerSpanAttributes runs the service behind the tracing handler with
// an in-memory exporter and checks the server spans: one per ClaimService
// call, continuing the caller's trace, with the idempotency.* attributes;
// none for health checks; the log line carries the span's trace id.
func TestServerSpanAttributes(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })

	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	store := twotier.New(memory.New(memory.Config{}), lite, twotier.Config{})
	t.Cleanup(func() { store.Close() })
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.LogBuffer{}
	srv := grpc.NewServer(grpc.StatsHandler(telemetry.ServerHandler(tp)))
	service.New(service.Config{
		Store: store, Registry: reg, Clock: clock.NewFake(time.Now()),
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}).Register(srv)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := pb.NewClaimServiceClient(conn)

	const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	c, err := client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_traced"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: c.Key, FencingToken: c.FencingToken, LeaseSecret: c.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_traced"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	// The server ends a span after the response is sent; stopping the
	// server waits for its handlers, so every span is exported by then.
	srv.GracefulStop()

	wantTrace := "0af7651916cd43dd8448eb211c80319c"
	type got struct {
		Name  string
		Attrs map[string]string
	}
	var spans []got
	ended := exp.GetSpans()
	// Spans are exported as they end, and a server span may end after the
	// client has its answer and made the next call: order them by start.
	sort.Slice(ended, func(i, j int) bool { return ended[i].StartTime.Before(ended[j].StartTime) })
	for _, s := range ended {
		if s.SpanKind != trace.SpanKindServer {
			continue
		}
		if s.SpanContext.TraceID().String() != wantTrace {
			t.Errorf("span %s trace id = %s, want the caller's %s", s.Name, s.SpanContext.TraceID(), wantTrace)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			if strings.HasPrefix(string(kv.Key), "idempotency.") {
				attrs[string(kv.Key)] = kv.Value.String()
			}
		}
		spans = append(spans, got{Name: s.Name, Attrs: attrs})
	}
	want := []got{
		{Name: "idempotency.v1.ClaimService/Claim", Attrs: map[string]string{
			"idempotency.key": "evt_traced", "idempotency.namespace": "billing", "idempotency.provider": "stripe",
			"idempotency.key_source": "EVENT_ID", "idempotency.outcome": "ACQUIRED", "idempotency.reason": "NEW",
			"idempotency.served_by": "DURABLE", "idempotency.cache_state": "miss", "idempotency.state": "RECEIVED",
			"idempotency.state_transition": "→RECEIVED", "idempotency.fencing_token": "1",
		}},
		{Name: "idempotency.v1.ClaimService/Transition", Attrs: map[string]string{
			"idempotency.key": "evt_traced", "idempotency.namespace": "billing", "idempotency.provider": "stripe",
			"idempotency.state": "PROCESSING", "idempotency.state_transition": "→PROCESSING", "idempotency.fencing_token": "1",
		}},
		{Name: "idempotency.v1.ClaimService/Claim", Attrs: map[string]string{
			"idempotency.key": "evt_traced", "idempotency.namespace": "billing", "idempotency.provider": "stripe",
			"idempotency.key_source": "EVENT_ID", "idempotency.outcome": "IN_PROGRESS", "idempotency.reason": "NONE",
			"idempotency.served_by": "FAST", "idempotency.cache_state": "fast_hit", "idempotency.state": "PROCESSING",
		}}, // no fencing token: it is the owner's alone

	}
	if diff := cmp.Diff(want, spans); diff != "" {
		t.Errorf("server spans (-want +got; no health-check span):\n%s", diff)
	}

	for _, l := range logLines(t, logs) {
		if l["msg"] == "Claim" && l["trace_id"] != wantTrace {
			t.Errorf("Claim log line trace_id = %v, want %s", l["trace_id"], wantTrace)
		}
	}
}

// Keep the attribute keys of the service and this test in step.
var _ = []attribute.Key{service.AttrKey, service.AttrOutcome, service.AttrCacheState, service.AttrStateTransition, service.AttrProvider}
