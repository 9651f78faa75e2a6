// Package server assembles claimd serve: it checks a Config, opens the
// tiers, the registry, the auth file, metrics and tracing, builds the gRPC
// and HTTP servers over them, serves until its context ends and drains.
// cmd/claimd parses flags into a Config; internal/service speaks gRPC;
// internal/tiers stores.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
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

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/gateway"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/telemetry"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tlsconfig"
	"github.com/claimd/claimd/internal/ui"
)

// Config is claimd serve's configuration. Each field is the flag of the
// same name (cmd/claimd binds them); zero values are not defaults, the
// flags give those.
type Config struct {
	TierConfig
	RetentionConfig
	SecurityConfig
	RegistryConfig
	LogConfig

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
	// GCHeapHeadroomMiB is the least the heap may grow between two
	// collections when the records live outside the process (runtime.go).
	GCHeapHeadroomMiB int

	// LogTo receives the log.
	LogTo io.Writer
	// Reexec executes claimd anew to apply the timer slack (ExecSelf);
	// nil applies none, as for a server that tests run in their process.
	Reexec func(env []string) error
	// Version is the build's version, for traces; Build names the build
	// for the start-up log line (claimd version's line).
	Version, Build string
}

// check validates the flags that go together, before anything is opened,
// and returns --http-allowed-hosts and the timer slack they ask for.
func (c *Config) check() (hosts []string, slack time.Duration, err error) {
	if err := c.TierConfig.Validate(); err != nil {
		return nil, 0, err
	}
	if err := c.SecurityConfig.check(); err != nil {
		return nil, 0, err
	}
	if err := c.checkFastKey(); err != nil {
		return nil, 0, err
	}
	if c.MaxRequestBytes <= 0 || c.HTTPIdleTimeout <= 0 {
		return nil, 0, fmt.Errorf("%w: --max-request-bytes and --http-idle-timeout must be positive", ErrUsage)
	}
	if err := c.RetentionConfig.Check(); err != nil {
		return nil, 0, err
	}
	if hosts, err = allowedHosts(c.HTTPAllowedHosts, c.HTTPListen); err != nil {
		return nil, 0, err
	}
	if c.SampleInterval <= 0 || c.JanitorInterval < 0 {
		return nil, 0, fmt.Errorf("%w: --metrics-sample-interval must be positive and --janitor-interval not negative", ErrUsage)
	}
	if c.MaxNamespaces <= 0 {
		return nil, 0, fmt.Errorf("%w: --metrics-max-namespaces must be positive", ErrUsage)
	}
	if c.GCHeapHeadroomMiB < 0 || c.GCHeapHeadroomMiB > maxGCHeapHeadroomMiB {
		return nil, 0, fmt.Errorf("%w: --gc-heap-headroom must be 0 to %d (MiB)", ErrUsage, maxGCHeapHeadroomMiB)
	}
	slack, err = timerSlackFor(c.TimerSlack, c.PostgresURL != "")
	return hosts, slack, err
}

// Server is claimd serve, assembled: New builds it, Run serves it.
type Server struct {
	cfg     Config
	log     *slog.Logger
	clk     clock.Clock
	tiers   *Tiers
	met     *metrics.Metrics
	authn   *auth.Authenticator // nil without --auth-file
	certs   *tlsconfig.Reloader // nil without TLS
	tracing *telemetry.Tracing

	grpcLis, httpLis net.Listener
	grpc             *grpc.Server
	health           *health.Server
	http             *http.Server
	janitor          *janitor.Janitor // nil with --janitor-interval 0
	ready            atomic.Bool      // /readyz

	// closers release what New acquired, run last to first by Close.
	closers   []func()
	closeOnce sync.Once
}

// New checks c, opens what it names and builds the servers over it. Nothing
// is served until Run; Close releases what New acquired when Run is not
// called. A returned error wraps ErrUsage when c itself is at fault.
func New(ctx context.Context, c Config) (_ *Server, err error) {
	hosts, wantSlack, err := c.check()
	if err != nil {
		return nil, err
	}
	log, err := c.Logger(c.LogTo)
	if err != nil {
		return nil, err
	}
	// Before anything is opened or logged: this may execute claimd anew.
	slack, err := applyTimerSlack(wantSlack, c.Reexec)
	if err != nil {
		log.Warn("timer slack not applied", "err", err, "timer_slack", slack.String())
	}
	reg, err := c.Registry()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: c, log: log, clk: clock.Real{}}
	for _, p := range reg.List() {
		if p.ReviewOverdue(s.clk.Now(), c.ReviewAge) {
			log.Warn("provider retry horizon review overdue", "provider", p.Name, "reviewed_on", p.ReviewedOn.Format(time.DateOnly), "review_age", c.ReviewAge.String())
		}
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	if err := s.listen(); err != nil {
		return nil, err
	}
	promReg, err := s.observe(ctx, reg)
	if err != nil {
		return nil, err
	}
	if err := s.openTiers(ctx, slack); err != nil {
		return nil, err
	}
	s.grpc, s.health = s.grpcServer(reg)
	if c.JanitorInterval > 0 {
		if s.janitor, err = s.tiers.Janitor(c.RetentionConfig, janitor.Config{
			Fast: s.tiers.Sweeper, Clock: s.clk, Interval: c.JanitorInterval, Observer: s.met, Logger: log,
		}); err != nil {
			return nil, err
		}
	}
	if s.http, err = s.httpServer(promReg, hosts); err != nil {
		return nil, err
	}
	return s, nil
}

