package sqlite

import (
	"context"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

var _ tiers.EntityPruner = (*Store)(nil)

// CountPrunable returns how many rows of each kind Prune and PruneEntities
// would delete now with cutoff (claimd prune --dry-run). It reads through
// the read-only pool, in one statement: one snapshot.
func (s *Store) CountPrunable(ctx context.Context, cutoff time.Time) (tiers.Pruned, error) {
	if s.closed.Load() {
		return tiers.Pruned{}, tiers.Unavailable("sqlite", errClosed)
	}
	var n tiers.Pruned
	err := s.r.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM claims WHERE window_expires_at < ?1),
		(SELECT count(*) FROM entities WHERE expires_at < ?1),
		(SELECT count(*) FROM entity_events v JOIN entities e USING (namespace, provider, lifecycle, entity_id)
			WHERE e.expires_at < ?1),
		(SELECT count(*) FROM deferrals WHERE expires_at < ?1)`, ceilMicros(cutoff)).
		Scan(&n.Claims, &n.Entities, &n.EntityEvents, &n.Deferrals)
	if err != nil {
		return tiers.Pruned{}, translate(ctx, "count prunable", err)
	}
	return n, nil
}

// CountAuditBefore returns how many audit rows PruneAudit(ctx, before, …)
// would delete now.
func (s *Store) CountAuditBefore(ctx context.Context, before time.Time) (int64, error) {
	return s.count(ctx, "count audit", `SELECT count(*) FROM audit_log WHERE at < ?`, before)
}

func (s *Store) count(ctx context.Context, op, query string, before time.Time) (int64, error) {
	if s.closed.Load() {
		return 0, tiers.Unavailable("sqlite", errClosed)
	}
	var n int64
	if err := s.r.QueryRowContext(ctx, query, ceilMicros(before)).Scan(&n); err != nil {
		return 0, translate(ctx, op, err)
	}
	return n, nil
}
