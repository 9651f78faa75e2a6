package claimd

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/health" // client-side health checking for WithRoundRobin
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// roundRobinServiceConfig has gRPC open a connection to every address the
// target resolves to, spread calls over them in turn, and send calls only
// to a replica whose grpc.health.v1 reports the claim service SERVING:
// claimd reports NOT_SERVING while its durable tier does not answer and
// while it drains on SIGTERM.
var roundRobinServiceConfig = `{
	"loadBalancingConfig": [{"round_robin": {}}],
	"healthCheckConfig": {"serviceName": "` + pb.ClaimService_ServiceDesc.ServiceName + `"}
}`

// WithRoundRobin spreads calls over every address the target resolves to
// (gRPC's round_robin balancer) and skips replicas whose health service
// does not report SERVING. Use it with a target that resolves to several
// addresses, such as "dns:///claimd-headless.payments.svc:50051" (a
// Kubernetes headless Service: one address per pod, re-resolved when
// connections fail). DialReplicas sets it. Without it, gRPC connects to the
// first address that answers and stays there.
func WithRoundRobin() Option {
	return func(o *options) { o.roundRobin = true }
}

// replicasScheme names DialReplicas's resolver; it is private to each
// connection (grpc.WithResolvers), so one name serves every Client.
const replicasScheme = "claimd-replicas"

// DialReplicas connects to the claimd replicas at addrs ("host:port" each)
// and balances calls over them with WithRoundRobin: a replica that stops,
// or reports NOT_SERVING, gets no new calls, and a call that failed on it
// with UNAVAILABLE is retried (RetryPolicy) on another. Every replica must
// share the same Redis and PostgreSQL; the list is fixed for the Client's
// life (use a dns:/// target with WithRoundRobin for a list that changes).
// Dial's other rules apply: plaintext only when every address is a
// loopback one (else WithTLS, WithTLSFiles or WithInsecure), and unless
// WithLazyConnect is given it waits until at least one replica is ready.
func DialReplicas(ctx context.Context, addrs []string, opts ...Option) (*Client, error) {
	invalid := func(msg string) error {
		return &Error{Op: "Dial", Code: codes.InvalidArgument, Message: msg, st: status.New(codes.InvalidArgument, msg)}
	}
	if len(addrs) == 0 {
		return nil, invalid("DialReplicas: no addresses")
	}
	state := resolver.State{}
	for _, a := range addrs {
		if a == "" {
			return nil, invalid("DialReplicas: an empty address")
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r := manual.NewBuilderWithScheme(replicasScheme)
	r.InitialState(state)
	// Plaintext is decided as for Dial: allowed without WithInsecure only
	// when every address is a loopback one.
	list := "ipv4:" + strings.Join(addrs, ",")
	opts = append(opts, WithRoundRobin(), WithDialOptions(grpc.WithResolvers(r)), func(o *options) { o.replicas = list })
	return Dial(ctx, replicasScheme+":///replicas", opts...)
}
