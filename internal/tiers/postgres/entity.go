package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// Entity lifecycles (tiers/entity.go) on PostgreSQL.
//
// A claim that carries an Entity runs in a transaction of its own, not in
// group commit: it locks the entity's row first (entity_lock.sql, creating
// the entity when it was never seen), then runs claim.sql after a
// savepoint. Only when claim.sql acquired is the claim ordered: the entity
// proceeds, or the savepoint is rolled back (the acquisition and its audit
// row vanish, the record stays as it was) and the event's deferral row is
// written instead. A claim that does not proceed leaves behind no entity
// row that no claim ever acquired (entity_forget.sql): a deferral alone
// creates no entity.
//
// Every write that touches an entity takes the entity's lock before the
// record's (a settle, a failure or a release of a record that carries an
// entity reads the record, then locks the entity, then writes the record:
// fenced.go), so a claim and a settle of one entity never wait on each
// other in opposite orders.
//
// Under the entity's lock, two claims of one entity are decided one after
// the other, and the holder can neither settle nor free it meanwhile: of
// two events arriving in one state, exactly one proceeds, and it settles
// from that state.

var (
	entityLockSQL         = loadQuery("entity_lock")
	entityHolderSQL       = loadQuery("entity_holder")
	entityHoldSQL         = loadQuery("entity_hold")
	deferralSQL           = loadQuery("deferral")
	entityLockExistingSQL = loadQuery("entity_lock_existing")
	entitySettleSQL       = loadQuery("entity_settle")
	entityFreeSQL         = loadQuery("entity_free")
	entityForgetSQL       = loadQuery("entity_forget")
	entityGetSQL          = loadQuery("entity_get")
	deferredListSQL       = loadQuery("deferred_list")
	deferredCountSQL      = loadQuery("deferred_count")
	pruneEntitiesSQL      = loadQuery("prune_entities")
)

var _ tiers.Entities = (*Store)(nil)

// claimEntity decides a claim with p.Entity (see the top of this file).
func (s *Store) claimEntity(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	var res tiers.ClaimResult
	err := s.rounds(ctx, "claim", p.Key, p.Now, func() (done bool, err error) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			res, done, err = claimEntityTx(ctx, tx, p)
			if !done && err == nil {
				return errRetry // roll back, decide again
			}
			return err
		})
		if errors.Is(err, errRetry) {
			return false, nil
		}
		return done, err
	})
	if err != nil {
		return tiers.ClaimResult{}, err
	}
	res.ServedBy = tiers.TierDurable
	return res, nil
}

// errRetry rolls back a transaction whose decision must be taken again.
var errRetry = errors.New("postgres: decide again")

