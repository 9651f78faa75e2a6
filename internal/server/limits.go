package server

import (
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Bounds on what one client can hold of the server (issue 10 §6). A caller
// past a bound is slowed or refused; the server's memory and goroutines
// are not.
const (
	// DefaultMaxRequestBytes (--max-request-bytes) bounds one gRPC request. The largest legitimate
	// one is a Claim carrying a delivery: the provider's body (Stripe, Adyen
	// and Shopify bodies are kilobytes) and its headers. gRPC's own 4 MiB,
	// made explicit; GitHub allows 25 MB payloads, so a caller that sends
	// whole GitHub deliveries raises --max-request-bytes or sends event_id.
	DefaultMaxRequestBytes = 4 << 20
	// maxConcurrentStreams bounds the calls in flight on one connection
	// (each may wait up to MaxWait). Past it the client queues new calls
	// (HTTP/2 SETTINGS) instead of failing them; 1024 is far above the 50
	// to 64 callers per connection of BENCHMARKS.md.
	maxConcurrentStreams = 1024
	// maxConnectionIdle closes a connection with no call for this long
	// (GOAWAY; clients reconnect on their next call), so idle connections
	// of vanished clients do not accumulate.
	maxConnectionIdle = 5 * time.Minute
	// connectionTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface (grpc-go's default is 120s: a slow-handshake flood).
	connectionTimeout = 10 * time.Second
	// maxHeaderListBytes bounds a call's metadata (grpc-go's default is 16
	// MiB); tokens and trace headers need a few hundred bytes.
	maxHeaderListBytes = 64 << 10
	// streamWorkers is how many goroutines serve calls and stay to serve
	// the next one (grpc.NumStreamWorkers). Without them grpc-go starts a
	// goroutine per call, whose stack then grows through the interceptor
	// chain, the service and the tiers: runtime.morestack was 18 % of
	// claimd's CPU on duplicates and 9 % on new keys (perf, BENCHMARKS.md).
	// A worker keeps its grown stack. The count bounds no call: past it
	// (every worker busy, e.g. waiting on the durable tier) grpc-go starts a
	// goroutine as before; it is a few times the 50–64 callers of
	// BENCHMARKS.md so that the usual load never needs one.
	streamWorkers = 256

	// The HTTP listener serves /metrics, /healthz and /readyz, small GETs,
	// and the API's unary calls (--http-api): a request is read whole
	// (at most twice --max-request-bytes of JSON) within httpReadTimeout,
	// and its answer written within httpWriteTimeout, which is longer than
	// the longest call: a Claim may wait up to 30s for an in-progress
	// holder.
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 45 * time.Second
	// DefaultHTTPIdleTimeout (--http-idle-timeout) closes a keep-alive connection with no
	// request for this long. Without it (and no ReadTimeout) net/http keeps
	// an idle connection forever.
	DefaultHTTPIdleTimeout = 2 * time.Minute
	httpMaxHeaderBytes     = 64 << 10
)

// limitOptions are the gRPC server's bounds; maxRequest is
// --max-request-bytes. A larger request is refused RESOURCE_EXHAUSTED
// before it is decoded.
func limitOptions(maxRequest int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRequest),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.ConnectionTimeout(connectionTimeout),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.NumStreamWorkers(streamWorkers),
	}
}

// keepaliveOptions let clients ping every 10s, even without a call in flight
// (grpc-go's default policy would answer pings more often than every 5
// minutes with GOAWAY too_many_pings, cutting off clients that keep
// connections alive through load balancers),
// have the server ping idle connections so dead peers are noticed, and
// close connections that carry no call for maxConnectionIdle.
func keepaliveOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second, MaxConnectionIdle: maxConnectionIdle}),
	}
}

// newHTTPServer is the HTTP listener's server with every timeout set;
// idle is --http-idle-timeout. Its own errors (TLS handshakes that fail)
// go to log at Info: a scanner must not fill the log with warnings.
func newHTTPServer(h http.Handler, idle time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    httpMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelInfo),
	}
}
