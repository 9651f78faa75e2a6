// Package telemetry sets up claimd's OpenTelemetry tracing: a server span
// per gRPC call (otelgrpc's stats handler), exported where the standard
// OTEL_* environment variables say (autoexport), and off by default.
//
// Tracing is on only when OTEL_TRACES_EXPORTER names an exporter ("otlp",
// "console"); unset, empty or "none" leaves it off, and so does
// OTEL_SDK_DISABLED=true. (autoexport alone would pick OTLP when the
// variable is unset, and a service that starts exporting to
// localhost:4318 because nobody configured it is a surprise.) The rest is
// the SDK's own environment: OTEL_EXPORTER_OTLP_ENDPOINT and _PROTOCOL,
// OTEL_TRACES_SAMPLER and _ARG, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_BSP_*.
//
// The service sets the idempotency.* attributes on the server span
// (service.Attr*). Nothing here is global: the tracer provider and the
// propagators go to otelgrpc explicitly.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// ServiceName is the default service.name resource attribute
// (OTEL_SERVICE_NAME overrides it).
const ServiceName = "claimd"

// Tracing is claimd's tracing setup. The zero value, and the value Setup
// returns when tracing is off, adds nothing to a server.
type Tracing struct {
	provider *sdktrace.TracerProvider // nil when off
	exporter string
}

// EnabledByEnv reports whether the environment (read through getenv) asks
// for spans to be exported.
func EnabledByEnv(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))) {
	case "", "none":
		return false
	}
	return true
}

// Setup builds the tracer provider the environment asks for, or a Tracing
// that is off (see the package comment). version becomes service.version.
func Setup(ctx context.Context, version string) (*Tracing, error) {
	if !EnabledByEnv(os.Getenv) {
		return &Tracing{}, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return &Tracing{}, nil
	}
	// Later detectors win: the environment overrides claimd's defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", ServiceName),
			attribute.String("service.version", version),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{provider: tp, exporter: os.Getenv("OTEL_TRACES_EXPORTER")}, nil
}

// Enabled reports whether t exports spans.
func (t *Tracing) Enabled() bool { return t != nil && t.provider != nil }

// Exporter names the exporter in use ("" when off), for the start-up log.
func (t *Tracing) Exporter() string {
	if !t.Enabled() {
		return ""
	}
	return t.exporter
}

// ServerOptions returns the gRPC server options that trace every call, or
// none when tracing is off.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if !t.Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(ServerHandler(t.provider))}
}

// ServerHandler is otelgrpc's server stats handler over tp: a server span
// per call of claimd's services, continuing the caller's trace (W3C trace
// context and baggage). Health checks and reflection are not traced: a
// load balancer's probes would bury the calls that matter.
func ServerHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		// Metrics come from Prometheus (internal/metrics), not from OTel.
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.Any(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection.")))),
	)
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	return t.provider.Shutdown(ctx)
}