// claimEntityTx is one attempt at claimEntity in tx.
func claimEntityTx(ctx context.Context, tx pgx.Tx, p tiers.ClaimParams) (tiers.ClaimResult, bool, error) {
	e := p.Entity
	window := p.Now.Add(p.TTL)
	var (
		state, busyKey string
		busyToken      int64
	)
	if err := tx.QueryRow(ctx, entityLockSQL, p.Key.Namespace, p.Key.Provider, e.Lifecycle, e.EntityID,
		e.Initial, p.Now, window).Scan(&state, &busyKey, &busyToken); err != nil {
		return tiers.ClaimResult{}, false, err
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT claim`); err != nil {
		return tiers.ClaimResult{}, false, err
	}
	res, took, done, err := claimOn(ctx, tx, p)
	if err != nil || !done {
		return tiers.ClaimResult{}, done, err
	}
	if !took {
		// DUPLICATE, IN_PROGRESS, PAYLOAD_MISMATCH or the repeated
		// ACQUIRED of an attempt (which holds the entity already): the
		// key's own answer.
		if err := forgetEntity(ctx, tx, p, state); err != nil {
			return tiers.ClaimResult{}, false, err
		}
		res.Entity = &tiers.EntityPosition{State: state}
		return res, true, nil
	}

	// The key was acquired: order it within its entity.
	var busyWith string
	if busyKey != "" && busyKey != p.Key.Key { // our own key's old token was just taken over
		live, eventType, err := holderLive(ctx, tx, p, busyKey, busyToken)
		if err != nil {
			return tiers.ClaimResult{}, false, err
		}
		if live {
			busyWith = cmp.Or(eventType, busyKey)
		}
	}
	outcome := e.Order(state, busyWith != "")
	if outcome == tiers.OutcomeAcquired {
		if _, err := tx.Exec(ctx, entityHoldSQL, p.Key.Namespace, p.Key.Provider, e.Lifecycle, e.EntityID,
			p.Key.Key, int64(res.Record.Token)); err != nil {
			return tiers.ClaimResult{}, false, err
		}
		res.Entity = &tiers.EntityPosition{State: state}
		return res, true, nil
	}

	// DEFERRED or SUPERSEDED: nothing is acquired. The record goes back to
	// what it was (or to nothing), and the delivery is counted instead.
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT claim`); err != nil {
		return tiers.ClaimResult{}, false, err
	}
	var cur *tiers.Record // the key's record, unchanged; nil when it has none
	if res.Reason != tiers.ReasonNew {
		// A takeover rolled back: the answer carries the key's record as
		// it stands.
		rec, err := getOn(ctx, tx, p.Key)
		switch {
		case errors.Is(err, tiers.ErrNotFound): // pruned meanwhile
		case err != nil:
			return tiers.ClaimResult{}, false, err
		default:
			cur = &rec
		}
	}
	var count int32
	if err := tx.QueryRow(ctx, deferralSQL, p.Key.Namespace, p.Key.Provider, p.Key.Key,
		e.Lifecycle, e.EntityID, e.EventType, outcome == tiers.OutcomeSuperseded, p.Now,
		e.Awaiting(), window, e.Initial).Scan(&count); err != nil {
		return tiers.ClaimResult{}, false, err
	}
	ans := tiers.Refused(outcome, p.Key, cur, state, busyWith, uint32(count))
	if err := forgetEntity(ctx, tx, p, state); err != nil {
		return tiers.ClaimResult{}, false, err
	}
	// The audit row names the key's record as it stands, unchanged (state
	// and token 0 when it has none), as the SQLite tier's does.
	if _, err := tx.Exec(ctx, auditClaimSQL, p.Now, p.Key.Namespace, p.Key.Provider, p.Key.Key,
		int16(outcome), int16(0), int16(ans.Record.State), int64(ans.Record.Token), int64(ans.Record.Version), p.Holder, p.AttemptID, p.PayloadHash,
		p.Actor.Principal, p.Actor.Transport); err != nil {
		return tiers.ClaimResult{}, false, err
	}
	return ans, true, nil
}

// forgetEntity deletes p's entity, in state, when no claim ever acquired
// it (entity_forget.sql). An entity out of its initial state had an event
// applied: the statement is skipped.
func forgetEntity(ctx context.Context, tx pgx.Tx, p tiers.ClaimParams, state string) error {
	if state != p.Entity.Initial {
		return nil
	}
	_, err := tx.Exec(ctx, entityForgetSQL, p.Key.Namespace, p.Key.Provider, p.Entity.Lifecycle, p.Entity.EntityID)
	return err
}

// holderLive reports whether the claim of key holding an entity with token
// still holds it at p.Now: its record has that token, is neither released
// nor terminal, and its lease runs. A holder whose lease ran out holds the
// entity no more, whether or not its key was taken over since.
func holderLive(ctx context.Context, tx pgx.Tx, p tiers.ClaimParams, key string, token int64) (live bool, eventType string, err error) {
	var (
		curToken int64
		released bool
		state    int16
		lease    time.Time
	)
	err = tx.QueryRow(ctx, entityHolderSQL, p.Key.Namespace, p.Key.Provider, key).
		Scan(&curToken, &released, &state, &lease, &eventType)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil // pruned: it holds nothing
	}
	if err != nil {
		return false, "", err
	}
	h := tiers.Record{Token: uint64(curToken), Released: released, State: tiers.State(state), LeaseExpiresAt: lease}
	return tiers.HoldLive(h, uint64(token), p.Now), eventType, nil
}

