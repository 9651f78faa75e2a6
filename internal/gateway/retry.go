package gateway

import (
	"context"
	"math"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RetryAfter returns interceptors that copy the google.rpc.RetryInfo of a
// refused call into its response metadata as retry-after, in whole
// seconds rounded up (at least 1): HTTP carries response metadata as
// headers, so a rate-limited REST or Connect call is answered 429 with
// Retry-After (RFC 9110 §10.2.3), as HTTP clients and proxies expect.
// Chain them before the auth interceptors, so that they see their
// refusals.
func RetryAfter() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			setRetryAfter(ctx, err)
			return resp, err
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			setRetryAfter(ss.Context(), err)
			return err
		}),
	}
}

func setRetryAfter(ctx context.Context, err error) {
	if err == nil {
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		return
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			secs := max(1, int64(math.Ceil(ri.GetRetryDelay().AsDuration().Seconds())))
			_ = grpc.SetHeader(ctx, metadata.Pairs("retry-after", strconv.FormatInt(secs, 10)))
			return
		}
	}
}
