package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimd/claimd/internal/tiers"
)

// maxRounds bounds the statements of one call when the record keeps changing
// between them: a release, prune or takeover committing between the
// decision's statement and the read that explains it. Each extra round is
// caused by another writer's commit on the same key, so running out means
// sustained contention on it; the caller then gets an error wrapping
// tiers.ErrUnavailable, never a guess.
const maxRounds = 8

// rounds runs round until it reports done, at most maxRounds times. round
// returns done=false when the record changed between two of its statements
// and the decision must be taken again; its error is a database error (the
// answers of the state machine, errors included, are the caller's to keep).
// A unique violation is another claim winning a race: decide again. A write
// whose month has no audit partition creates the partition, once, and
// retries. A statement that failed before anything was sent
// (pgconn.SafeToRetry: a connection found closed or broken before use) is
// sent again on another connection (outage.go): nothing of it reached the
// server.
func (s *Store) rounds(ctx context.Context, op string, k tiers.Key, now time.Time, round func() (done bool, err error)) error {
	healed := false
	for range maxRounds {
		done, err := round()
		switch {
		case err == nil && done:
			return nil
		case err == nil, isUniqueViolation(err):
		case pgconn.SafeToRetry(err) && ctx.Err() == nil:
		case isMissingAuditPartition(err) && !healed:
			healed = true
			if err := s.EnsureAuditPartitions(ctx, now, 0); err != nil {
				return err
			}
		default:
			return fail(ctx, op+" "+k.String(), err)
		}
	}
	// Nothing was written by this call: retrying later is safe, so this is
	// reported like a database that did not answer in time.
	return tiers.Unavailable("postgres", fmt.Errorf("%s %s: the record changed under each of %d attempts to decide", op, k, maxRounds))
}