// entityWrite runs a terminal write (Transition to SETTLED or FAILED,
// Release) of the record of k, read as cur, which carries an entity event:
// under the entity's lock, write runs the record's statement; then a settle
// advances the entity (entity_settle.sql) and a failure or release frees it
// if this record held it. ok is false when write matched nothing (the
// record changed since cur: the caller reads it again) or the record now
// names another entity.
//
// A settle of a record that no longer holds its entity (its lease ran out
// and another event took the entity) is refused with ErrStaleToken and
// writes nothing: the entity must never advance from a state its holder
// did not see.
//
// Once begun, the transaction runs to its end on ctx's deadline without
// its cancellation, like every fenced write (sending): write gets that
// context.
func (s *Store) entityWrite(ctx context.Context, k tiers.Key, cur tiers.Record, now time.Time, settle bool,
	write func(ctx context.Context, tx pgx.Tx) (tiers.Record, bool, error),
) (rec tiers.Record, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return tiers.Record{}, false, err
	}
	ctx, cancel := sending(ctx)
	defer cancel()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			state, busyKey string
			busyToken      int64
			found          = true
		)
		err := tx.QueryRow(ctx, entityLockExistingSQL, k.Namespace, k.Provider, cur.Lifecycle, cur.EntityID).
			Scan(&state, &busyKey, &busyToken)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
		} else if err != nil {
			return err
		}
		r, wrote, err := write(ctx, tx)
		if err != nil {
			return err
		}
		if !wrote || r.Lifecycle != cur.Lifecycle || r.EntityID != cur.EntityID {
			return errRetry
		}
		held := found && busyKey == k.Key && busyToken == int64(r.Token)
		switch {
		case settle && !held:
			return refusal{fmt.Errorf("%w: token %d no longer holds entity %s of %s (its lease ran out and another event took it)",
				tiers.ErrStaleToken, r.Token, cur.EntityID, cur.Lifecycle)}
		case settle:
			s.atStep("entity-settle-before", k)
			// The new version is returned but not needed: Scan(nil) skips it
			// and still fails when no row comes back.
			if err := tx.QueryRow(ctx, entitySettleSQL, k.Namespace, k.Provider, cur.Lifecycle, cur.EntityID,
				k.Key, int64(r.Token), now, state).Scan(nil); err != nil {
				return err // ErrNoRows cannot happen: the holder was checked under the lock
			}
			s.atStep("entity-settle-after", k)
		case held:
			if _, err := tx.Exec(ctx, entityFreeSQL, k.Namespace, k.Provider, cur.Lifecycle, cur.EntityID,
				k.Key, int64(r.Token)); err != nil {
				return err
			}
		}
		rec, ok = r, true
		return nil
	})
	if errors.Is(err, errRetry) {
		return tiers.Record{}, false, nil
	}
	return rec, ok, err
}

// atStep calls Config.Step, if set.
func (s *Store) atStep(step string, k tiers.Key) {
	if s.step != nil {
		s.step(step, k)
	}
}

