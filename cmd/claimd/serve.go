package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/gateway"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/server"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/telemetry"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tlsconfig"
	"github.com/claimd/claimd/internal/ui"
)

type serveConfig struct {
	commonConfig
	server.RetentionConfig
	securityConfig
	Listen     string
	HTTPListen string
	// HTTPAPI serves the gRPC services over HTTP/JSON, Connect and
	// gRPC-Web on the HTTP listener beside /metrics and the probes.
	HTTPAPI bool
	// HTTPAllowedHosts is --http-allowed-hosts as given: comma-separated
	// host names; "" is loopback's names and --http-listen's own host.
	HTTPAllowedHosts string
	MaxRequestBytes  int
	HTTPIdleTimeout  time.Duration
	ShutdownTimeout  time.Duration
	ReadyInterval    time.Duration
	SampleInterval   time.Duration
	JanitorInterval  time.Duration
	MaxNamespaces    int
	// RequireNoEviction refuses to start unless the Redis fast tier's
	// maxmemory-policy is verified noeviction.
	RequireNoEviction bool
	// TimerSlack is the timer slack of claimd's threads: auto or a
	// duration (timerslack.go).
	TimerSlack string
}

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	var c serveConfig
	fs := newFlagSet("serve")
	bindServe(fs, &c)
	if err := parse(fs, args); err != nil {
		return err
	}
	return serve(ctx, &c, stderr)
}

// bindServe registers serve's flags.
func bindServe(fs *flag.FlagSet, c *serveConfig) {
	bindCommon(fs, &c.commonConfig)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:50051", "gRPC listen address (loopback by default)")
	fs.StringVar(&c.HTTPListen, "http-listen", "127.0.0.1:8080", "HTTP listen address for the API over HTTP/JSON, Connect and gRPC-Web (--http-api), /metrics, /healthz, /readyz")
	fs.BoolVar(&c.HTTPAPI, "http-api", true, "serve the API on --http-listen too: REST routes (POST /v1/claims, …), Connect and gRPC-Web, through the same interceptors as gRPC; false leaves only /metrics, /healthz, /readyz there (no API, no on-call page at /ui/)")
	fs.StringVar(&c.HTTPAllowedHosts, "http-allowed-hosts", "", "comma-separated host names (or addresses) the API on --http-listen answers to, in Host and Origin headers; others are refused 421 (Host) or 403 (Origin), so a web page that rebinds its name to claimd's address cannot call it. Default: localhost, 127.0.0.1, ::1 and the host of --http-listen when it names one; * allows any (behind a proxy that checks Host itself). /metrics and the probes answer any Host")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "how long to drain in-flight calls on SIGTERM")
	fs.DurationVar(&c.ReadyInterval, "ready-interval", time.Second, "how often readiness pings the durable tier")
	fs.DurationVar(&c.SampleInterval, "metrics-sample-interval", metrics.DefaultSampleInterval, "how often the fast-tier, durable-tier and provider gauges are sampled (never per request or scrape)")
	fs.DurationVar(&c.JanitorInterval, "janitor-interval", janitor.DefaultInterval, "how often this replica tries a retention pass (one replica at a time runs it); 0 disables the janitor here")
	fs.IntVar(&c.MaxNamespaces, "metrics-max-namespaces", metrics.DefaultMaxNamespaces, "without --auth-file, how many namespaces keep their own metric label (later ones count as \"other\")")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", defaultMaxRequestBytes, "largest gRPC request accepted (a Claim's delivery body and headers); larger ones are refused RESOURCE_EXHAUSTED")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", defaultHTTPIdleTimeout, "close an HTTP keep-alive connection idle this long")
	fs.BoolVar(&c.RequireNoEviction, "require-noeviction", false, "refuse to start unless the Redis fast tier's maxmemory-policy is noeviction (read with CONFIG GET; a Redis that refuses it, or does not answer, fails the check); no effect without --redis-url")
	fs.StringVar(&c.TimerSlack, "timer-slack", autoTimerSlack, "Linux: how late the kernel may wake claimd's sleeping threads to batch their wake-ups (at most 10ms); claimd executes itself once more at start (same PID) to apply it, so that the Go runtime's monitor thread has it too. auto: 1ms with --postgres-url, and the inherited slack with the embedded tiers; 0 keeps the inherited slack")
	bindRetention(fs, &c.RetentionConfig)
	bindSecurity(fs, &c.securityConfig)
}

