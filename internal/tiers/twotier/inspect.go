package twotier

import (
	"context"
	"errors"

	"github.com/claimd/claimd/internal/tiers"
)

var _ tiers.Inspector = (*Store)(nil)

// errNoInspector answers the Inspector reads over a durable tier that has
// none.
var errNoInspector = errors.New("twotier: the durable tier lists no claims or audit")

// inspector is the durable tier's tiers.Inspector: records and their audit
// log are read from the source of truth only, never from the fast tier.
func (s *Store) inspector() (tiers.Inspector, error) {
	in, ok := s.durable.(tiers.Inspector)
	if !ok {
		return nil, errNoInspector
	}
	return in, nil
}

// ListClaims lists the durable tier's records.
func (s *Store) ListClaims(ctx context.Context, f tiers.ClaimFilter, pg tiers.Page) ([]tiers.Record, string, error) {
	in, err := s.inspector()
	if err != nil {
		return nil, "", err
	}
	return in.ListClaims(ctx, f, pg)
}

// ListAudit lists the durable tier's audit log of k.
func (s *Store) ListAudit(ctx context.Context, k tiers.Key, pg tiers.Page) ([]tiers.AuditEntry, string, error) {
	in, err := s.inspector()
	if err != nil {
		return nil, "", err
	}
	return in.ListAudit(ctx, k, pg)
}
