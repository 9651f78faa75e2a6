package service

import (
	"context"

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/tiers"
)

// actorOf is who made the call of ctx, as its audit row and log line name
// it: the principal the auth interceptor put in ctx ("" for the anonymous
// caller of a server without authentication) and the transport the call
// came by (auth.Transport). Both come from the server's context, never
// from the request, so a caller cannot write another name into the audit
// log.
func actorOf(ctx context.Context) tiers.Actor {
	return tiers.Actor{Principal: auth.FromContext(ctx).Name, Transport: auth.Transport(ctx)}
}
