package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/textclip"
	"github.com/claimd/claimd/internal/tiers"
)

// Entity lifecycles (tiers.EntityEvent) on SQLite. The ordering of a claim
// and the move of its entity at settle time run inside the write of the
// claim or the transition, on the committer (batch.go): they read and write
// under the same write lock and in the same savepoint as the record, so they
// group-commit like every other write and two claims of one entity are
// ordered one after the other exactly as two claims of one key are. Their
// statements are not prepared: only claims of lifecycle events run them.

// entityRow is an entities row.
type entityRow struct {
	state     string
	version   int64
	busyKey   string
	busyToken int64
}

func entityKeyOf(k tiers.Key, lifecycle, entityID string) tiers.EntityKey {
	return tiers.EntityKey{Namespace: k.Namespace, Provider: k.Provider, Lifecycle: lifecycle, EntityID: entityID}
}

// readEntity returns the entities row of ek, nil when there is none.
func (t *txn) readEntity(ek tiers.EntityKey) (*entityRow, error) {
	var e entityRow
	err := t.tx.QueryRowContext(t.ctx, `SELECT state, version, busy_key, busy_token FROM entities
		WHERE namespace = ? AND provider = ? AND lifecycle = ? AND entity_id = ?`,
		ek.Namespace, ek.Provider, ek.Lifecycle, ek.EntityID).Scan(&e.state, &e.version, &e.busyKey, &e.busyToken)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// liveHolder returns the event type of the claim holding e when that hold
// is live at now and held by a key other than self: the holder's record
// still carries the held token, is neither released nor terminal, and its
// lease runs. "" means the entity is free for self.
func (t *txn) liveHolder(e *entityRow, self tiers.Key, now time.Time) (string, error) {
	if e == nil || e.busyKey == "" || e.busyKey == self.Key {
		return "", nil
	}
	h, _, err := t.read(tiers.Key{Namespace: self.Namespace, Provider: self.Provider, Key: e.busyKey})
	if err != nil || h == nil {
		return "", err
	}
	if !tiers.HoldLive(*h, uint64(e.busyToken), now) {
		return "", nil
	}
	return cmp.Or(h.EventType, e.busyKey), nil
}

// order decides claim p, which Decide answered ACQUIRED (res), against its
// entity, as tiers.EntityEvent says. write is whether Decide's record is to
// be stored; a claim that repeats a live acquisition of the same attempt
// (write false) already holds the entity and is only told where it stands.
// When the claim may not proceed, the answer becomes DEFERRED or
// SUPERSEDED, nothing is to be stored for the key (write false) and the
// event's deferral row is upserted instead; when it proceeds, the entity is
// marked held by the key and the token of res.Record.
func (t *txn) order(p tiers.ClaimParams, cur *tiers.Record, res tiers.ClaimResult, write bool) (tiers.ClaimResult, bool, error) {
	ev := p.Entity
	ek := entityKeyOf(p.Key, ev.Lifecycle, ev.EntityID)
	e, err := t.readEntity(ek)
	if err != nil {
		return res, write, err
	}
	state := ev.Initial
	if e != nil {
		state = e.state
	}
	res.Entity = &tiers.EntityPosition{State: state}
	if !write {
		return res, false, nil
	}
	busy, err := t.liveHolder(e, p.Key, p.Now)
	if err != nil {
		return res, write, err
	}
	outcome := ev.Order(state, busy != "")
	// Every ordered claim keeps the entity, and its deferral row, at least
	// as long as the window of its delivery (tiers.EntityPruner).
	window := p.Now.Add(p.TTL).UnixMicro()
	if outcome == tiers.OutcomeAcquired {
		_, err := t.tx.ExecContext(t.ctx, `INSERT INTO entities
			(namespace, provider, lifecycle, entity_id, state, version, updated_at, busy_key, busy_token, expires_at)
			VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?)
			ON CONFLICT (namespace, provider, lifecycle, entity_id) DO UPDATE SET
				busy_key = excluded.busy_key, busy_token = excluded.busy_token,
				expires_at = max(entities.expires_at, excluded.expires_at)`,
			ek.Namespace, ek.Provider, ek.Lifecycle, ek.EntityID, state, p.Now.UnixMicro(),
			p.Key.Key, int64(res.Record.Token), window)
		return res, true, err
	}
	if e != nil {
		if _, err := t.tx.ExecContext(t.ctx, `UPDATE entities SET expires_at = max(expires_at, ?)
			WHERE namespace = ? AND provider = ? AND lifecycle = ? AND entity_id = ?`,
			window, ek.Namespace, ek.Provider, ek.Lifecycle, ek.EntityID); err != nil {
			return res, write, err
		}
	}
	awaiting, err := json.Marshal(ev.Awaiting())
	if err != nil {
		return res, write, err
	}
	superseded := 0
	if outcome == tiers.OutcomeSuperseded {
		superseded = 1
	}
	var count int64
	err = t.tx.QueryRowContext(t.ctx, `INSERT INTO deferrals
		(namespace, provider, key, lifecycle, entity_id, event_type, superseded, count,
		 first_seen_at, last_seen_at, awaiting, entity_state, applied, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, 0, ?)
		ON CONFLICT (namespace, provider, key) DO UPDATE SET
			lifecycle = excluded.lifecycle, entity_id = excluded.entity_id, event_type = excluded.event_type,
			superseded = excluded.superseded, count = deferrals.count + 1,
			last_seen_at = max(deferrals.last_seen_at, excluded.last_seen_at),
			awaiting = excluded.awaiting, entity_state = excluded.entity_state, applied = 0,
			expires_at = max(deferrals.expires_at, excluded.expires_at)
		RETURNING count`,
		p.Key.Namespace, p.Key.Provider, p.Key.Key, ev.Lifecycle, ev.EntityID, ev.EventType, superseded,
		p.Now.UnixMicro(), p.Now.UnixMicro(), string(awaiting), state, window).Scan(&count)
	if err != nil {
		return res, write, err
	}
	return tiers.Refused(outcome, p.Key, cur, state, busy, uint32(count)), false, nil
}

// moveEntity is the entity's side of a fenced write that changed next, the
// record of k held with token, whose claim placed it in an entity: settling
// it moves the entity to entityTo, appends the applied event, marks the
// key's deferral applied and frees the entity; failing or releasing it frees
// the entity unchanged. Either needs the entity to be held by k and token:
// a settle by a record that lost its entity (its lease ended, another event
// acquired it) is refused with ErrStaleToken (verdict), a failure or release
// of one leaves the entity to its new holder.
func (t *txn) moveEntity(k tiers.Key, now time.Time, token uint64, next tiers.Record, entityTo string) (verdict, err error) {
	settle := next.State == tiers.StateSettled
	if !settle && !next.Released && next.State != tiers.StateFailed {
		return nil, nil // PROCESSING, a renew: the hold goes on
	}
	ek := entityKeyOf(k, next.Lifecycle, next.EntityID)
	e, err := t.readEntity(ek)
	if err != nil {
		return nil, err
	}
	if e == nil || e.busyKey != k.Key || e.busyToken != int64(token) {
		if settle {
			return fmt.Errorf("%w: entity %s/%s is held by another event", tiers.ErrStaleToken, textclip.Cut(next.Lifecycle, maxEcho), textclip.Cut(next.EntityID, maxEcho)), nil
		}
		return nil, nil
	}
	args := []any{ek.Namespace, ek.Provider, ek.Lifecycle, ek.EntityID}
	if !settle {
		_, err := t.tx.ExecContext(t.ctx, `UPDATE entities SET busy_key = '', busy_token = 0
			WHERE namespace = ? AND provider = ? AND lifecycle = ? AND entity_id = ?`, args...)
		return nil, err
	}
	if t.step != nil {
		t.step("entity-settle-before", k)
	}
	if _, err := t.tx.ExecContext(t.ctx, `UPDATE entities
		SET state = ?, version = version + 1, updated_at = ?, busy_key = '', busy_token = 0,
			expires_at = max(expires_at, ?)
		WHERE namespace = ? AND provider = ? AND lifecycle = ? AND entity_id = ?`,
		append([]any{entityTo, now.UnixMicro(), next.WindowExpiresAt.UnixMicro()}, args...)...); err != nil {
		return nil, err
	}
	if _, err := t.tx.ExecContext(t.ctx, `INSERT INTO entity_events
		(namespace, provider, lifecycle, entity_id, event_type, key, from_state, to_state, token, applied_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		append(args, next.EventType, k.Key, e.state, entityTo, int64(token), now.UnixMicro())...); err != nil {
		return nil, err
	}
	_, err = t.tx.ExecContext(t.ctx, `UPDATE deferrals SET applied = 1
		WHERE namespace = ? AND provider = ? AND key = ?`, k.Namespace, k.Provider, k.Key)
	if err == nil && t.step != nil {
		t.step("entity-settle-after", k)
	}
	return nil, err
}

var _ tiers.Entities = (*Store)(nil)

// GetEntity reads the entity of k and the events applied to it, oldest
// first, through the read pool.
func (s *Store) GetEntity(ctx context.Context, k tiers.EntityKey) (tiers.Entity, error) {
	if s.closed.Load() {
		return tiers.Entity{}, tiers.Unavailable("sqlite", errClosed)
	}
	ent := tiers.Entity{EntityKey: k}
	var version, updatedAt int64
	args := []any{k.Namespace, k.Provider, k.Lifecycle, k.EntityID}
	err := s.r.QueryRowContext(ctx, `SELECT state, version, updated_at, busy_key FROM entities
		WHERE namespace = ? AND provider = ? AND lifecycle = ? AND entity_id = ?`, args...).
		Scan(&ent.State, &version, &updatedAt, &ent.BusyWith)
	if errors.Is(err, sql.ErrNoRows) {
		return tiers.Entity{}, fmt.Errorf("sqlite: entity %s/%s: %w", textclip.Cut(k.Lifecycle, maxEcho), textclip.Cut(k.EntityID, maxEcho), tiers.ErrEntityNotFound)
	}
	if err != nil {
		return tiers.Entity{}, translate(ctx, "get entity", err)
	}
	ent.Version, ent.UpdatedAt = uint64(version), fromMicros(updatedAt)
	rows, err := s.r.QueryContext(ctx, `SELECT event_type, key, from_state, to_state, token, applied_at
		FROM entity_events WHERE namespace = ? AND provider = ? AND lifecycle = ? AND entity_id = ?
		ORDER BY id`, args...)
	if err != nil {
		return tiers.Entity{}, translate(ctx, "get entity", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			a         tiers.AppliedEvent
			token, at int64
		)
		if err := rows.Scan(&a.EventType, &a.Key, &a.From, &a.To, &token, &at); err != nil {
			return tiers.Entity{}, translate(ctx, "get entity", err)
		}
		a.Token, a.AppliedAt = uint64(token), fromMicros(at)
		ent.Applied = append(ent.Applied, a)
	}
	if err := rows.Err(); err != nil {
		return tiers.Entity{}, translate(ctx, "get entity", err)
	}
	return ent, nil
}

// ListDeferred lists the deferred and superseded events of p.Namespace and
// p.Provider (of one entity when p.EntityID is set), newest last seen first.
// The cursor is the (last seen, key) of a page's last event.
func (s *Store) ListDeferred(ctx context.Context, p tiers.ListDeferredParams) ([]tiers.DeferredEvent, string, error) {
	if s.closed.Load() {
		return nil, "", tiers.Unavailable("sqlite", errClosed)
	}
	limit := p.Limit()
	var (
		afterAt  int64
		afterKey string
	)
	if p.After != "" {
		pos, err := tiers.DecodeDeferredCursor(p)
		if err != nil {
			return nil, "", err
		}
		afterAt, afterKey = pos.LastSeen.UnixMicro(), pos.Key
	}
	// The entity's own row is newer than the state the deferral recorded;
	// an entity without one is still where the deferral saw it.
	rows, err := s.r.QueryContext(ctx, `SELECT d.key, d.lifecycle, d.entity_id, d.event_type, d.superseded, d.count,
			d.first_seen_at, d.last_seen_at, d.awaiting, coalesce(e.state, d.entity_state), d.applied
		FROM deferrals d LEFT JOIN entities e ON e.namespace = d.namespace AND e.provider = d.provider
			AND e.lifecycle = d.lifecycle AND e.entity_id = d.entity_id
		WHERE d.namespace = ? AND d.provider = ? AND (? = '' OR d.entity_id = ?)
			AND (? = 0 OR d.last_seen_at < ? OR (d.last_seen_at = ? AND d.key < ?))
		ORDER BY d.last_seen_at DESC, d.key DESC
		LIMIT ?`,
		p.Namespace, p.Provider, p.EntityID, p.EntityID,
		boolInt(p.After != ""), afterAt, afterAt, afterKey, limit+1)
	if err != nil {
		return nil, "", translate(ctx, "list deferred", err)
	}
	defer rows.Close()
	events, next, err := tiers.ScanPage(rows, limit, func() (tiers.DeferredEvent, error) { return scanDeferred(rows) }, p.Cursor)
	return events, next, translate(ctx, "list deferred", err)
}

// scanDeferred reads a row of ListDeferred's query.
func scanDeferred(rows *sql.Rows) (tiers.DeferredEvent, error) {
	var (
		d                          tiers.DeferredEvent
		superseded, applied, count int64
		first, last                int64
		awaiting                   string
	)
	if err := rows.Scan(&d.Key, &d.Lifecycle, &d.EntityID, &d.EventType, &superseded, &count,
		&first, &last, &awaiting, &d.EntityState, &applied); err != nil {
		return d, err
	}
	if err := json.Unmarshal([]byte(awaiting), &d.Awaiting); err != nil {
		return d, fmt.Errorf("deferral %s: awaiting: %w", textclip.Cut(d.Key, maxEcho), err)
	}
	d.Superseded, d.Applied, d.Count = superseded != 0, applied != 0, uint32(count)
	d.FirstSeen, d.LastSeen = fromMicros(first), fromMicros(last)
	return d, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CountDeferred counts the open deferrals (deferred, not superseded, not
// applied) of the providers in lostBefore and, of them, those first seen
// before their provider's cutoff.
func (s *Store) CountDeferred(ctx context.Context, cutoffs map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error) {
	if s.closed.Load() {
		return tiers.DeferredCounts{}, tiers.Unavailable("sqlite", errClosed)
	}
	// The cutoffs travel as one JSON array of [provider, overdue, lost]
	// (microseconds, as first_seen_at is stored), so that one statement
	// counts every provider.
	rows := make([][3]any, 0, len(cutoffs))
	for p, c := range cutoffs {
		rows = append(rows, [3]any{p, ceilMicros(c.Overdue), ceilMicros(c.Lost)})
	}
	arg, err := json.Marshal(rows)
	if err != nil {
		return tiers.DeferredCounts{}, fmt.Errorf("sqlite: count deferred: %w", err)
	}
	var n tiers.DeferredCounts
	if err := s.r.QueryRowContext(ctx, `SELECT count(*),
			count(*) FILTER (WHERE d.first_seen_at < c.value ->> 1),
			count(*) FILTER (WHERE d.first_seen_at < c.value ->> 2)
		FROM deferrals d JOIN json_each(?) c ON d.provider = c.value ->> 0
		WHERE d.applied = 0 AND d.superseded = 0`, string(arg)).Scan(&n.Deferred, &n.Overdue, &n.Lost); err != nil {
		return tiers.DeferredCounts{}, translate(ctx, "count deferred", err)
	}
	return n, nil
}
