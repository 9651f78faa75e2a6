package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/claimd/claimd/internal/textclip"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// front is the API's front door: it answers, from the request line and
// headers alone, everything that needs no body (which host, which origin,
// which content type, who is calling, which path), and only then lets
// vanguard read a body, held to its bound. Its order is the contract:
//
//  1. Host must be an allowed host (421 HOST_NOT_ALLOWED): a page that
//     rebinds its own name to 127.0.0.1 still sends its own name.
//  2. Origin, when sent, must name an allowed host (403
//     ORIGIN_NOT_ALLOWED): a browser sends it on every cross-site write.
//  3. A write (POST, PUT, PATCH, DELETE) must have a JSON or protobuf
//     content type (415 CONTENT_TYPE_UNSUPPORTED): the types a page may
//     send without asking first (text/plain, forms) are refused.
//  4. A REST path must be UTF-8 once unescaped, and a query parameter may
//     not set a field that the path sets, nor any field of a route whose
//     body is the whole message (400 INVALID_ARGUMENT naming it).
//  5. The caller is authenticated (client certificate, bearer token) as
//     the gRPC interceptors would (401 with their reason).
//  6. Only then is the body read: at most MaxBodyBytes as sent and as
//     decoded (413 REQUEST_TOO_LARGE); a REST body that the route needs
//     may not be empty (400 INVALID_ARGUMENT).
type front struct {
	next        http.Handler
	routes      *routeTable
	hosts       hostSet
	auth        func(context.Context, string) error
	requireCert bool
	maxBody     int64
	pages       http.Handler // Config.Pages, or nil
	pagePrefix  string
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.pages != nil && (r.URL.Path == strings.TrimSuffix(f.pagePrefix, "/") || strings.HasPrefix(r.URL.Path, f.pagePrefix)) {
		if ref := f.admitPage(r); ref != nil {
			ref.write(w, r, false)
			return
		}
		f.pages.ServeHTTP(w, r)
		return
	}
	// The API's answers are one caller's data: no cache keeps them, and no
	// browser reads them as anything but their content type.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	rpc := f.routes.rpc[r.URL.Path]
	rt, ref := f.admit(r, rpc)
	if ref != nil {
		ref.write(w, r, rpc)
		return
	}
	if r.ContentLength > f.maxBody {
		tooLarge("the request body (Content-Length)", f.maxBody).write(w, r, rpc)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &limitedBody{ReadCloser: r.Body, limit: f.maxBody}
	}
	var what string
	switch {
	case rt != nil && rt.body != "":
		what = fmt.Sprintf("%s %s takes the request as JSON (%s)", rt.verb, rt.pattern(), rt.method)
	case rpc && r.Method == http.MethodPost && mediaType(r) == "application/json":
		// Connect's JSON is an object; only protobuf spells the empty
		// message as no bytes.
		what = "a Connect JSON request is a JSON object ({} for an empty message)"
	}
	if what != "" {
		if ref := requireBody(r, what); ref != nil {
			ref.write(w, r, rpc)
			return
		}
	}
	f.next.ServeHTTP(&sizeStatus{ResponseWriter: w}, r)
}

// admit runs the checks that need no body, in the order of front's doc,
// and returns the REST route of the request (nil for Connect, gRPC and
// gRPC-Web, and for a path that no route serves).
func (f *front) admit(r *http.Request, rpc bool) (*route, *refusal) {
	if ref := f.admitSite(r); ref != nil {
		return nil, ref
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		if ct := r.Header.Get("Content-Type"); !apiContentType(ct) {
			return nil, refuse(http.StatusUnsupportedMediaType, codes.InvalidArgument, ReasonContentTypeUnsupported, "Content-Type",
				"Content-Type %s: a write needs application/json or application/proto (or a gRPC, gRPC-Web or Connect stream type)", textclip.Quote(ct, maxEcho))
		}
	}
	var rt *route
	method := r.URL.Path
	if !rpc {
		var vals []string
		if rt, vals = f.routes.match(r.Method, r.URL.EscapedPath()); rt == nil {
			return nil, nil // no route: vanguard answers 404 without reading a body
		}
		if ref := restParams(r, rt, vals); ref != nil {
			return nil, ref
		}
		method = rt.method
	}
	if f.requireCert && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
		return nil, fromStatus(errClientCertRequired())
	}
	if f.auth != nil {
		if err := f.auth(callContext(r), method); err != nil {
			return nil, fromStatus(err)
		}
	}
	return rt, nil
}

// admitSite runs the first two checks of front's doc: the Host and the
// Origin.
func (f *front) admitSite(r *http.Request) *refusal {
	if host := hostOf(r.Host); !f.hosts.allows(host) {
		return refuse(http.StatusMisdirectedRequest, codes.PermissionDenied, ReasonHostNotAllowed, "Host",
			"Host %s is not a name this listener answers to (--http-allowed-hosts)", textclip.Quote(r.Host, maxEcho))
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !f.hosts.allows(strings.ToLower(u.Hostname())) {
			return refuse(http.StatusForbidden, codes.PermissionDenied, ReasonOriginNotAllowed, "Origin",
				"Origin %s is not an allowed host (--http-allowed-hosts): claimd's API is not for web pages of other sites", textclip.Quote(origin, maxEcho))
		}
	}
	return nil
}

// admitPage holds a request for Config.Pages to the Host and Origin rules
// and, under RequireClientCert, to a verified client certificate: what a
// browser's navigation can bring. It has no bearer token to check.
func (f *front) admitPage(r *http.Request) *refusal {
	if ref := f.admitSite(r); ref != nil {
		return ref
	}
	if f.requireCert && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
		return fromStatus(errClientCertRequired())
	}
	return nil
}

