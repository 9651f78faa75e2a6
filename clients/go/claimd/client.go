package claimd

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Client calls claimd: one server, or several replicas with DialReplicas or
// WithRoundRobin. It is safe for concurrent use; make one per process and
// share it.
type Client struct {
	conn   *grpc.ClientConn
	claims pb.ClaimServiceClient
	opts   options
	cache  *duplicateCache // WithLocalCache; nil when off
}

// Dial connects to claimd at target ("host:port" or any gRPC target) and,
// unless WithLazyConnect is given, waits until the connection is ready,
// for at most the connect timeout or until ctx ends. It fails with an
// *Error matching ErrUnavailable when claimd cannot be reached.
//
// A loopback target is reached in plaintext unless TLS is asked for; any
// other target needs WithTLS or WithTLSFiles (or WithInsecure), and Dial
// fails with an *Error matching ErrInvalidArgument that says so. A token
// (WithToken, WithTokenSource) is only ever sent over TLS or to loopback.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	checked := target
	if o.replicas != "" {
		checked = o.replicas // DialReplicas's resolver hides the addresses
	}
	creds, err := o.transportCredentials(checked)
	if err != nil {
		msg := "claimd.Dial: " + err.Error()
		return nil, &Error{Op: "Dial", Code: codes.InvalidArgument, Message: msg, st: status.New(codes.InvalidArgument, msg)}
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// gRPC's default reconnect backoff grows to 2 minutes; a webhook
		// receiver should notice a restarted claimd within seconds.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: o.connectTimeout,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: o.keepaliveTime, Timeout: o.keepaliveTimeout}),
	}
	if o.roundRobin {
		dialOpts = append(dialOpts, grpc.WithDefaultServiceConfig(roundRobinServiceConfig))
	}
	if o.token != nil {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearer{src: o.token}))
	}
	conn, err := grpc.NewClient(target, append(dialOpts, o.dialOptions...)...)
	if err != nil {
		return nil, &Error{Op: "Dial", Code: codes.InvalidArgument, Message: err.Error(), st: status.New(codes.InvalidArgument, err.Error())}
	}
	c := &Client{conn: conn, claims: pb.NewClaimServiceClient(conn), opts: o}
	if o.localCache > 0 {
		c.cache = newDuplicateCache(o.localCache, o.now)
	}
	if o.lazy {
		return c, nil
	}
	if err := c.waitReady(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// waitReady blocks until the connection is READY, the connect timeout
// passes or ctx ends.
func (c *Client) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.connectTimeout)
	defer cancel()
	c.conn.Connect()
	for {
		s := c.conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			msg := "claimd not reachable at " + c.conn.Target() + " within the connect timeout (last state " + s.String() + ")"
			return &Error{Op: "Dial", Code: codes.Unavailable, Message: msg, st: status.New(codes.Unavailable, msg)}
		}
	}
}

// Close closes the connection. Calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the underlying connection, e.g. for the ProviderService or health
// clients.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// call runs one RPC under the retry policy. Every claimd RPC is safe to
// repeat (see RetryPolicy), so an attempt that may or may not have reached
// the server is simply sent again; extra widens the per-attempt timeout
// (a Claim's wait).
func call[T any](ctx context.Context, c *Client, op string, extra time.Duration, rpc func(context.Context) (T, error)) (T, error) {
	p := c.opts.retry
	ctx, cancel := context.WithTimeout(ctx, p.MaxElapsed+extra)
	defer cancel()
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, c.opts.callTimeout+extra)
		v, err := rpc(actx)
		acancel()
		if err == nil {
			return v, nil
		}
		code := status.Code(err)
		// A per-attempt timeout while the whole call still has time is the
		// "my call timed out" case that attempt_id exists for.
		retryable := code == codes.Unavailable || (code == codes.DeadlineExceeded && ctx.Err() == nil)
		pause := backoffFor(p, attempt)
		if code == codes.ResourceExhausted {
			// A rate limit says when to come back; without a RetryInfo the
			// refusal is something else (a message over a size limit) and
			// repeating it changes nothing.
			delay := retryDelay(status.Convert(err))
			retryable, pause = delay > 0, max(pause, delay)
		}
		if !retryable || attempt >= p.MaxAttempts || !fitsDeadline(ctx, pause) || !sleep(ctx, pause) {
			var zero T
			return zero, newError(op, err, attempt)
		}
	}
}

// backoffFor is the pause after the given failed attempt (1-based): "full
// jitter" (clients/GUARD.md), uniform in [0, backoffCeiling], so that a
// fleet of receivers cut off by one outage does not come back in lockstep.
func backoffFor(p RetryPolicy, attempt int) time.Duration {
	return rand.N(backoffCeiling(p, attempt) + 1)
}

// backoffCeiling is the most backoffFor pauses after the given failed
// attempt: the base doubled per attempt, capped.
func backoffCeiling(p RetryPolicy, attempt int) time.Duration {
	d := p.BaseBackoff
	for i := 1; i < attempt && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// fitsDeadline reports whether a pause of d leaves ctx time to try again:
// a pause that would outlast the call fails it now instead of at its end.
func fitsDeadline(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > d
}

// sleep waits d unless ctx ends first; it reports whether the full wait
// passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