// refusal carries an answer of the state machine out of a write's
// transaction (rolled back): fenced returns it as the call's verdict, not
// as a database error.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// GetEntity reads an entity and its applied events, oldest first. BusyWith
// is the key that last acquired the entity and has not settled, failed or
// released it yet, even when that holder's lease has run out since: a store
// read carries no time to judge a lease by (a claim does, and orders by it).
func (s *Store) GetEntity(ctx context.Context, k tiers.EntityKey) (tiers.Entity, error) {
	rows, err := s.pool.Query(ctx, entityGetSQL, k.Namespace, k.Provider, k.Lifecycle, k.EntityID)
	if err != nil {
		return tiers.Entity{}, fail(ctx, "get entity", err)
	}
	ent := tiers.Entity{EntityKey: k}
	found := false
	for rows.Next() {
		var (
			version   int64
			eventType *string
			key       *string
			from, to  *string
			token     *int64
			appliedAt *time.Time
		)
		if err := rows.Scan(&ent.State, &version, &ent.UpdatedAt, &ent.BusyWith,
			&eventType, &key, &from, &to, &token, &appliedAt); err != nil {
			rows.Close()
			return tiers.Entity{}, fail(ctx, "get entity", err)
		}
		found = true
		ent.Version = uint64(version)
		ent.UpdatedAt = ent.UpdatedAt.UTC()
		if eventType != nil {
			ent.Applied = append(ent.Applied, tiers.AppliedEvent{
				EventType: *eventType, Key: *key, From: *from, To: *to,
				Token: uint64(*token), AppliedAt: appliedAt.UTC(),
			})
		}
	}
	if err := rows.Err(); err != nil {
		return tiers.Entity{}, fail(ctx, "get entity", err)
	}
	if !found {
		return tiers.Entity{}, fmt.Errorf("postgres: %s/%s: %w", k.Lifecycle, k.EntityID, tiers.ErrEntityNotFound)
	}
	return ent, nil
}

// ListDeferred lists deferred and superseded events, newest LastSeen first,
// a page at a time. The cursor is opaque to callers: the keyset position
// (last_seen_at, key) of the page's last row.
func (s *Store) ListDeferred(ctx context.Context, p tiers.ListDeferredParams) ([]tiers.DeferredEvent, string, error) {
	limit := p.Limit()
	var (
		afterAt  *time.Time
		afterKey string
	)
	if p.After != "" {
		pos, err := tiers.DecodeDeferredCursor(p)
		if err != nil {
			return nil, "", err
		}
		afterAt, afterKey = &pos.LastSeen, pos.Key
	}
	rows, err := s.pool.Query(ctx, deferredListSQL, p.Namespace, p.Provider, p.EntityID, afterAt, afterKey, limit+1)
	if err != nil {
		return nil, "", fail(ctx, "list deferred", err)
	}
	defer rows.Close()
	events, next, err := tiers.ScanPage(rows, limit, func() (tiers.DeferredEvent, error) { return scanDeferred(rows) }, p.Cursor)
	return events, next, fail(ctx, "list deferred", err)
}

// scanDeferred reads a row of deferred_list.sql.
func scanDeferred(rows pgx.Rows) (tiers.DeferredEvent, error) {
	var (
		d     tiers.DeferredEvent
		count int32
	)
	err := rows.Scan(&d.Lifecycle, &d.EntityID, &d.EventType, &d.Key, &d.Superseded, &count,
		&d.FirstSeen, &d.LastSeen, &d.Awaiting, &d.EntityState, &d.Applied)
	d.Count = uint32(count)
	d.FirstSeen, d.LastSeen = d.FirstSeen.UTC(), d.LastSeen.UTC()
	return d, err
}

// CountDeferred counts the deferred events not applied of the providers in
// cutoffs, and of them the overdue and the lost ones, in one statement.
func (s *Store) CountDeferred(ctx context.Context, cutoffs map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error) {
	providers := make([]string, 0, len(cutoffs))
	overdue := make([]time.Time, 0, len(cutoffs))
	lost := make([]time.Time, 0, len(cutoffs))
	for p, c := range cutoffs {
		providers = append(providers, p)
		overdue = append(overdue, c.Overdue)
		lost = append(lost, c.Lost)
	}
	var d, o, l int64
	if err := s.pool.QueryRow(ctx, deferredCountSQL, providers, overdue, lost).Scan(&d, &o, &l); err != nil {
		return tiers.DeferredCounts{}, fail(ctx, "count deferred", err)
	}
	return tiers.DeferredCounts{Deferred: int(d), Overdue: int(o), Lost: int(l)}, nil
}
