package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// Claim decides p with tiers.Decide against the stored record and, for a
// claim that carries an Entity and would acquire, orders it against its
// entity (entity.go); it stores the decided record, the entity's hold or the
// event's deferral, and an audit row, all in one transaction.
func (s *Store) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	var res tiers.ClaimResult
	err := s.write(ctx, "claim", func(t *txn) error {
		cur, curTo, err := t.read(p.Key)
		if err != nil {
			return err
		}
		var (
			next  tiers.Record
			write bool
		)
		res, next, write = tiers.Decide(cur, p)
		entityTo := curTo
		if write {
			entityTo = ""
			next.Lifecycle, next.EntityID, next.EventType = "", "", ""
			if p.Entity != nil {
				next.Lifecycle, next.EntityID, next.EventType = p.Entity.Lifecycle, p.Entity.EntityID, p.Entity.EventType
				entityTo = p.Entity.To
			}
		}
		if p.Entity != nil && res.Outcome == tiers.OutcomeAcquired {
			if res, write, err = t.order(p, cur, res, write); err != nil {
				return err
			}
		}
		if write {
			next = canonical(next)
			if err := t.put(&next, entityTo); err != nil {
				return err
			}
			res.Record = next
		}
		a := auditRow{
			at: p.Now, key: p.Key, op: opClaim,
			outcome: res.Outcome.String(),
			to:      res.Record.State.String(),
			token:   res.Record.Token,
			holder:  p.Holder,
			actor:   p.Actor,

			payloadHash: p.PayloadHash,
		}
		if res.Outcome == tiers.OutcomeAcquired {
			a.reason = res.Reason.String()
		}
		if cur != nil {
			a.from = cur.State.String()
		} else if !write {
			a.to = "" // DEFERRED or SUPERSEDED: there is no record
		}
		return t.audit(a)
	})
	if err != nil {
		return tiers.ClaimResult{}, err
	}
	res.ServedBy = tiers.TierDurable
	return res, nil
}

// Transition applies p with tiers.ApplyTransition.
func (s *Store) Transition(ctx context.Context, p tiers.TransitionParams) (tiers.Record, bool, error) {
	return s.fenced(ctx, opTransition, p.Key, p.Now, p.Token, p.EffectRecovered, p.Actor, func(cur tiers.Record) (tiers.Record, bool, error) {
		return tiers.ApplyTransition(cur, p)
	})
}

// Renew extends the holder's lease with tiers.ApplyRenew.
func (s *Store) Renew(ctx context.Context, p tiers.RenewParams) (tiers.Record, error) {
	rec, _, err := s.fenced(ctx, opRenew, p.Key, p.Now, p.Token, false, p.Actor, func(cur tiers.Record) (tiers.Record, bool, error) {
		next, err := tiers.ApplyRenew(cur, p)
		return next, err == nil, err
	})
	return rec, err
}

// Release marks the record released with tiers.ApplyRelease.
func (s *Store) Release(ctx context.Context, p tiers.ReleaseParams) (tiers.Record, error) {
	rec, _, err := s.fenced(ctx, opRelease, p.Key, p.Now, p.Token, false, p.Actor, func(cur tiers.Record) (tiers.Record, bool, error) {
		return tiers.ApplyRelease(cur, p)
	})
	return rec, err
}

// fenced runs Transition, Renew or Release in one transaction: it reads the
// record of k, lets apply (a tiers.Apply* function) decide, and stores the
// new record with its audit row only when apply changed it. A missing key, a
// refusal and a repeat write nothing at all, no audit row either: a flood of
// them must not grow a log that is kept for months (the service's log line
// names each of them). effectRecovered goes to the audit row
// (tiers.TransitionParams.EffectRecovered; false for Renew and Release), and
// so does actor, who asked.
func (s *Store) fenced(ctx context.Context, op string, k tiers.Key, now time.Time, token uint64, effectRecovered bool, actor tiers.Actor,
	apply func(cur tiers.Record) (tiers.Record, bool, error),
) (tiers.Record, bool, error) {
	// The closure's results are its own variables: it runs on the
	// committer, and may still run after a caller that left has returned.
	var (
		rec     tiers.Record
		changed bool
		verdict error // the state machine's answer, kept apart from storage errors
	)
	err := s.write(ctx, op, func(t *txn) error {
		cur, entityTo, err := t.read(k)
		if err != nil {
			return err
		}
		if cur == nil {
			verdict = tiers.ErrNotFound
			return nil
		}
		rec, changed, verdict = apply(*cur)
		if !changed {
			return nil
		}
		if cur.Lifecycle != "" {
			// The record's entity moves (SETTLED) or is freed (FAILED,
			// released) with it, or the settle is refused.
			if verdict, err = t.moveEntity(k, now, token, rec, entityTo); err != nil || verdict != nil {
				rec, changed = *cur, false
				return err
			}
		}
		rec = canonical(rec)
		if err := t.put(&rec, entityTo); err != nil {
			return err
		}
		return t.audit(auditRow{
			at: now, key: k, op: op, outcome: outcomeChanged,
			from: cur.State.String(), to: rec.State.String(),
			token: token, holder: cur.Holder, effectRecovered: effectRecovered, actor: actor,
		})
	})
	if err != nil {
		return tiers.Record{}, false, err
	}
	if verdict != nil {
		return rec, false, fmt.Errorf("sqlite: %s %s: %w", op, k, verdict)
	}
	return rec, changed, nil
}

