package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/reconcile"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

var errDown = errors.New("connection refused")

// flakyFast is a fast tier that fails every call while down is set.
type flakyFast struct {
	tiers.Fast
	down atomic.Bool
}

func (f *flakyFast) Reserve(ctx context.Context, p tiers.ReserveParams) (tiers.FastResult, error) {
	if f.down.Load() {
		return tiers.FastResult{}, tiers.Unavailable("redis", errDown)
	}
	return f.Fast.Reserve(ctx, p)
}

func (f *flakyFast) Put(ctx context.Context, rec tiers.Record) error {
	if f.down.Load() {
		return tiers.Unavailable("redis", errDown)
	}
	return f.Fast.Put(ctx, rec)
}

func (f *flakyFast) Fill(ctx context.Context, rec tiers.Record, nonce string) error {
	if f.down.Load() {
		return tiers.Unavailable("redis", errDown)
	}
	return f.Fast.Fill(ctx, rec, nonce)
}

func (f *flakyFast) Abort(ctx context.Context, k tiers.Key, nonce string) error {
	if f.down.Load() {
		return tiers.Unavailable("redis", errDown)
	}
	return f.Fast.Abort(ctx, k, nonce)
}

// flakyDurable is a durable tier that fails every write while down is set,
// before reaching the real one (nothing is written).
type flakyDurable struct {
	tiers.Durable
	down atomic.Bool
}

func (d *flakyDurable) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	if d.down.Load() {
		return tiers.ClaimResult{}, tiers.Unavailable("postgres", errDown)
	}
	return d.Durable.Claim(ctx, p)
}

func (d *flakyDurable) Transition(ctx context.Context, p tiers.TransitionParams) (tiers.Record, bool, error) {
	if d.down.Load() {
		return tiers.Record{}, false, tiers.Unavailable("postgres", errDown)
	}
	return d.Durable.Transition(ctx, p)
}

// world is claimd as cmd/claimd wires it, in one process: the service over
// the embedded tiers (each behind a switch that takes it down), metrics on a
// registry of its own, served on /metrics by promhttp, and a gRPC client.
type world struct {
	reg     *prometheus.Registry
	m       *metrics.Metrics
	clk     *clock.Fake
	mem     *memory.Store
	lite    *sqlite.Store
	fast    *flakyFast
	durable *flakyDurable
	client  pb.ClaimServiceClient
	url     string
}

// start is a whole-millisecond instant before every provider's review is
// overdue (providers.yaml: reviewed_on 2026-11-01; review age 180 days).
var start = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const reviewAge = 180 * 24 * time.Hour

func newWorld(t *testing.T) *world {
	t.Helper()
	return newWorldWith(t, nil)
}

// newWorldWith is newWorld with the metrics configuration changed by mod.
func newWorldWith(t *testing.T, mod func(*metrics.Config)) *world {
	t.Helper()
	w := &world{reg: prometheus.NewRegistry(), clk: clock.NewFake(start)}
	providers, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg := metrics.Config{Providers: providers, ReviewAge: reviewAge, Clock: w.clk}
	if mod != nil {
		mod(&cfg)
	}
	w.m, err = metrics.New(w.reg, cfg)
	if err != nil {
		t.Fatalf("metrics.New() error = %v", err)
	}
	w.m.SetTiers("memory", "sqlite")
	w.m.SetSQLiteDurability(sqlite.DurabilityFull.String())

	w.lite, err = sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	w.mem = memory.New(memory.Config{})
	w.fast = &flakyFast{Fast: w.mem}
	w.durable = &flakyDurable{Durable: w.lite}
	store := twotier.New(w.fast, w.durable, twotier.Config{Observer: w.m})
	t.Cleanup(func() { store.Close() })

	srv := grpc.NewServer(w.m.ServerOptions()...)
	service.New(service.Config{
		Store: store, Registry: providers, Clock: w.clk, ReviewAge: reviewAge, Recorder: w.m,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}).Register(srv)
	w.m.InitializeGRPC(srv)
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
	w.client = pb.NewClaimServiceClient(conn)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	w.url = hs.URL + "/metrics"
	return w
}

// scrape GETs /metrics and returns its families as the text format names
// them.
func (w *world) families(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(w.url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", res.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// scrape returns every sample of /metrics as `name{label="value",...}` →
// value, labels sorted. A histogram contributes its _count (and its _sum
// and buckets, which depend on timing, are left out).
func (w *world) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for name, f := range w.families(t) {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[series(name, m)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[series(name, m)] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[series(name+"_count", m)] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

func series(name string, m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// sel builds a series name the way scrape does: sel("x", "b", "2", "a", "1")
// is `x{a="1",b="2"}`.
func sel(name string, kv ...string) string {
	var ls []string
	for i := 0; i < len(kv); i += 2 {
		ls = append(ls, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	sort.Strings(ls)
	return name + "{" + strings.Join(ls, ",") + "}"
}

// exposedNames lists the sample names /metrics serves (for a histogram: its
// _bucket, _sum and _count), after one claim so every vector has a series.
func exposedNames(t *testing.T) map[string]bool {
	t.Helper()
	w := newWorld(t)
	if _, err := w.client.Claim(context.Background(), &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_names"}}); err != nil {
		t.Fatal(err)
	}
	// The auth layer registers its own metrics on the same registry when
	// serve has an --auth-file: the rules may watch them too.
	authFile := filepath.Join(t.TempDir(), "auth.yaml")
	body := "version: 1\nprincipals:\n  ops:\n    tokens: [\"" + auth.HashToken(auth.NewToken()) + "\"]\n    namespaces: [\"*\"]\n    roles: [admin]\n"
	if err := os.WriteFile(authFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Load(authFile, auth.Options{Registerer: w.reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: w.clk}); err != nil {
		t.Fatal(err)
	}
	// A deferred claim, as the service reports one, creates the out-of-order
	// series even when the registry declares no lifecycle.
	w.m.Record(context.Background(), &service.Request{Method: "Claim", Namespace: "billing", Provider: "stripe", Known: true,
		Lifecycle: "charge", EventType: "charge.refunded", Outcome: tiers.OutcomeDeferred})
	// claimd reconcile publishes its counter from its own process (to a
	// Pushgateway or a textfile): the rules watch it too.
	reconcile.Count(reconcile.NewMetrics(w.reg), "stripe", nil)
	names := map[string]bool{}
	for name, f := range w.families(t) {
		names[name] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	return names
}
