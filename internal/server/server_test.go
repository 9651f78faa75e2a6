package server

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/claimd/claimd/internal/filewatch"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// embeddedConfig is serve's flag defaults on the embedded tiers in dir,
// both listeners on loopback ports of the kernel's choosing.
func embeddedConfig(dir string, log *testenv.LogBuffer) Config {
	return Config{
		TierConfig:      TierConfig{DataDir: dir, SQLiteDurability: sqlite.DurabilityFull.String(), PostgresSchema: postgres.DefaultSchema},
		RetentionConfig: RetentionConfig{Grace: janitor.DefaultGrace, Batch: janitor.DefaultBatchSize, Retention: janitor.DefaultRetention},
		SecurityConfig:  SecurityConfig{TLSIdentity: "uri", Reflection: true, FileCheckInterval: filewatch.DefaultInterval},
		RegistryConfig:  RegistryConfig{ReviewAge: 180 * 24 * time.Hour},
		LogConfig:       LogConfig{LogLevel: "info", LogFormat: "json"},
		Listen:          "127.0.0.1:0", HTTPListen: "127.0.0.1:0", HTTPAPI: true,
		MaxRequestBytes: DefaultMaxRequestBytes, HTTPIdleTimeout: DefaultHTTPIdleTimeout,
		ShutdownTimeout: 15 * time.Second, ReadyInterval: 50 * time.Millisecond,
		SampleInterval: metrics.DefaultSampleInterval, JanitorInterval: janitor.DefaultInterval,
		MaxNamespaces: metrics.DefaultMaxNamespaces, TimerSlack: AutoTimerSlack,
		LogTo: log, Build: "claimd test",
	}
}

// TestNewRunDrain: New binds both listeners and opens the tiers; Run
// turns readiness on once the durable tier answers, serves gRPC health, and
// on cancellation drains and releases the tiers, so that the next server
// on the same data directory starts.
func TestNewRunDrain(t *testing.T) {
	restoreRuntime(t) // New tunes the collector
	dir := t.TempDir()
	var log testenv.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, embeddedConfig(dir, &log))
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	readyz := "http://" + s.HTTPAddr().String() + "/readyz"
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(readyz)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz never answered 200 (last: %v, %v)", res, err)
		}
		time.Sleep(10 * time.Millisecond) // polling an observable condition, with a deadline
	}
	conn, err := grpc.NewClient(s.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hres, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "idempotency.v1.ClaimService"})
	if err != nil || hres.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health of ClaimService once ready = %v, %v; want SERVING", hres, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run() after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	for _, want := range []string{`"msg":"claimd serving"`, `"version":"claimd test"`, `"msg":"draining"`, `"msg":"stopped"`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, log.String())
		}
	}
	if _, err := http.Get(readyz); err == nil {
		t.Error("the HTTP listener still answers after Run returned")
	}

	next, err := New(context.Background(), embeddedConfig(dir, &log))
	if err != nil {
		t.Fatalf("New() on the data directory of a stopped server = %v, want its lock released", err)
	}
	next.Close()
	again, err := New(context.Background(), embeddedConfig(dir, &log))
	if err != nil {
		t.Fatalf("New() after Close of a server never run = %v, want its lock released", err)
	}
	again.Close()
}

// TestNewRefusesBeforeOpening: a Config whose values do not go together is
// a usage error, and nothing is opened: the data directory stays empty.
func TestNewRefusesBeforeOpening(t *testing.T) {
	for _, tc := range []struct {
		desc string
		edit func(*Config)
		want string
	}{
		{"redis without postgres", func(c *Config) { c.RedisURL = "redis://127.0.0.1:1" }, "--redis-url needs --postgres-url"},
		{"tls key without cert", func(c *Config) { c.TLSKey = "key.pem" }, "--tls-cert and --tls-key go together"},
		{"no request size", func(c *Config) { c.MaxRequestBytes = 0 }, "--max-request-bytes and --http-idle-timeout must be positive"},
		{"negative grace", func(c *Config) { c.Grace = -time.Second }, "--grace -1s is negative"},
		{"bad timer slack", func(c *Config) { c.TimerSlack = "1h" }, "--timer-slack"},
		{"bad log format", func(c *Config) { c.LogFormat = "xml" }, "--log-format"},
		{"negative heap headroom", func(c *Config) { c.GCHeapHeadroomMiB = -1 }, "--gc-heap-headroom must be 0 to"},
	} {
		dir := t.TempDir()
		var log testenv.LogBuffer
		c := embeddedConfig(dir, &log)
		tc.edit(&c)
		s, err := New(context.Background(), c)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New() = %v, want a usage error saying %q", tc.desc, err, tc.want)
		}
		if entries, _ := dirEntries(dir); len(entries) != 0 {
			t.Errorf("%s: New() refused but left %v in --data-dir", tc.desc, entries)
		}
	}
}

func dirEntries(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names, err
}
