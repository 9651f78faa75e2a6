package main

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/server"
)

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	var c server.Config
	fs := newFlagSet("serve")
	bindServe(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	return serve(ctx, c, stderr)
}

// bindServe registers serve's flags.
func bindServe(fs *flag.FlagSet, c *server.Config) {
	bindDurable(fs, &c.TierConfig)
	bindFast(fs, &c.TierConfig)
	bindRegistry(fs, &c.RegistryConfig)
	bindLog(fs, &c.LogConfig)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:50051", "gRPC listen address (loopback by default)")
	fs.StringVar(&c.HTTPListen, "http-listen", "127.0.0.1:8080", "HTTP listen address for the API over HTTP/JSON, Connect and gRPC-Web (--http-api), /metrics, /healthz, /readyz")
	fs.BoolVar(&c.HTTPAPI, "http-api", true, "serve the API on --http-listen too: REST routes (POST /v1/claims, …), Connect and gRPC-Web, through the same interceptors as gRPC; false leaves only /metrics, /healthz, /readyz there (no API, no on-call page at /ui/)")
	fs.StringVar(&c.HTTPAllowedHosts, "http-allowed-hosts", "", "comma-separated host names (or addresses) the API on --http-listen answers to, in Host and Origin headers; others are refused 421 (Host) or 403 (Origin), so a web page that rebinds its name to claimd's address cannot call it. Default: localhost, 127.0.0.1, ::1 and the host of --http-listen when it names one; * allows any (behind a proxy that checks Host itself). /metrics and the probes answer any Host")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to drain in-flight calls on SIGTERM")
	fs.DurationVar(&c.ReadyInterval, "ready-interval", time.Second, "how often readiness pings the durable tier")
	fs.DurationVar(&c.SampleInterval, "metrics-sample-interval", metrics.DefaultSampleInterval, "how often the fast-tier, durable-tier and provider gauges are sampled (never per request or scrape)")
	fs.DurationVar(&c.JanitorInterval, "janitor-interval", janitor.DefaultInterval, "how often this replica tries a retention pass (one replica at a time runs it); 0 disables the janitor here")
	fs.IntVar(&c.MaxNamespaces, "metrics-max-namespaces", metrics.DefaultMaxNamespaces, "without --auth-file, how many namespaces keep their own metric label (later ones count as \"other\")")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", server.DefaultMaxRequestBytes, "largest gRPC request accepted (a Claim's delivery body and headers); larger ones are refused RESOURCE_EXHAUSTED")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", server.DefaultHTTPIdleTimeout, "close an HTTP keep-alive connection idle this long")
	fs.BoolVar(&c.RequireNoEviction, "require-noeviction", false, "refuse to start unless the Redis fast tier's maxmemory-policy is noeviction (read with CONFIG GET; a Redis that refuses it, or does not answer, fails the check); no effect without --redis-url")
	fs.StringVar(&c.TimerSlack, "timer-slack", server.AutoTimerSlack, "Linux: how late the kernel may wake claimd's sleeping threads to batch their wake-ups (at most 10ms); claimd executes itself once more at start (same PID) to apply it, so that the Go runtime's monitor thread has it too. auto: 1ms with --postgres-url, and the inherited slack with the embedded tiers; 0 keeps the inherited slack")
	fs.IntVar(&c.GCHeapHeadroomMiB, "gc-heap-headroom", server.DefaultGCHeapHeadroomMiB, "with Redis or PostgreSQL (records outside the process): the least the Go heap may grow between two collections, in MiB; more is fewer collections (less CPU per call, a lower p99) for more memory, 0 leaves GOGC=400 alone; the embedded tiers keep Go's default")
	bindRetention(fs, &c.RetentionConfig)
	bindSecurity(fs, &c.SecurityConfig)
}

// serve assembles the server of c (internal/server) and serves until ctx
// is done.
func serve(ctx context.Context, c server.Config, stderr io.Writer) error {
	c.LogTo, c.Reexec = stderr, reexec
	c.Version, c.Build = version, versionString()
	withCrashPoints(&c.TierConfig)
	s, err := server.New(ctx, c)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