// Get reads the record of k through the read pool: it sees every committed
// write and never waits for the writer.
func (s *Store) Get(ctx context.Context, k tiers.Key) (tiers.Record, error) {
	if s.closed.Load() {
		return tiers.Record{}, tiers.Unavailable("sqlite", errClosed)
	}
	rec, err := scanRecord(s.rst.QueryRowContext(ctx, k.Namespace, k.Provider, k.Key), k)
	if err != nil {
		return tiers.Record{}, s.fail(ctx, "get", err)
	}
	if rec == nil {
		return tiers.Record{}, notFound(k)
	}
	return *rec, nil
}

// Prune deletes up to limit records whose window ended before cutoff, oldest
// window first, in one transaction. Callers loop until it returns fewer than
// limit; each batch holds the write lock only briefly.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return s.deleteBatch(ctx, "prune", `DELETE FROM claims WHERE rowid IN (
		SELECT rowid FROM claims WHERE window_expires_at < ? ORDER BY window_expires_at LIMIT ?)`, cutoff, limit)
}

// PruneEntities deletes up to limit entities whose expiry is before cutoff,
// with their applied events, and up to limit deferral rows whose expiry is
// before it, oldest first, in one transaction (tiers.EntityPruner). The
// events go first, chosen by the same ordered selection of entities as the
// entities themselves: nothing else writes between the statements.
func (s *Store) PruneEntities(ctx context.Context, cutoff time.Time, limit int) (tiers.Pruned, error) {
	if limit <= 0 {
		return tiers.Pruned{}, fmt.Errorf("sqlite: prune entities: limit %d must be positive", limit)
	}
	const expired = `SELECT namespace, provider, lifecycle, entity_id FROM entities
		WHERE expires_at < ?1 ORDER BY expires_at, rowid LIMIT ?2`
	var n tiers.Pruned
	err := s.write(ctx, "prune entities", func(t *txn) error {
		n = tiers.Pruned{}
		at := ceilMicros(cutoff)
		for _, st := range []struct {
			query string
			n     *int64
		}{
			{`DELETE FROM entity_events WHERE (namespace, provider, lifecycle, entity_id) IN (` + expired + `)`, &n.EntityEvents},
			{`DELETE FROM entities WHERE (namespace, provider, lifecycle, entity_id) IN (` + expired + `)`, &n.Entities},
			{`DELETE FROM deferrals WHERE rowid IN (
				SELECT rowid FROM deferrals WHERE expires_at < ?1 ORDER BY expires_at LIMIT ?2)`, &n.Deferrals},
		} {
			res, err := t.tx.ExecContext(t.ctx, st.query, at, limit)
			if err != nil {
				return err
			}
			if *st.n, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return tiers.Pruned{}, err // n is the committer's until the write is answered
	}
	return n, nil
}

// PruneAudit deletes up to limit audit rows written before before, oldest
// first, in one transaction.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.deleteBatch(ctx, "prune audit", `DELETE FROM audit_log WHERE id IN (
		SELECT id FROM audit_log WHERE at < ? ORDER BY at LIMIT ?)`, before, limit)
}

func (s *Store) deleteBatch(ctx context.Context, op, query string, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("sqlite: %s: limit %d must be positive", op, limit)
	}
	var n int64
	err := s.write(ctx, op, func(t *txn) error {
		res, err := t.tx.ExecContext(t.ctx, query, ceilMicros(before), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err // n is the committer's until the write is answered
	}
	return int(n), nil
}

// ceilMicros is t in unix microseconds rounded up, so that a stored time
// (whole microseconds) is < ceilMicros(t) exactly when it is before t.
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.After(time.UnixMicro(us)) {
		us++
	}
	return us
}

func notFound(k tiers.Key) error {
	return fmt.Errorf("sqlite: %s: %w", k, tiers.ErrNotFound)
}
