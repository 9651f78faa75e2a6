package postgres

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// Transition, Renew and Release share one shape: a conditional UPDATE whose
// WHERE clause is the success condition of the matching tiers.Apply*
// function (token, secret hash, released, state), writing its audit row in
// the same statement. When it updates nothing, a plain SELECT reads the row
// and the Apply function names the answer: ErrNotFound, ErrStaleToken,
// ErrNotOwner, a *tiers.TransitionError, or the no-op repeat. Should Apply
// find the change allowed after all, the row changed in between and the
// UPDATE runs again.
//
// A terminal transition or a release of a record that carries an entity
// event must lock the entity first (entity.go). Its plain UPDATE matches
// nothing (the statements say so in SQL), the row read to explain the miss
// names the entity, and the UPDATE runs again inside entityWrite's
// transaction. Records without an entity, most of them, pay nothing for it.

// fenceable reports whether token and secretHash can match a record: tokens
// are stored as bigint, so a larger one was never issued (pgx could not even
// encode it), and a stored secret hash is always SecretHashBytes long (a
// CHECK constraint), so no other length can be its owner's. Anything else
// skips the UPDATE and is refused by the Apply function: stale, or not the
// owner.
func fenceable(token uint64, secretHash []byte) bool {
	return token <= math.MaxInt64 && len(secretHash) == tiers.SecretHashBytes
}

// fenced runs a fenced statement: update tries the UPDATE and reports
// whether it wrote rec, or returns a refusal (the state machine's answer
// found in its transaction); apply explains a miss from the current row,
// and reports changed when the UPDATE would now succeed.
func (s *Store) fenced(ctx context.Context, op string, k tiers.Key, now time.Time,
	update func() (rec tiers.Record, ok bool, err error),
	apply func(cur tiers.Record) (rec tiers.Record, changed bool, err error),
) (rec tiers.Record, changed bool, err error) {
	var verdict error // the state machine's answer, kept apart from database errors
	dbErr := s.rounds(ctx, op, k, now, func() (bool, error) {
		r, ok, err := update()
		var ref refusal
		if errors.As(err, &ref) {
			rec, changed, verdict = tiers.Record{}, false, ref.err
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if ok {
			rec, changed = r, true
			return true, nil
		}
		cur, err := s.get(ctx, k)
		if errors.Is(err, tiers.ErrNotFound) {
			rec, verdict = tiers.Record{}, err
			return true, nil
		}
		if err != nil {
			return false, err
		}
		r, ch, err := apply(cur)
		if err == nil && ch {
			return false, nil // allowed now: the row changed after the UPDATE; update again
		}
		rec, changed, verdict = r, false, err
		return true, nil
	})
	if dbErr != nil {
		return tiers.Record{}, false, dbErr
	}
	return rec, changed, verdict
}

// updateRowOn runs a fenced UPDATE … RETURNING statement on q: ok is false
// when it matched no row.
func updateRowOn(ctx context.Context, q querier, k tiers.Key, sql string, args ...any) (tiers.Record, bool, error) {
	rec, err := scanRecord(q.QueryRow(ctx, sql, args...), k)
	if errors.Is(err, pgx.ErrNoRows) {
		return tiers.Record{}, false, nil
	}
	return rec, err == nil, err
}

// Transition applies p.To when p.Token is current and the state machine
// allows it from the current state.
func (s *Store) Transition(ctx context.Context, p tiers.TransitionParams) (tiers.Record, bool, error) {
	var lease *time.Time
	if !p.To.Terminal() && p.Lease > 0 {
		l := p.Now.Add(p.Lease)
		lease = &l
	}
	row := transitionRow{key: p.Key, now: p.Now, to: p.To, result: p.Result, lease: lease,
		token: int64(p.Token), from: tiers.AllowedFrom(p.To), secretHash: p.SecretHash, effectRecovered: p.EffectRecovered, actor: p.Actor}
	var entityRec *tiers.Record // the record as read, when the write must lock its entity first
	return s.fenced(ctx, "transition", p.Key, p.Now,
		func() (tiers.Record, bool, error) {
			if !fenceable(p.Token, p.SecretHash) || len(row.from) == 0 {
				return tiers.Record{}, false, nil
			}
			if entityRec != nil {
				return s.entityWrite(ctx, p.Key, *entityRec, p.Now, p.To == tiers.StateSettled,
					func(ctx context.Context, tx pgx.Tx) (tiers.Record, bool, error) {
						return updateRowOn(ctx, tx, p.Key, transitionSQL, row.args(true)...)
					})
			}
			return s.updateTransition(ctx, row)
		},
		func(cur tiers.Record) (tiers.Record, bool, error) {
			next, changed, err := tiers.ApplyTransition(cur, p)
			if changed && cur.Lifecycle != "" && p.To.Terminal() {
				entityRec = &cur
			}
			return next, changed, err
		})
}

// Renew sets the lease of the current, unreleased holder to p.Now+p.Lease.
func (s *Store) Renew(ctx context.Context, p tiers.RenewParams) (tiers.Record, error) {
	rec, _, err := s.fenced(ctx, "renew", p.Key, p.Now,
		func() (tiers.Record, bool, error) {
			if !fenceable(p.Token, p.SecretHash) {
				return tiers.Record{}, false, nil
			}
			return s.updateRow(ctx, p.Key, renewSQL,
				p.Key.Namespace, p.Key.Provider, p.Key.Key, p.Now, p.Now.Add(p.Lease), int64(p.Token), p.SecretHash,
				p.Actor.Principal, p.Actor.Transport)
		},
		func(cur tiers.Record) (tiers.Record, bool, error) {
			next, err := tiers.ApplyRenew(cur, p)
			return next, err == nil, err
		})
	return rec, err
}

// Release marks the record released on behalf of the holder of p.Token.
func (s *Store) Release(ctx context.Context, p tiers.ReleaseParams) (tiers.Record, error) {
	var entityRec *tiers.Record // the record as read, when the write must lock its entity first
	rec, _, err := s.fenced(ctx, "release", p.Key, p.Now,
		func() (tiers.Record, bool, error) {
			if !fenceable(p.Token, p.SecretHash) {
				return tiers.Record{}, false, nil
			}
			args := func(entityLocked bool) []any {
				return []any{p.Key.Namespace, p.Key.Provider, p.Key.Key, p.Now, int64(p.Token), p.SecretHash, entityLocked,
					p.Actor.Principal, p.Actor.Transport}
			}
			if entityRec != nil {
				return s.entityWrite(ctx, p.Key, *entityRec, p.Now, false,
					func(ctx context.Context, tx pgx.Tx) (tiers.Record, bool, error) {
						return updateRowOn(ctx, tx, p.Key, releaseSQL, args(true)...)
					})
			}
			return s.updateRow(ctx, p.Key, releaseSQL, args(false)...)
		},
		func(cur tiers.Record) (tiers.Record, bool, error) {
			next, changed, err := tiers.ApplyRelease(cur, p)
			if changed && cur.Lifecycle != "" {
				entityRec = &cur
			}
			return next, changed, err
		})
	return rec, err
}
