// Package auth authenticates callers and authorizes them per namespace and
// role. The rest of the server sees only the Principal it puts in a call's
// context.
package auth

import "context"

// Principal is an authenticated caller: a token's name or a client
// certificate's identity. The zero Principal is the anonymous caller of a
// server that runs without authentication (loopback only).
type Principal struct {
	// Name identifies the caller in logs, metrics and ownership checks.
	Name string
	// Roles are the principal's roles in the auth file.
	Roles Roles
	// Via says how the caller proved it: "token" or "mtls" ("" when
	// anonymous).
	Via string
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal of the call, or the anonymous (zero)
// Principal when the server authenticates nobody.
func FromContext(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}
