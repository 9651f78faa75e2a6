package auth

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// Authenticate checks the credentials that ctx carries (incoming metadata
// and peer) for a call to method, before its request is read: the same
// check, reasons and refusal (UNAUTHENTICATED, counted and logged) as the
// interceptors' first step. It spends no rate budget and checks no role
// or namespace: the interceptors do that once the request is decoded.
// Open methods (health) pass.
func (a *Authenticator) Authenticate(ctx context.Context, method string) error {
	if open(method) {
		return nil
	}
	if _, _, reason, msg := authenticate(ctx, a.current()); reason != "" {
		return a.unauthenticated(ctx, method, reason, msg)
	}
	return nil
}

// TapOption is Authenticate as a gRPC server option: grpc-go runs an
// InTapHandle when a call's headers arrive, before it reads the request
// message, which its interceptors only see decoded. A stranger's call is
// refused there, so its message is never read.
func (a *Authenticator) TapOption() grpc.ServerOption {
	return grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		return ctx, a.Authenticate(ctx, info.FullMethodName)
	})
}
