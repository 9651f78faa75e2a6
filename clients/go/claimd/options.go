package claimd

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Defaults of the options. A webhook provider usually gives up on a
// delivery after 10–30 s, so everything here answers well within that.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultCallTimeout      = 5 * time.Second
	DefaultKeepaliveTime    = 5 * time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
)

// RetryPolicy bounds the client's own retries of a call that failed with
// UNAVAILABLE (or ran out of its per-attempt timeout while the caller's
// context was still live), or that claimd refused with RESOURCE_EXHAUSTED
// and a RetryInfo (the caller's principal is over its rate limit: nothing
// was written). Such a retry waits at least the RetryInfo's delay, and is
// not made when that delay would end past MaxElapsed: the call then fails
// at once with an error matching ErrResourceExhausted. Every claimd call
// is safe to repeat: a Claim is retried with the same attempt_id, and
// Transition, Renew and Release are idempotent for the same token. Zero
// fields take the defaults.
type RetryPolicy struct {
	// MaxAttempts counts the first try; 1 disables retries. Default 4.
	MaxAttempts int
	// BaseBackoff bounds the backoff before the second attempt; the bound
	// doubles on each retry, and the pause is uniform below it ("full
	// jitter", as every claimd client does: see clients/GUARD.md).
	// Default 50ms.
	BaseBackoff time.Duration
	// MaxBackoff caps one backoff. Default 1s.
	MaxBackoff time.Duration
	// MaxElapsed caps the whole call, retries and backoffs included.
	// Default 10s.
	MaxElapsed time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 4
	}
	if p.BaseBackoff <= 0 {
		p.BaseBackoff = 50 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = time.Second
	}
	if p.MaxBackoff < p.BaseBackoff {
		p.MaxBackoff = p.BaseBackoff
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = 10 * time.Second
	}
	return p
}

// options is what Dial's Options set.
type options struct {
	connectTimeout   time.Duration
	callTimeout      time.Duration
	keepaliveTime    time.Duration
	keepaliveTimeout time.Duration
	retry            RetryPolicy
	dialOptions      []grpc.DialOption
	lazy             bool
	roundRobin       bool
	replicas         string // DialReplicas's addresses as an ipv4: target, for the plaintext check
	holder           string
	logger           *slog.Logger
	now              func() time.Time
	localCache       int // WithLocalCache's size; 0: off

	// Transport security and credentials; see security.go.
	token      TokenSource
	tokenErr   error
	tls        *tls.Config
	tlsErr     error
	serverName string
	insecure   bool
	creds      credentials.TransportCredentials
}

func defaultOptions() options {
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s/%d", host, os.Getpid())
	if len(holder) > 255 {
		holder = holder[:255]
	}
	return options{
		connectTimeout:   DefaultConnectTimeout,
		callTimeout:      DefaultCallTimeout,
		keepaliveTime:    DefaultKeepaliveTime,
		keepaliveTimeout: DefaultKeepaliveTimeout,
		retry:            RetryPolicy{}.withDefaults(),
		holder:           holder,
		logger:           slog.Default(),
		now:              time.Now,
	}
}

// Option configures Dial.
type Option func(*options)

// WithConnectTimeout bounds how long Dial waits for the connection to be
// ready, and each later reconnection attempt. Default 5s.
func WithConnectTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.connectTimeout = d
		}
	}
}

// WithCallTimeout bounds one attempt of one call (a Claim's wait is added
// on top). Default 5s, which is also claimd's own bound on a store call.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.callTimeout = d
		}
	}
}

// WithKeepalive sets the HTTP/2 ping interval and the time to wait for its
// ack. claimd permits pings every 10s, with or without calls in flight, and
// answers more frequent ones with a GOAWAY (too_many_pings), so intervals
// below 10s only cost reconnects. Default 5m and 20s; behind a load balancer
// that drops idle connections sooner, ping more often.
func WithKeepalive(interval, timeout time.Duration) Option {
	return func(o *options) {
		if interval > 0 {
			o.keepaliveTime = interval
		}
		if timeout > 0 {
			o.keepaliveTimeout = timeout
		}
	}
}

// WithRetry sets the retry policy for UNAVAILABLE and for a rate limit's
// RESOURCE_EXHAUSTED; zero fields keep their defaults.
func WithRetry(p RetryPolicy) Option {
	return func(o *options) { o.retry = p.withDefaults() }
}

// WithDialOptions appends gRPC dial options (interceptors, stats
// handlers). They are applied after the client's own, so they win. Choose
// transport security with WithTLS, WithTLSFiles, WithTransportCredentials
// or WithInsecure, not here: Dial decides from those whether a target may
// be reached in plaintext.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// WithLazyConnect makes Dial return at once without waiting for the
// connection; the first call connects. Calls made while claimd is
// unreachable fail with ErrUnavailable after the retry policy.
func WithLazyConnect() Option {
	return func(o *options) { o.lazy = true }
}

// WithHolder sets the holder text sent with claims that name none (kept by
// claimd for audit). Default "<hostname>/<pid>".
func WithHolder(holder string) Option {
	return func(o *options) { o.holder = holder }
}

// WithLocalCache keeps up to size settled answers in the client (least
// recently used go first) and answers a Claim by event id for one of them
// without asking claimd, until the record's window ends: a provider's
// retries of a delivery this client settled, or was told is a DUPLICATE.
// Only SETTLED and FAILED records are kept, never an owned or in-progress
// key, so a cached answer never runs a handler nor keeps one from running;
// claims of a raw Delivery or of an entity lifecycle always ask claimd, and
// so does one whose PayloadSHA256 differs from the stored one. A cached
// answer's Claim.Cached is true. Off by default: a record settled by
// another process is learned only from claimd, and claimd's audit (and
// metrics) see no cached duplicate. size <= 0 turns it off.
func WithLocalCache(size int) Option {
	return func(o *options) { o.localCache = max(size, 0) }
}

// WithLogger sets where Guard reports what needs a human: payload
// mismatches, settles that failed after the side effect happened, and a
// handler's error (once, at Error, with the key), which Guard answers with
// a 500 and does not return. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}
