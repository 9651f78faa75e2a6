package postgres

import (
	"context"
	"time"
)

// Prune deletes up to limit records whose window ended before cutoff, in
// one bounded statement; a caller loops until it returns less than limit.
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
