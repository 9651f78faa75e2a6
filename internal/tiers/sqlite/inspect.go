package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/claimd/claimd/internal/tiers"
)

// The Inspector reads (tiers/inspect.go), through the read pool like Get:
// on-call tools never queue behind claims.

var _ tiers.Inspector = (*Store)(nil)

// ListClaims lists the records f selects, newest FirstSeenAt first. The
// statement holds only the conditions of the filters f sets, so that
// SQLite plans each listing for what it asks (the primary key for a
// provider's keys).
func (s *Store) ListClaims(ctx context.Context, f tiers.ClaimFilter, pg tiers.Page) ([]tiers.Record, string, error) {
	if s.closed.Load() {
		return nil, "", tiers.Unavailable("sqlite", errClosed)
	}
	var (
		where = []string{"namespace = ?"}
		args  = []any{f.Namespace}
	)
	if f.Provider != "" {
		where, args = append(where, "provider = ?"), append(args, f.Provider)
	}
	if len(f.Keys) > 0 {
		where = append(where, "key IN ("+marks(len(f.Keys))+")")
		for _, k := range f.Keys {
			args = append(args, k)
		}
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+marks(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, st.String())
		}
	}
	if f.EntityID != "" {
		where, args = append(where, "entity_id = ?"), append(args, f.EntityID)
	}
	if !f.FirstSeenAfter.IsZero() {
		where, args = append(where, "first_seen_at >= ?"), append(args, ceilMicros(f.FirstSeenAfter))
	}
	if !f.FirstSeenBefore.IsZero() {
		where, args = append(where, "first_seen_at < ?"), append(args, ceilMicros(f.FirstSeenBefore))
	}
	if pg.After != "" {
		pos, err := tiers.DecodeClaimsCursor(f, pg.After)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: %w", err)
		}
		where = append(where, "(first_seen_at, provider, key) < (?, ?, ?)")
		args = append(args, pos.FirstSeenAt.UnixMicro(), pos.Provider, pos.Key)
	}
	limit := pg.Limit()
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, `SELECT provider, key, `+recordColumns+` FROM claims
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY first_seen_at DESC, provider DESC, key DESC
		LIMIT ?`, args...)
	if err != nil {
		return nil, "", translate(ctx, "list claims", err)
	}
	defer rows.Close()
	recs, next, err := tiers.ScanPage(rows, limit, func() (tiers.Record, error) {
		k := tiers.Key{Namespace: f.Namespace}
		rec, _, err := scanStored(rows, k, &k.Provider, &k.Key)
		if err != nil {
			return tiers.Record{}, err
		}
		rec.Key = k
		return *rec, nil
	}, f.Cursor)
	return recs, next, translate(ctx, "list claims", err)
}

// marks is n comma-separated placeholders.
func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// ListAudit lists the audit log of k, oldest first (audit_log_key, 0006).
func (s *Store) ListAudit(ctx context.Context, k tiers.Key, pg tiers.Page) ([]tiers.AuditEntry, string, error) {
	if s.closed.Load() {
		return nil, "", tiers.Unavailable("sqlite", errClosed)
	}
	var afterAt, afterID int64
	if pg.After != "" {
		pos, err := tiers.DecodeAuditCursor(k, pg.After)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: %w", err)
		}
		afterAt, afterID = pos.At.UnixMicro(), pos.ID
	}
	limit := pg.Limit()
	rows, err := s.r.QueryContext(ctx, `SELECT id, at, op, outcome, reason, to_state, token, holder,
			principal, transport, effect_recovered, payload_sha256
		FROM audit_log
		WHERE namespace = ? AND provider = ? AND key = ? AND (? = 0 OR (at, id) > (?, ?))
		ORDER BY at, id
		LIMIT ?`,
		k.Namespace, k.Provider, k.Key, boolInt(pg.After != ""), afterAt, afterID, limit+1)
	if err != nil {
		return nil, "", translate(ctx, "list audit", err)
	}
	defer rows.Close()
	entries, next, err := tiers.ScanAuditPage(rows, k, limit, func() (tiers.AuditEntry, int64, error) { return scanAudit(rows) })
	return entries, next, translate(ctx, "list audit", err)
}

// scanAudit reads a row of ListAudit's query: an entry and its id.
func scanAudit(rows *sql.Rows) (tiers.AuditEntry, int64, error) {
	var (
		e                          tiers.AuditEntry
		id, at, token, recovered   int64
		op, outcome, reason, state string
		payload                    []byte
	)
	if err := rows.Scan(&id, &at, &op, &outcome, &reason, &state, &token, &e.Holder,
		&e.Actor.Principal, &e.Actor.Transport, &recovered, &payload); err != nil {
		return e, id, err
	}
	if err := readAuditNames(&e, op, outcome, reason, state); err != nil {
		return e, id, fmt.Errorf("row %d: %w", id, err)
	}
	e.At, e.Token, e.EffectRecovered, e.PayloadHash = fromMicros(at), uint64(token), recovered != 0, nilIfEmpty(payload)
	return e, id, nil
}

// readAuditNames reads the names audit_log stores (audit.go): the op; the
// outcome, a tiers.Outcome name for a claim (outcomeChanged otherwise); the
// reason of an ACQUIRED claim (” otherwise); the state after the call
// (” when a claim left no record).
func readAuditNames(e *tiers.AuditEntry, op, outcome, reason, state string) error {
	var err error
	if e.Op, err = tiers.ParseAuditOp(op); err != nil {
		return err
	}
	if e.Op == tiers.AuditClaim {
		if e.Outcome, err = parseOutcome(outcome); err != nil {
			return err
		}
	}
	if reason != "" {
		if e.Reason, err = tiers.ParseReason(reason); err != nil {
			return err
		}
	}
	if state != "" {
		if e.State, err = tiers.ParseState(state); err != nil {
			return err
		}
	}
	return nil
}

// parseOutcome is the inverse of tiers.Outcome.String.
func parseOutcome(name string) (tiers.Outcome, error) {
	for o := tiers.OutcomeAcquired; o <= tiers.OutcomeSuperseded; o++ {
		if o.String() == name {
			return o, nil
		}
	}
	return tiers.OutcomeUnspecified, fmt.Errorf("unknown outcome %q", name)
}
