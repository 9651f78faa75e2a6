package sqlite

import (
	"context"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// CountPrunable returns how many records Prune(ctx, cutoff, …) would delete
// now (claimd prune --dry-run). It reads through the read-only pool.
func (s *Store) CountPrunable(ctx context.Context, cutoff time.Time) (int64, error) {
	return s.count(ctx, "count prunable", `SELECT count(*) FROM claims WHERE window_expires_at < ?`, cutoff)
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