// listen binds both listeners and applies the start-up checks that need
// their bound addresses, then loads the listeners' TLS files and the fast
// tier's keys.
func (s *Server) listen() error {
	c, log := &s.cfg, s.log
	var err error
	// The listeners are closed on the way out, whichever way that is: on an
	// error before serving, or after the servers, which close them too when
	// they stop (a second Close only returns an error nobody needs).
	if s.grpcLis, err = net.Listen("tcp", c.Listen); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	s.onClose(func() { s.grpcLis.Close() })
	if s.httpLis, err = net.Listen("tcp", c.HTTPListen); err != nil {
		return fmt.Errorf("--http-listen: %w", err)
	}
	s.onClose(func() { s.httpLis.Close() })
	if err := c.admit(c.Listen, s.grpcLis.Addr(), c.HTTPListen, s.httpLis.Addr(), c.HTTPAPI, log); err != nil {
		return err
	}
	if s.certs, err = c.reloader(log); err != nil {
		return err
	}
	c.FastKeyring, err = c.fastKeyring(log)
	return err
}

// observe builds the Prometheus registry, the auth file's authenticator
// (which labels metrics by namespace), the metrics and the tracer.
func (s *Server) observe(ctx context.Context, reg *horizon.Registry) (*prometheus.Registry, error) {
	c, log := &s.cfg, s.log
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)
	mcfg := metrics.Config{Providers: reg, ReviewAge: c.ReviewAge, Clock: s.clk, MaxNamespaces: c.MaxNamespaces}
	var err error
	if c.AuthFile != "" {
		if s.authn, err = auth.Load(c.AuthFile, auth.Options{Registerer: promReg, Logger: log, Clock: s.clk, Identity: c.identityKind(), CheckInterval: c.FileCheckInterval}); err != nil {
			return nil, err
		}
		mcfg.NamespaceLabel = s.authn.NamespaceLabel
	}
	if s.met, err = metrics.New(promReg, mcfg); err != nil {
		return nil, err
	}
	if s.tracing, err = telemetry.Setup(ctx, c.Version); err != nil {
		return nil, err
	}
	s.onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.tracing.Shutdown(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	})
	return promReg, nil
}

// openTiers opens the tiers with the metrics watching them, tunes the
// runtime for where their records live, and runs their start-up checks.
func (s *Server) openTiers(ctx context.Context, slack time.Duration) error {
	st, err := OpenTiers(ctx, &s.cfg.TierConfig, s.met, s.log)
	if err != nil {
		return err
	}
	s.tiers = st
	s.onClose(func() {
		if err := st.Close(); err != nil {
			s.log.Error("closing stores", "err", err)
		}
	})
	s.met.SetTiers(st.FastKind, st.DurableKind)
	gc, headroom := gcPolicy(st.FastKind, s.cfg.GCHeapHeadroomMiB)
	if _, _, tuner := tuneRuntime(gc, headroom, slack, memlimit.FromCgroup, s.log); tuner != nil {
		s.onClose(tuner.stop)
	}
	if ents, ok := st.Store.(tiers.Entities); ok {
		st.Sources.DeferredEvents = ents.CountDeferred // the deferred, overdue and lost gauges
	}
	if st.announce != nil {
		st.announce(s.met, s.log)
	}
	if s.cfg.RequireNoEviction {
		return st.requireNoEviction(ctx)
	}
	return nil
}

