package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// Claim decides p in one statement (queries/claim.sql) when it acquires, or
// when the row that decides it was committed before the statement began;
// otherwise a second statement reads the row and tiers.Decide answers from
// it. The stored reason tells an insert (NEW) from a takeover, so the
// statement needs no xmax = 0 trick. Non-acquiring outcomes are audited by a
// statement of their own. With batching on, the first statement is the
// group commit of batch.go, which decides absent keys and answers from
// stored rows; claim.sql takes over for anything else. A claim with an
// Entity is decided in a transaction of its own instead (entity.go): group
// commit stays with the claims that carry none.
func (s *Store) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	if p.Entity != nil {
		return s.claimEntity(ctx, p)
	}
	var res tiers.ClaimResult
	batched := s.batch != nil
	err := s.rounds(ctx, "claim", p.Key, p.Now, func() (bool, error) {
		var err error
		var done bool
		if batched {
			// The first round joins a group commit (batch.go); what it
			// leaves undecided goes on with claimRound.
			batched = false
			res, done, err = s.claimBatched(ctx, p)
			return done, err
		}
		res, done, err = s.claimRound(ctx, p)
		return done, err
	})
	if err != nil {
		return tiers.ClaimResult{}, err
	}
	res.ServedBy = tiers.TierDurable
	return res, nil
}

// claimRound is one attempt at deciding p; done is false when the record
// changed between its statements.
func (s *Store) claimRound(ctx context.Context, p tiers.ClaimParams) (res tiers.ClaimResult, done bool, err error) {
	res, _, done, err = claimOn(ctx, s.pool, p)
	return res, done, err
}

// claimOn is claimRound on q, the pool or a transaction (entity.go runs it
// inside the entity's). took reports that claim.sql acquired the key (a new
// record or a takeover), as opposed to an answer from the stored record.
func claimOn(ctx context.Context, q querier, p tiers.ClaimParams) (res tiers.ClaimResult, took, done bool, err error) {
	// A claim without an entity stores none: a takeover by it clears the
	// previous holder's, so its settle advances nothing.
	var lifecycle, entityID, eventType, to string
	if e := p.Entity; e != nil {
		lifecycle, entityID, eventType, to = e.Lifecycle, e.EntityID, e.EventType, e.To
	}
	var acquired bool
	row := q.QueryRow(ctx, claimSQL,
		p.Key.Namespace, p.Key.Provider, p.Key.Key, p.Now,
		p.Now.Add(p.Lease), p.Now.Add(p.TTL), p.PayloadHash, p.Holder, p.AttemptID, p.Salt, p.SecretHash,
		lifecycle, entityID, eventType, to, p.Start, p.Actor.Principal, p.Actor.Transport)
	rec, err := scanRecord(row, p.Key, &acquired)
	switch {
	case err == nil && acquired:
		return tiers.ClaimResult{Outcome: tiers.OutcomeAcquired, Reason: rec.Reason, Record: rec}, true, true, nil
	case err == nil:
		// Not acquirable as of the statement's snapshot.
		res, done, err = decideExisting(ctx, q, p, rec)
		return res, false, done, err
	case errors.Is(err, pgx.ErrNoRows):
		// The key exists but was committed after the statement's snapshot
		// (typically: the winner of a race on a new key). A new statement
		// sees it.
		cur, err := getOn(ctx, q, p.Key)
		if errors.Is(err, tiers.ErrNotFound) {
			return tiers.ClaimResult{}, false, false, nil // pruned meanwhile: claim again
		}
		if err != nil {
			return tiers.ClaimResult{}, false, false, err
		}
		res, done, err = decideExisting(ctx, q, p, cur)
		return res, false, done, err
	default:
		return tiers.ClaimResult{}, false, false, err
	}
}

// decideExisting answers p from cur, a version of the record that the claim
// statement did not take over. Decide may still find cur acquirable when the
// record changed after the statement looked at it (released meanwhile, or
// cur is an older snapshot than the version the statement locked): then the
// claim must be tried again, never answered from cur. Otherwise the answer
// writes no record and holds as of the moment cur was read.
func decideExisting(ctx context.Context, q querier, p tiers.ClaimParams, cur tiers.Record) (tiers.ClaimResult, bool, error) {
	res, _, write := tiers.Decide(&cur, p)
	if write {
		return tiers.ClaimResult{}, false, nil
	}
	r := res.Record
	if _, err := q.Exec(ctx, auditClaimSQL, p.Now, p.Key.Namespace, p.Key.Provider, p.Key.Key,
		int16(res.Outcome), int16(res.Reason), int16(r.State), int64(r.Token), int64(r.Version),
		p.Holder, p.AttemptID, p.PayloadHash, p.Actor.Principal, p.Actor.Transport); err != nil {
		return tiers.ClaimResult{}, false, err
	}
	return res, true, nil
}
