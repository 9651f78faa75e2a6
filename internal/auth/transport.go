package auth

import (
	"context"
	"net/http"
	"strings"
)

// Transports: how a call reached the gRPC server, as log lines and audit
// rows name it. A transport decides nothing (no rule reads it); it tells an
// operator which door a write came through.
const (
	// TransportGRPC is gRPC: on the gRPC listener, or passed through the
	// HTTP listener.
	TransportGRPC = "grpc"
	// TransportREST is REST with JSON on the google.api.http routes
	// (POST /v1/claims, …).
	TransportREST = "http-rest"
	// TransportConnect is the Connect protocol, JSON or binary.
	TransportConnect = "connect"
	// TransportGRPCWeb is gRPC-Web.
	TransportGRPCWeb = "grpc-web"
	// TransportHTTP is a call the HTTP listener served without saying by
	// which protocol: its handler was not wrapped in MarkTransport.
	TransportHTTP = "http"
)

type transportKey struct{}

// WithTransport returns ctx carrying transport t.
func WithTransport(ctx context.Context, t string) context.Context {
	return context.WithValue(ctx, transportKey{}, t)
}

// Transport returns how the call of ctx arrived: what MarkTransport
// recorded for the HTTP request that carried it; TransportHTTP for another
// call that a net/http server served (grpc.Server.ServeHTTP runs the call
// in the request's context, which holds http.ServerContextKey); otherwise
// TransportGRPC, a call on the gRPC listener (grpc.Server.Serve, no
// net/http server in its context). It comes from the server's own context,
// never from the caller's metadata, so a caller cannot name another
// transport than the one it used.
func Transport(ctx context.Context) string {
	if t, ok := ctx.Value(transportKey{}).(string); ok {
		return t
	}
	if ctx.Value(http.ServerContextKey) != nil {
		return TransportHTTP
	}
	return TransportGRPC
}

// HTTPTransport names the protocol of an HTTP request as the gateway's
// transcoder (connectrpc.com/vanguard) tells them apart: by its content
// type, then the Connect protocol's version header or query parameter;
// anything else is REST.
func HTTPTransport(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	switch {
	case ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+"):
		return TransportGRPC
	case ct == "application/grpc-web" || strings.HasPrefix(ct, "application/grpc-web+"):
		return TransportGRPCWeb
	case strings.HasPrefix(ct, "application/connect+"),
		r.Header.Get("Connect-Protocol-Version") == "1",
		r.Method == http.MethodGet && r.URL.Query().Get("connect") == "v1":
		return TransportConnect
	}
	return TransportREST
}

// MarkTransport records HTTPTransport(r) in each request's context, where
// the gRPC call the gateway makes of it finds it (Transport). Wrap the
// gateway's handler in it.
func MarkTransport(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(WithTransport(r.Context(), HTTPTransport(r))))
	})
}
