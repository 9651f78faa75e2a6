package postgres

import (
	"context"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

var _ tiers.EntityPruner = (*Store)(nil)

// Prune deletes up to limit records whose window ended before cutoff, in
// one bounded statement; a caller loops until it returns less than limit.
// Entities and deferral rows go with PruneEntities.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, pruneSQL, cutoff, limit)
	if err != nil {
		return 0, fail(ctx, "prune", err)
	}
	return int(tag.RowsAffected()), nil
}

// PruneEntities deletes, by the same cutoff as Prune and up to limit each,
// the entities and deferral rows whose last window ended before it, in one
// statement (prune_entities.sql): an entity, with its applied events, lives
// as long as any claim or deferral of it is within its dedup window, so
// that a redelivery is still ordered against the state its earlier events
// reached; a deferral row lives until its last delivery's window ends,
// which is past the provider's retry horizon (ListDeferred can report it
// lost).
func (s *Store) PruneEntities(ctx context.Context, cutoff time.Time, limit int) (tiers.Pruned, error) {
	var n tiers.Pruned
	if limit <= 0 {
		return n, nil
	}
	if err := s.pool.QueryRow(ctx, pruneEntitiesSQL, cutoff, limit).Scan(&n.Entities, &n.EntityEvents, &n.Deferrals); err != nil {
		return tiers.Pruned{}, fail(ctx, "prune entities", err)
	}
	return n, nil
}

// CountPrunable returns how many rows of each kind Prune and PruneEntities
// would delete now with cutoff (claimd prune --dry-run). It walks the
// expiry indexes.
func (s *Store) CountPrunable(ctx context.Context, cutoff time.Time) (tiers.Pruned, error) {
	var n tiers.Pruned
	if err := s.pool.QueryRow(ctx, countPrunableSQL, cutoff).Scan(&n.Claims, &n.Entities, &n.EntityEvents, &n.Deferrals); err != nil {
		return tiers.Pruned{}, fail(ctx, "count prunable", err)
	}
	return n, nil
}
