package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/textclip"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ServerOptions returns the unary and stream interceptors as server
// options. Chain them after the metrics and tracing interceptors, so that
// refused calls are counted and traced like any other.
func (a *Authenticator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.StreamServerInterceptor()),
	}
}

// UnaryServerInterceptor authenticates each call, applies the principal's
// rate limit, checks the method's role and the request's namespace, and
// hands the call on with the Principal in its context (see FromContext).
// A refused call never reaches the handler, so it writes nothing. Health
// checks pass untouched.
func (a *Authenticator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if open(info.FullMethod) {
			return handler(ctx, req)
		}
		c, err := a.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if err := a.checkNamespace(ctx, c, req); err != nil {
			return nil, err
		}
		// Last: a call refused for its credentials, role or namespace
		// spends nothing of the principal's budget.
		if err := a.limit(c); err != nil {
			return nil, err
		}
		return handler(NewContext(ctx, c.principal()), req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams (server
// reflection, Health.Watch): a stream is admitted when it opens, and each
// message a namespaced method receives is checked before the handler sees
// it.
func (a *Authenticator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if open(info.FullMethod) {
			return handler(srv, ss)
		}
		c, err := a.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		if err := a.limit(c); err != nil {
			return err
		}
		return handler(srv, &admittedStream{ServerStream: ss, ctx: NewContext(ss.Context(), c.principal()), a: a, c: c})
	}
}

type admittedStream struct {
	grpc.ServerStream
	ctx context.Context
	a   *Authenticator
	c   call
}

func (s *admittedStream) Context() context.Context { return s.ctx }

func (s *admittedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.a.checkNamespace(s.ctx, s.c, m)
}

// open reports whether a method needs no credentials: health checks, which
// load balancers and kubelets make without any.
func open(method string) bool { return strings.HasPrefix(method, healthPrefix) }

// call is an admitted call: who makes it and what its method requires.
type call struct {
	method string
	rule   rule
	p      *principal
	via    string
}

func (c call) principal() Principal { return c.p.context(c.via) }

// admit authenticates the caller and checks that its roles allow the
// method; it spends nothing of the rate limit (the caller does, once every
// check passed). Server reflection needs an authenticated caller and no
// particular role.
func (a *Authenticator) admit(ctx context.Context, method string) (call, error) {
	st := a.current()
	c := call{method: method}
	var reason, msg string
	c.p, c.via, reason, msg = authenticate(ctx, st)
	if reason != "" {
		return c, a.unauthenticated(ctx, method, reason, msg)
	}
	r, ok := a.rules[method]
	switch {
	case ok:
		c.rule = r
	case strings.HasPrefix(method, reflectionPrefix):
		c.rule = rule{name: "ServerReflectionInfo"}
	default:
		return c, a.denied(ctx, c, ReasonMethodDenied, "", fmt.Sprintf("method %s is open to no role", textclip.Quote(method, maxEcho)))
	}
	if c.rule.role != 0 && !c.p.cfg.Roles.Has(c.rule.role) {
		return c, a.denied(ctx, c, ReasonRoleDenied, "", fmt.Sprintf("principal %s (roles %s) may not call %s: it needs role %s",
			c.p.cfg.Name, c.p.cfg.Roles, c.rule.name, c.rule.role))
	}
	return c, nil
}

// authenticate finds the principal of the call's credentials: a bearer
// token, a verified client certificate, or both. reason is "" on success.
func authenticate(ctx context.Context, st *state) (p *principal, via, reason, msg string) {
	return st.authenticate(metadata.ValueFromIncomingContext(ctx, "authorization"), peerLeaf(ctx))
}

// authenticate finds the principal of authorization (the values of the
// authorization metadata or header) and leaf (the verified client
// certificate, or nil). A token that is sent must be known and unexpired,
// whatever the certificate says; a token and a certificate that both name
// a principal must name the same one. The certificate is read under the
// one kind of identity st.kind: a certificate that does not name a
// principal that way is refused, unless a valid token names the caller
// (the certificate then only carried the connection). reason is "" on
// success.
func (st *state) authenticate(authorization []string, leaf *x509.Certificate) (p *principal, via, reason, msg string) {
	var byToken *principal
	switch {
	case len(authorization) > 1:
		return nil, "", ReasonTokenMalformed, "send one authorization value, not several"
	case len(authorization) == 1:
		tok, ok := bearer(authorization[0])
		if !ok {
			return nil, "", ReasonTokenMalformed, `authorization must be "Bearer <token>"`
		}
		e := st.byToken(tok)
		if e == nil {
			return nil, "", ReasonTokenUnknown, "the bearer token is not in the auth file (revoked, mistyped, or meant for another server)"
		}
		if !e.expires.IsZero() && !st.clk.Now().Before(e.expires) {
			return nil, "", ReasonTokenUnknown, fmt.Sprintf("the bearer token expired at %s (its expires: in the auth file): use a current token",
				e.expires.UTC().Format(time.RFC3339))
		}
		byToken = e.p
	}
	var (
		byCert *principal
		id     string
		hasID  bool
	)
	if leaf != nil {
		if id, hasID = certIdentity(leaf, st.kind); hasID {
			byCert = st.identities[id]
		}
	}
	switch {
	case byToken != nil && byCert != nil && byToken != byCert:
		return nil, "", ReasonPrincipalConflict, fmt.Sprintf("the bearer token names principal %s but the client certificate names %s: send the credentials of one principal",
			byToken.cfg.Name, byCert.cfg.Name)
	case byToken != nil && byCert != nil:
		return byToken, "token+mtls", "", ""
	case byToken != nil:
		return byToken, "token", "", ""
	case byCert != nil:
		return byCert, "mtls", "", ""
	case leaf != nil && !hasID:
		return nil, "", ReasonIdentityUnknown, fmt.Sprintf("the client certificate has no %s, the one identity --tls-identity %s reads (other SANs and the CN are not read)",
			st.kind.noun(), st.kind)
	case leaf != nil:
		return nil, "", ReasonIdentityUnknown, fmt.Sprintf("no principal of the auth file lists the client certificate's %s %s (--tls-identity %s; other SANs and the CN are not read)",
			st.kind.describe(), textclip.Quote(id, maxEcho), st.kind)
	}
	return nil, "", ReasonCredentialsMissing, "authentication required: send authorization: Bearer <token>, or a client certificate signed by the server's client CA"
}

// bearer returns the token of an authorization value "Bearer <token>"
// (the scheme in any case, RFC 9110).
func bearer(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(v, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" || len(tok) > maxTokenBytes {
		return "", false
	}
	return tok, true
}

// limit spends one token of the principal's bucket, or refuses the call
// with RESOURCE_EXHAUSTED and how long until a token is back: the caller
// is told to come back rather than held, and a refused call costs its
// principal nothing.
func (a *Authenticator) limit(c call) error {
	delay, ok := a.spend(c.p, c.method)
	if ok {
		return nil
	}
	return withDetails(codes.ResourceExhausted,
		fmt.Sprintf("principal %s is over its rate limit %s: retry after %s", c.p.cfg.Name, c.p.cfg.Rate, delay),
		&errdetails.ErrorInfo{Reason: ReasonRateLimited, Domain: ErrorDomain, Metadata: map[string]string{"principal": c.p.cfg.Name}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
}

// spend takes one token of p's bucket; when it is empty it counts and logs
// the refusal and returns how long until a token is back.
func (a *Authenticator) spend(p *principal, what string) (time.Duration, bool) {
	lim := p.limiter
	if lim == nil {
		return 0, true
	}
	now := a.opts.Clock.Now()
	if lim.AllowN(now, 1) {
		return 0, true
	}
	// Read after the refusal, not reserved: a reservation would count the
	// concurrent refused calls and overstate the wait.
	delay := time.Duration((1 - lim.TokensAt(now)) / float64(lim.Limit()) * float64(time.Second))
	delay = max(delay, time.Millisecond)
	a.met.rateLimited.WithLabelValues(p.cfg.Name).Inc()
	a.opts.Logger.Debug("call refused: rate limit", "principal", p.cfg.Name, "method", what, "retry_after", delay.String())
	return delay, false
}

// checkNamespace refuses a namespaced request whose namespace the principal
// may not use (or that carries none).
func (a *Authenticator) checkNamespace(ctx context.Context, c call, req any) error {
	if !c.rule.namespaced {
		return nil
	}
	r, ok := req.(interface{ GetNamespace() string })
	if !ok {
		return a.denied(ctx, c, ReasonNamespaceDenied, "", fmt.Sprintf("%s carries no namespace", c.rule.name))
	}
	ns := r.GetNamespace()
	if c.p.allows(ns) {
		return nil
	}
	return a.denied(ctx, c, ReasonNamespaceDenied, ns, fmt.Sprintf("principal %s may not use namespace %s", c.p.cfg.Name, textclip.Quote(ns, maxEcho)))
}

// denied refuses an authenticated call: PERMISSION_DENIED, counted and
// logged with the principal (never its token, and the namespace clipped).
func (a *Authenticator) denied(ctx context.Context, c call, reason, ns, msg string) error {
	a.met.denied.WithLabelValues(reason).Inc()
	method := c.rule.name
	if method == "" {
		method = c.method // grpc-go runs interceptors for registered methods only
	}
	args := []any{"principal", c.p.cfg.Name, "via", c.via, "method", method, "reason", reason, "peer", peerAddr(ctx)}
	if ns != "" {
		short, cut := textclip.Prefix(ns, maxEcho)
		args = append(args, "namespace", short)
		if cut {
			args = append(args, "namespace_bytes", len(ns))
		}
	}
	a.opts.Logger.Warn("call refused", args...)
	return withDetails(codes.PermissionDenied, msg,
		&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: map[string]string{"principal": c.p.cfg.Name}})
}

// unauthenticated refuses a call without valid credentials. Anybody who can
// reach the port can make these, so their log lines are rate limited (the
// counter still sees every one).
func (a *Authenticator) unauthenticated(ctx context.Context, method, reason, msg string) error {
	a.met.denied.WithLabelValues(reason).Inc()
	if a.unauthLog.AllowN(a.opts.Clock.Now(), 1) {
		args := []any{"method", method, "reason", reason, "peer", peerAddr(ctx)}
		if n := a.suppressed.Swap(0); n > 0 {
			args = append(args, "suppressed_since_last", n)
		}
		a.opts.Logger.Warn("call refused: unauthenticated", args...)
	} else {
		a.suppressed.Add(1)
	}
	return withDetails(codes.Unauthenticated, msg, &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
}

func withDetails(c codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(c, msg)
	if with, err := st.WithDetails(details...); err == nil {
		st = with
	}
	return st.Err()
}
