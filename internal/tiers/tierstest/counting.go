package tierstest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/claimd/claimd/internal/tiers"
)

// CountingStore wraps a Store and counts the writes that reach it (Claim,
// Transition, Renew, Release), so that a test of a layer above the stores
// (validation, authentication, a transcoding gateway) can prove that a call
// it refused wrote nothing.
type CountingStore struct {
	tiers.Store
	Writes atomic.Int64
}

// Claim counts the claim and passes it on.
func (s *CountingStore) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	s.Writes.Add(1)
	return s.Store.Claim(ctx, p)
}

// Transition counts the transition and passes it on.
func (s *CountingStore) Transition(ctx context.Context, p tiers.TransitionParams) (tiers.Record, bool, error) {
	s.Writes.Add(1)
	return s.Store.Transition(ctx, p)
}

// Renew counts the renewal and passes it on.
func (s *CountingStore) Renew(ctx context.Context, p tiers.RenewParams) (tiers.Record, error) {
	s.Writes.Add(1)
	return s.Store.Renew(ctx, p)
}

// Release counts the release and passes it on.
func (s *CountingStore) Release(ctx context.Context, p tiers.ReleaseParams) (tiers.Record, error) {
	s.Writes.Add(1)
	return s.Store.Release(ctx, p)
}

// ListClaims passes the read on to the wrapped store's tiers.Inspector
// (an error when it has none): reads are not counted.
func (s *CountingStore) ListClaims(ctx context.Context, f tiers.ClaimFilter, pg tiers.Page) ([]tiers.Record, string, error) {
	in, ok := s.Store.(tiers.Inspector)
	if !ok {
		return nil, "", errNoInspector
	}
	return in.ListClaims(ctx, f, pg)
}

// ListAudit passes the read on to the wrapped store's tiers.Inspector.
func (s *CountingStore) ListAudit(ctx context.Context, k tiers.Key, pg tiers.Page) ([]tiers.AuditEntry, string, error) {
	in, ok := s.Store.(tiers.Inspector)
	if !ok {
		return nil, "", errNoInspector
	}
	return in.ListAudit(ctx, k, pg)
}

var errNoInspector = errors.New("tierstest: the wrapped store lists no claims or audit")
