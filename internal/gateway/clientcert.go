package gateway

import (
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// RequireClientCert returns interceptors that refuse a call whose peer did
// not present a client certificate the TLS layer verified: UNAUTHENTICATED
// with ErrorInfo reason CREDENTIALS_MISSING. With --tls-client-ca the gRPC
// listener requires that certificate in the TLS handshake, so its calls
// always pass; the HTTP listener can only ask for one (kubelet probes of
// /healthz come without), so these interceptors hold the API calls it
// carries to the same rule. Chain them after metrics and tracing, so
// refused calls are counted and traced, and before authentication.
func RequireClientCert() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := verifiedPeer(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := verifiedPeer(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

func verifiedPeer(ctx context.Context) error {
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 {
			return nil
		}
	}
	return errClientCertRequired()
}

// errClientCertRequired is the refusal of a call without a verified
// client certificate.
func errClientCertRequired() error {
	st := status.New(codes.Unauthenticated, "a client certificate signed by the server's client CA is required")
	if with, err := st.WithDetails(&errdetails.ErrorInfo{Reason: pb.ErrorReason_CREDENTIALS_MISSING.String(), Domain: auth.ErrorDomain}); err == nil {
		st = with
	}
	return st.Err()
}
