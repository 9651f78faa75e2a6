package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/tlsconfig"
)

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
			return nil, fmt.Errorf("%w: --http-allowed-hosts: %q is not a host name or address (no scheme, path or user: claimd.example.com, 10.0.0.5, [::1])", ErrUsage, h)
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
func watchReady(ctx context.Context, st *Tiers, hs *health.Server, ready *atomic.Bool, every time.Duration, log *slog.Logger) {
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
