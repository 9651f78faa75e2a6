package postgres

import (
	"context"
	"time"
)

// Prune deletes up to limit records whose window ended before cutoff, in
// one bounded statement; a caller loops until it returns less than limit.
//
// The same call deletes, by the same cutoff and up to limit each, the
// entities and deferral rows whose last window ended before it
// (prune_entities.sql): an entity, with its applied events, lives as long
// as any claim or deferral of it is within its dedup window, so that a
// redelivery is still ordered against the state its earlier events reached;
// a deferral row lives until its last delivery's window ends, which is
// past the provider's retry horizon (ListDeferred can report it lost). The
// count returned is the records' only: those rows are few beside them, and
// what one call leaves the next pass deletes.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, pruneSQL, cutoff, limit)
	if err != nil {
		return 0, fail(ctx, "prune", err)
	}
	if _, err := s.pool.Exec(ctx, pruneEntitiesSQL, cutoff, limit); err != nil {
		return 0, fail(ctx, "prune entities", err)
	}
	return int(tag.RowsAffected()), nil
}
