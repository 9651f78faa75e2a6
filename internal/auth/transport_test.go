package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/claimd/claimd/internal/auth"
)

// TestHTTPTransport: the protocol of an HTTP request is told apart as the
// gateway's transcoder tells it, from the request line and headers.
func TestHTTPTransport(t *testing.T) {
	tests := []struct {
		desc, method, target string
		header               map[string]string
		want                 string
	}{
		{"REST claim", "POST", "/v1/claims", map[string]string{"Content-Type": "application/json"}, auth.TransportREST},
		{"REST read, no body", "GET", "/v1/providers", nil, auth.TransportREST},
		{"Connect unary JSON", "POST", "/idempotency.v1.ClaimService/Claim",
			map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}, auth.TransportConnect},
		{"Connect unary binary", "POST", "/idempotency.v1.ClaimService/Claim",
			map[string]string{"Content-Type": "application/proto", "Connect-Protocol-Version": "1"}, auth.TransportConnect},
		{"Connect GET", "GET", "/idempotency.v1.ClaimService/Get?connect=v1&encoding=json&message=%7B%7D", nil, auth.TransportConnect},
		{"Connect streaming type", "POST", "/idempotency.v1.ClaimService/Claim", map[string]string{"Content-Type": "application/connect+json"}, auth.TransportConnect},
		{"gRPC through the HTTP listener", "POST", "/idempotency.v1.ClaimService/Claim", map[string]string{"Content-Type": "application/grpc"}, auth.TransportGRPC},
		{"gRPC+proto", "POST", "/idempotency.v1.ClaimService/Claim", map[string]string{"Content-Type": "application/grpc+proto"}, auth.TransportGRPC},
		{"gRPC-Web", "POST", "/idempotency.v1.ClaimService/Claim", map[string]string{"Content-Type": "application/grpc-web+proto"}, auth.TransportGRPCWeb},
		{"gRPC-Web text, which vanguard takes for REST too", "POST", "/idempotency.v1.ClaimService/Claim", map[string]string{"Content-Type": "application/grpc-web-text"}, auth.TransportREST},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := auth.HTTPTransport(r); got != tc.want {
			t.Errorf("%s: HTTPTransport(%s %s, %v) = %q, want %q", tc.desc, tc.method, tc.target, tc.header, got, tc.want)
		}
	}
}

// TestTransport: a marked request's transport reaches the handler's
// context; a call some net/http server served unmarked is "http"; any other
// context (the gRPC listener's) is "grpc".
func TestTransport(t *testing.T) {
	if got := auth.Transport(context.Background()); got != auth.TransportGRPC {
		t.Errorf("Transport(a context of no HTTP server) = %q, want %q", got, auth.TransportGRPC)
	}
	served := context.WithValue(context.Background(), http.ServerContextKey, &http.Server{})
	if got := auth.Transport(served); got != auth.TransportHTTP {
		t.Errorf("Transport(an unmarked HTTP request's context) = %q, want %q", got, auth.TransportHTTP)
	}
	var got string
	h := auth.MarkTransport(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = auth.Transport(r.Context()) }))
	r := httptest.NewRequest("POST", "/idempotency.v1.ClaimService/Claim", nil).WithContext(served)
	r.Header.Set("Content-Type", "application/grpc-web")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got != auth.TransportGRPCWeb {
		t.Errorf("Transport(a marked gRPC-Web request's context) = %q, want %q", got, auth.TransportGRPCWeb)
	}
}