// callContext is what the gRPC server will know of the call before its
// request is read: the authorization header as metadata, and the client
// certificate the TLS layer verified as the peer's (as grpc-go's
// ServeHTTP builds them).
func callContext(r *http.Request) context.Context {
	ctx := metadata.NewIncomingContext(r.Context(), metadata.MD{"authorization": r.Header.Values("Authorization")})
	p := &peer.Peer{Addr: strAddr(r.RemoteAddr)}
	if r.TLS != nil {
		p.AuthInfo = credentials.TLSInfo{State: *r.TLS, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
	}
	return peer.NewContext(ctx, p)
}

type strAddr string

func (a strAddr) Network() string { return "tcp" }
func (a strAddr) String() string  { return string(a) }

// restParams holds a REST request's path and query to the path-first
// rule: every path segment is UTF-8 once unescaped (a string field must
// be), every query parameter too, and no query parameter names a field
// that the path sets, or any field of a route whose body is the whole
// message. A route's fields then come from one place each, as a proxy or
// an access log that reads the path sees them.
func restParams(r *http.Request, rt *route, vals []string) *refusal {
	for i, seg := range strings.Split(r.URL.EscapedPath(), "/") {
		if s, err := url.PathUnescape(seg); err != nil || !utf8.ValidString(s) {
			return refuse(http.StatusBadRequest, codes.InvalidArgument, reasonInvalid, "path",
				"path segment %d (%s) is not UTF-8 once unescaped", i, textclip.Quote(seg, maxEcho))
		}
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return refuse(http.StatusBadRequest, codes.InvalidArgument, reasonInvalid, "query", "the query string is malformed: %v", err)
	}
	for key, values := range query {
		for _, s := range append([]string{key}, values...) {
			if !utf8.ValidString(s) {
				return refuse(http.StatusBadRequest, codes.InvalidArgument, reasonInvalid, "query",
					"query parameter %s is not UTF-8 once unescaped", textclip.Quote(key, maxEcho))
			}
		}
		field := strings.SplitN(key, ".", 2)[0]
		for i, v := range rt.vars {
			if v == field || snakeToCamel(v) == field {
				return refuse(http.StatusBadRequest, codes.InvalidArgument, reasonInvalid, key,
					"query parameter %s sets %s, which the path sets (%s): a field comes from the path alone", textclip.Quote(key, maxEcho), v, textclip.Quote(vals[i], maxEcho))
			}
		}
		if rt.body == "*" {
			return refuse(http.StatusBadRequest, codes.InvalidArgument, reasonInvalid, key,
				"query parameter %s: %s %s takes every field from its JSON body, none from the query", textclip.Quote(key, maxEcho), rt.verb, r.URL.Path)
		}
	}
	return nil
}

// snakeToCamel is a proto field name as JSON spells it (lowerCamelCase),
// which vanguard accepts in a query too.
func snakeToCamel(s string) string {
	var b strings.Builder
	up := false
	for _, c := range s {
		switch {
		case c == '_':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(c)))
			up = false
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// requireBody refuses a request without the body it needs (what says
// why); vanguard would hand the server no message at all, which it
// answers INTERNAL. It reads at most one byte (after authentication).
func requireBody(r *http.Request, what string) *refusal {
	empty := r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody
	if !empty && r.ContentLength < 0 {
		br := bufio.NewReaderSize(r.Body, 512)
		_, err := br.Peek(1)
		empty = errors.Is(err, io.EOF)
		r.Body = struct {
			io.Reader
			io.Closer
		}{br, r.Body}
	}
	if !empty {
		return nil
	}
	return refuse(http.StatusBadRequest, codes.InvalidArgument, reasonInvalid, "body",
		"the request body is empty: %s", what)
}

// apiContentType reports whether ct is a type the API reads: JSON or
// protobuf, bare (REST, Connect unary) or framed (gRPC, gRPC-Web, Connect
// streams).
func apiContentType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch strings.ToLower(mt) {
	case "application/json", "application/proto", "application/protobuf", "application/x-protobuf",
		"application/grpc", "application/grpc+proto", "application/grpc+json",
		"application/grpc-web", "application/grpc-web+proto", "application/grpc-web+json",
		"application/connect+proto", "application/connect+json":
		return true
	}
	return false
}

// mediaType is the request's content type without parameters.
func mediaType(r *http.Request) string {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt
}

// hostSet is --http-allowed-hosts: host names and IP addresses, without
// ports, in lower case; "*" allows any.
type hostSet map[string]bool

// NewHostSet normalises hosts for Config.AllowedHosts' check: a port is
// dropped, an IPv6 address may be bracketed or not, and case is ignored.
func newHostSet(hosts []string) hostSet {
	s := hostSet{}
	for _, h := range hosts {
		s[hostOf(h)] = true
	}
	return s
}

func (s hostSet) allows(host string) bool { return host != "" && (s["*"] || s[host]) }

// hostOf is the host of a Host header or an allowed-host entry: no port,
// no brackets, lower case.
func hostOf(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

// sizeStatus answers a size refusal 413 where vanguard would answer 429:
// RESOURCE_EXHAUSTED is a rate limit only when it says when to come back
// (Retry-After, from RetryAfter's interceptor); every other one is a
// request past a size bound, which waiting does not cure.
type sizeStatus struct {
	http.ResponseWriter
}

func (s *sizeStatus) WriteHeader(code int) {
	if code == http.StatusTooManyRequests && s.Header().Get("Retry-After") == "" {
		code = http.StatusRequestEntityTooLarge
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *sizeStatus) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *sizeStatus) Unwrap() http.ResponseWriter { return s.ResponseWriter }