// serve checks the flags that go together and serves until ctx is done.
func serve(ctx context.Context, c *serveConfig, stderr io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := c.securityConfig.check(); err != nil {
		return err
	}
	if err := c.checkFastKey(); err != nil {
		return err
	}
	if c.MaxRequestBytes <= 0 || c.HTTPIdleTimeout <= 0 {
		return fmt.Errorf("%w: --max-request-bytes and --http-idle-timeout must be positive", errUsage)
	}
	if err := c.RetentionConfig.Check(); err != nil {
		return err
	}
	hosts, err := allowedHosts(c.HTTPAllowedHosts, c.HTTPListen)
	if err != nil {
		return err
	}
	if c.SampleInterval <= 0 || c.JanitorInterval < 0 {
		return fmt.Errorf("%w: --metrics-sample-interval must be positive and --janitor-interval not negative", errUsage)
	}
	if c.MaxNamespaces <= 0 {
		return fmt.Errorf("%w: --metrics-max-namespaces must be positive", errUsage)
	}
	wantSlack, err := timerSlackFor(c.TimerSlack, c.PostgresURL != "")
	if err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	// Before anything is opened or logged: this may execute claimd anew.
	slack, err := applyTimerSlack(wantSlack, reexec)
	if err != nil {
		log.Warn("timer slack not applied", "err", err, "timer_slack", slack.String())
	}
	reg, err := c.registry()
	if err != nil {
		return err
	}
	clk := clock.Real{}
	for _, p := range reg.List() {
		if p.ReviewOverdue(clk.Now(), c.ReviewAge) {
			log.Warn("provider retry horizon review overdue", "provider", p.Name, "reviewed_on", p.ReviewedOn.Format(time.DateOnly), "review_age", c.ReviewAge.String())
		}
	}

	// The listeners are closed on the way out, whichever way that is: on an
	// error before serving, or after the servers, which close them too when
	// they stop (a second Close only returns an error nobody needs).
	grpcLis, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	defer grpcLis.Close()
	httpLis, err := net.Listen("tcp", c.HTTPListen)
	if err != nil {
		return fmt.Errorf("--http-listen: %w", err)
	}
	defer httpLis.Close()
	if err := c.admit(c.Listen, grpcLis.Addr(), c.HTTPListen, httpLis.Addr(), c.HTTPAPI, log); err != nil {
		return err
	}
	certs, err := c.reloader(log)
	if err != nil {
		return err
	}
	if c.FastKeyring, err = c.fastKeyring(log); err != nil {
		return err
	}

	promReg := prometheus.NewRegistry()
	promReg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)
	mcfg := metrics.Config{Providers: reg, ReviewAge: c.ReviewAge, Clock: clk, MaxNamespaces: c.MaxNamespaces}
	var authn *auth.Authenticator
	if c.AuthFile != "" {
		if authn, err = auth.Load(c.AuthFile, auth.Options{Registerer: promReg, Logger: log, Clock: clk, Identity: c.identityKind(), CheckInterval: c.FileCheckInterval}); err != nil {
			return err
		}
		mcfg.NamespaceLabel = authn.NamespaceLabel
	}
	met, err := metrics.New(promReg, mcfg)
	if err != nil {
		return err
	}
	tracing, err := telemetry.Setup(ctx, version)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()

	withCrashPoints(&c.TierConfig)
	st, err := server.OpenTiers(ctx, &c.TierConfig, met, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Error("closing stores", "err", err)
		}
	}()
	met.SetTiers(st.FastKind, st.DurableKind)
	gc, headroom := gcPolicy(st.FastKind)
	if _, _, tuner := tuneRuntime(gc, headroom, slack, memlimit.FromCgroup, log); tuner != nil {
		defer tuner.stop()
	}
	if ents, ok := st.Store.(tiers.Entities); ok {
		st.Sources.DeferredEvents = ents.CountDeferred // the deferred, overdue and lost gauges
	}
	st.Announce(met, log)
	if c.RequireNoEviction {
		if err := st.RequireNoEviction(ctx); err != nil {
			return err
		}
	}

	opts := append(met.ServerOptions(), tracing.ServerOptions()...)
	opts = append(opts, keepaliveOptions()...)
	opts = append(opts, limitOptions(c.MaxRequestBytes)...)
	if certs != nil {
		opts = append(opts, grpcCreds(certs))
	}
	// Outside the auth interceptors, so that it sees their refusals.
	opts = append(opts, gateway.RetryAfter()...)
	if c.TLSClientCA != "" && c.HTTPAPI {
		// The gRPC listener requires a client certificate in its TLS
		// handshake; the HTTP listener cannot (probes come without one), so
		// the API calls it carries are held to the rule here.
		opts = append(opts, gateway.RequireClientCert()...)
	}
	if authn != nil {
		// After metrics and tracing, so refused calls are counted and traced.
		opts = append(opts, authn.ServerOptions()...)
		// A call without valid credentials is refused when its headers
		// arrive, before its message is read (the interceptors run after).
		opts = append(opts, authn.TapOption())
	}
	srv := grpc.NewServer(opts...)
	service.New(service.Config{Store: st.Store, Registry: reg, Clock: clk, ReviewAge: c.ReviewAge, Logger: log, Recorder: met}).Register(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	if c.Reflection {
		reflection.Register(srv)
	}
	met.InitializeGRPC(srv)
	// NOT_SERVING until the tiers answer (readiness flips it).
	setHealth(hs, healthpb.HealthCheckResponse_NOT_SERVING)

	// Background work, stopped and waited for before the stores close.
	bgCtx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	defer func() {
		stopBackground()
		background.Wait()
	}()
	background.Go(func() { met.RunSampler(bgCtx, c.SampleInterval, st.Sources, log) })
	if authn != nil || certs != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		background.Go(func() { reloadOn(bgCtx, hup, authn, certs) })
	}
	if c.JanitorInterval > 0 {
		j, err := st.Janitor(c.RetentionConfig, janitor.Config{
			Fast: st.Sweeper, Clock: clk, Interval: c.JanitorInterval, Observer: met, Logger: log,
		})
		if err != nil {
			return err
		}
		background.Go(func() { j.Run(bgCtx) })
	}

	var ready atomic.Bool
	mux := http.NewServeMux()
	var metricsHandler http.Handler = promhttp.HandlerFor(promReg, promhttp.HandlerOpts{
		Registry:          promReg, // promhttp counts its own errors there
		EnableOpenMetrics: true,    // exemplars (trace ids) for scrapers that ask
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	})
	mux.Handle("/metrics", c.guardMetrics(metricsHandler, authn))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready: durable tier unreachable or draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	var api http.Handler
	if c.HTTPAPI {
		// After every service is registered: the gateway serves what the
		// gRPC server has.
		gcfg := gateway.Config{
			MaxRequestBytes:   c.MaxRequestBytes,
			AllowedHosts:      hosts,
			RequireClientCert: c.TLSClientCA != "",
			// The on-call page: files only; its data comes from the API.
			Pages:      ui.Handler(),
			PagePrefix: ui.Prefix,
		}
		if authn != nil {
			gcfg.Authenticate = authn.Authenticate
		}
		if api, err = gateway.New(srv, gcfg); err != nil {
			return err
		}
	}
	httpSrv := newHTTPServer(httpRoutes(mux, api), c.HTTPIdleTimeout, log)

	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(grpcLis) }()
	if certs != nil {
		// Probes (/healthz, /readyz) come without a client certificate;
		// /metrics and the API check for one themselves.
		httpSrv.TLSConfig = certs.ServerConfig(tlsconfig.VerifyClientCertIfGiven, "h2", "http/1.1")
		go func() { errc <- httpSrv.ServeTLS(httpLis, "", "") }()
	} else {
		go func() { errc <- httpSrv.Serve(httpLis) }()
	}
	log.Info("claimd serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "tls", c.tlsMode(), "auth_file", cmp.Or(c.AuthFile, "off"), "tiers", st.Mode,
		"durability", st.Durability, "tracing", cmp.Or(tracing.Exporter(), "off"), "janitor_interval", c.JanitorInterval.String(), "version", versionString())

	// Readiness pings the stores, so it is background work too: it ends
	// before they close. Draining waits for it to end before it turns
	// /readyz off, so that no last ping turns it on again.
	readyCtx, stopReady := context.WithCancel(ctx)
	defer stopReady()
	readyDone := make(chan struct{})
	background.Go(func() {
		defer close(readyDone)
		watchReady(readyCtx, st, hs, &ready, c.ReadyInterval, log)
	})

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("draining", "timeout", c.ShutdownTimeout.String())
	case serveErr = <-errc:
		log.Error("server stopped", "err", serveErr)
	}
	stopReady()
	<-readyDone
	ready.Store(false)
	hs.Shutdown() // every service NOT_SERVING while draining

	drained := make(chan struct{})
	go func() { srv.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(c.ShutdownTimeout):
		log.Warn("drain timed out; cancelling in-flight calls")
		srv.Stop()
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := httpSrv.Shutdown(shutCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, grpc.ErrServerStopped) && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	log.Info("stopped")
	return nil
}