// grpcServer is the gRPC server of the service, health and reflection,
// NOT_SERVING until the tiers answer (readiness flips it).
func (s *Server) grpcServer(reg *horizon.Registry) (*grpc.Server, *health.Server) {
	c := &s.cfg
	opts := slices.Concat(s.met.ServerOptions(), s.tracing.ServerOptions(), keepaliveOptions(), limitOptions(c.MaxRequestBytes))
	if s.certs != nil {
		opts = append(opts, grpcCreds(s.certs))
	}
	// Outside the auth interceptors, so that it sees their refusals.
	opts = append(opts, gateway.RetryAfter()...)
	if c.TLSClientCA != "" && c.HTTPAPI {
		// The gRPC listener requires a client certificate in its TLS
		// handshake; the HTTP listener cannot (probes come without one), so
		// the API calls it carries are held to the rule here.
		opts = append(opts, gateway.RequireClientCert()...)
	}
	if s.authn != nil {
		// After metrics and tracing, so refused calls are counted and traced.
		opts = append(opts, s.authn.ServerOptions()...)
		// A call without valid credentials is refused when its headers
		// arrive, before its message is read (the interceptors run after).
		opts = append(opts, s.authn.TapOption())
	}
	srv := grpc.NewServer(opts...)
	service.New(service.Config{Store: s.tiers.Store, Registry: reg, Clock: s.clk, ReviewAge: c.ReviewAge, Logger: s.log, Recorder: s.met}).Register(srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	if c.Reflection {
		reflection.Register(srv)
	}
	s.met.InitializeGRPC(srv)
	setHealth(hs, healthpb.HealthCheckResponse_NOT_SERVING)
	return srv, hs
}

// httpServer is the HTTP listener's server: /metrics, the probes and, with
// --http-api, the API and the on-call page. It is built after every gRPC
// service is registered: the gateway serves what the gRPC server has.
func (s *Server) httpServer(promReg *prometheus.Registry, hosts []string) (*http.Server, error) {
	c := &s.cfg
	mux := http.NewServeMux()
	var metricsHandler http.Handler = promhttp.HandlerFor(promReg, promhttp.HandlerOpts{
		Registry:          promReg, // promhttp counts its own errors there
		EnableOpenMetrics: true,    // exemplars (trace ids) for scrapers that ask
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	})
	mux.Handle("/metrics", c.guardMetrics(metricsHandler, s.authn))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready: durable tier unreachable or draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	var api http.Handler
	if c.HTTPAPI {
		gcfg := gateway.Config{
			MaxRequestBytes:   c.MaxRequestBytes,
			AllowedHosts:      hosts,
			RequireClientCert: c.TLSClientCA != "",
			// The on-call page: files only; its data comes from the API.
			Pages:      ui.Handler(),
			PagePrefix: ui.Prefix,
		}
		if s.authn != nil {
			gcfg.Authenticate = s.authn.Authenticate
		}
		var err error
		if api, err = gateway.New(s.grpc, gcfg); err != nil {
			return nil, err
		}
	}
	h := newHTTPServer(httpRoutes(mux, api), c.HTTPIdleTimeout, s.log)
	if s.certs != nil {
		// Probes (/healthz, /readyz) come without a client certificate;
		// /metrics and the API check for one themselves.
		h.TLSConfig = s.certs.ServerConfig(tlsconfig.VerifyClientCertIfGiven, "h2", "http/1.1")
	}
	return h, nil
}

// GRPCAddr is the address the gRPC listener is bound to.
func (s *Server) GRPCAddr() net.Addr { return s.grpcLis.Addr() }

// HTTPAddr is the address the HTTP listener is bound to.
func (s *Server) HTTPAddr() net.Addr { return s.httpLis.Addr() }

func (s *Server) onClose(f func()) { s.closers = append(s.closers, f) }

// Close releases what New acquired, last first: the runtime tuner, the
// tiers, the tracer, the listeners. Run closes the server itself when it
// returns; Close is for a server that is not run.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		for _, f := range slices.Backward(s.closers) {
			f()
		}
	})
}

// Run serves until ctx is done or a server fails, then drains: readiness
// off, every health service NOT_SERVING, in-flight calls given
// --shutdown-timeout, background work stopped before the tiers close.
func (s *Server) Run(ctx context.Context) error {
	defer s.Close()
	c, log := &s.cfg, s.log

	// Background work, stopped and waited for before the stores close.
	bgCtx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	defer func() {
		stopBackground()
		background.Wait()
	}()
	background.Go(func() { s.met.RunSampler(bgCtx, c.SampleInterval, s.tiers.Sources, log) })
	if s.authn != nil || s.certs != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		background.Go(func() { reloadOn(bgCtx, hup, s.authn, s.certs) })
	}
	if s.janitor != nil {
		background.Go(func() { s.janitor.Run(bgCtx) })
	}

	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(s.grpcLis) }()
	if s.certs != nil {
		go func() { errc <- s.http.ServeTLS(s.httpLis, "", "") }()
	} else {
		go func() { errc <- s.http.Serve(s.httpLis) }()
	}
	log.Info("claimd serving", "grpc", s.grpcLis.Addr().String(), "http", s.httpLis.Addr().String(), "tls", c.tlsMode(), "auth_file", cmp.Or(c.AuthFile, "off"), "tiers", s.tiers.Mode,
		"durability", s.tiers.Durability, "tracing", cmp.Or(s.tracing.Exporter(), "off"), "janitor_interval", c.JanitorInterval.String(), "version", c.Build)

	// Readiness pings the stores, so it is background work too: it ends
	// before they close. Draining waits for it to end before it turns
	// /readyz off, so that no last ping turns it on again.
	readyCtx, stopReady := context.WithCancel(ctx)
	defer stopReady()
	readyDone := make(chan struct{})
	background.Go(func() {
		defer close(readyDone)
		watchReady(readyCtx, s.tiers, s.health, &s.ready, c.ReadyInterval, log)
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
	s.ready.Store(false)
	s.health.Shutdown() // every service NOT_SERVING while draining

	drained := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(c.ShutdownTimeout):
		log.Warn("drain timed out; cancelling in-flight calls")
		s.grpc.Stop()
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(shutCtx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, grpc.ErrServerStopped) && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	log.Info("stopped")
	return nil
}