// httpRoutes serves /metrics, /healthz and /readyz from ops and every
// other path from api (nil: 404). The paths are compared as they are, not
// through a ServeMux, which would clean them and redirect: a REST path may
// carry a key holding "//" or "..", escaped.
func httpRoutes(ops, api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/metrics" || r.URL.Path == "/healthz" || r.URL.Path == "/readyz":
			ops.ServeHTTP(w, r)
		case api != nil:
			api.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// allowedHosts is --http-allowed-hosts: the hosts given, or by default
// loopback's names and the host of --http-listen when it names one (not
// the unspecified 0.0.0.0 or ::, which are no name a caller can use). A
// host is a name or an address, with no scheme, path or user: one that
// could never match a Host header is refused rather than ignored.
func allowedHosts(flagValue, listen string) ([]string, error) {
	var hosts []string
	for h := range strings.SplitSeq(flagValue, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if strings.ContainsAny(h, "/@ \t") {
			return nil, fmt.Errorf("%w: --http-allowed-hosts: %q is not a host name or address (no scheme, path or user: claimd.example.com, 10.0.0.5, [::1])", errUsage, h)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) > 0 {
		return hosts, nil
	}
	hosts = []string{"localhost", "127.0.0.1", "::1"}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" {
		if ip := net.ParseIP(h); (ip == nil || !ip.IsUnspecified()) && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// watchReady pings the durable tier and flips health and /readyz with its
// answers. Liveness (/healthz) never depends on it: a database outage must
// not get healthy replicas restarted.
func watchReady(ctx context.Context, st *server.Tiers, hs *health.Server, ready *atomic.Bool, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, every)
		err := st.Store.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		was := ready.Swap(err == nil)
		if err == nil {
			setHealth(hs, healthpb.HealthCheckResponse_SERVING)
		} else {
			setHealth(hs, healthpb.HealthCheckResponse_NOT_SERVING)
		}
		if was != (err == nil) {
			log.Info("readiness changed", "ready", err == nil, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func setHealth(hs *health.Server, s healthpb.HealthCheckResponse_ServingStatus) {
	hs.SetServingStatus("", s)
	hs.SetServingStatus(pb.ClaimService_ServiceDesc.ServiceName, s)
	hs.SetServingStatus(pb.ProviderService_ServiceDesc.ServiceName, s)
	hs.SetServingStatus(pb.EntityService_ServiceDesc.ServiceName, s)
	hs.SetServingStatus(pb.InspectService_ServiceDesc.ServiceName, s)
}

// reloadOn re-reads the files claimd serves by — the auth file and the
// listeners' TLS files — whenever a value arrives on hup (SIGHUP), until ctx
// ends; each logs its outcome. A change on disk needs no signal: it is seen
// on the request path within the check interval (internal/filewatch).
func reloadOn(ctx context.Context, hup <-chan os.Signal, authn *auth.Authenticator, certs *tlsconfig.Reloader) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if authn != nil {
				authn.Reload() // logged and counted
			}
			if certs != nil {
				certs.Reload() // logged
			}
		}
	}
}
