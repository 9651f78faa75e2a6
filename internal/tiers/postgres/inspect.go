package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// The Inspector reads (tiers/inspect.go): records of a namespace and the
// audit log of a key, a keyset page at a time, on the pool like Get.

// auditListSQL reads one page of a key's audit log (audit_list.sql).
var auditListSQL = loadQuery("audit_list")

var _ tiers.Inspector = (*Store)(nil)

// ListClaims lists the records f selects, newest FirstSeenAt first (then
// provider and key, descending, so that the order is total), after the
// keyset position of the previous page's last row.
//
// The statement holds the conditions of the filters f sets and no others,
// so each shape of filter is a statement of its own, with a plan of its
// own: a cached generic plan made for "every record of the namespace"
// would otherwise serve a provider's thousand keys by scanning the
// namespace, where their own plan reads the primary key.
func (s *Store) ListClaims(ctx context.Context, f tiers.ClaimFilter, pg tiers.Page) ([]tiers.Record, string, error) {
	var (
		where = []string{"namespace = $1"}
		args  = []any{f.Namespace}
	)
	cond := func(sql string, arg any) {
		args = append(args, arg)
		where = append(where, strings.ReplaceAll(sql, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.Provider != "" {
		cond("provider = $?", f.Provider)
	}
	if len(f.Keys) > 0 {
		cond("key = ANY ($?::text[])", f.Keys)
	}
	if len(f.States) > 0 {
		states := make([]int16, len(f.States))
		for i, st := range f.States {
			states[i] = int16(st)
		}
		cond("state = ANY ($?::smallint[])", states)
	}
	if f.EntityID != "" {
		cond("entity_id = $?", f.EntityID)
	}
	if t := timeBound(f.FirstSeenAfter); t != nil {
		cond("first_seen_at >= $?", *t)
	}
	if t := timeBound(f.FirstSeenBefore); t != nil {
		cond("first_seen_at < $?", *t)
	}
	if pg.After != "" {
		pos, err := tiers.DecodeClaimsCursor(f, pg.After)
		if err != nil {
			return nil, "", fmt.Errorf("postgres: %w", err)
		}
		n := len(args)
		args = append(args, pos.FirstSeenAt, pos.Provider, pos.Key)
		where = append(where, fmt.Sprintf("(first_seen_at, provider, key) < ($%d::timestamptz, $%d::text, $%d::text)", n+1, n+2, n+3))
	}
	limit := pg.Limit()
	args = append(args, limit+1)
	sql := `SELECT provider, key, ` + recordColumns + ` FROM claims
WHERE ` + strings.Join(where, " AND ") + `
ORDER BY first_seen_at DESC, provider DESC, key DESC
LIMIT $` + strconv.Itoa(len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fail(ctx, "list claims", err)
	}
	defer rows.Close()
	recs, next, err := tiers.ScanPage(rows, limit, func() (tiers.Record, error) {
		k := tiers.Key{Namespace: f.Namespace}
		rec, err := scanRecord(rows, k, &k.Provider, &k.Key)
		rec.Key = k // scanRecord copied k before its provider and key were read
		return rec, err
	}, f.Cursor)
	return recs, next, fail(ctx, "list claims", err)
}

// timeBound is a filter's bound as a parameter: NULL for none, else rounded
// up to PostgreSQL's microsecond (tiers.CeilMicro), which pgx would
// otherwise truncate.
func timeBound(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = tiers.CeilMicro(t)
	return &t
}

// beforeAll is the position before every audit row: the first page's.
var beforeAll = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)

// ListAudit lists the audit log of k, oldest first.
func (s *Store) ListAudit(ctx context.Context, k tiers.Key, pg tiers.Page) ([]tiers.AuditEntry, string, error) {
	after := tiers.AuditPosition{At: beforeAll}
	if pg.After != "" {
		var err error
		if after, err = tiers.DecodeAuditCursor(k, pg.After); err != nil {
			return nil, "", fmt.Errorf("postgres: %w", err)
		}
	}
	limit := pg.Limit()
	rows, err := s.pool.Query(ctx, auditListSQL, k.Namespace, k.Provider, k.Key, after.At, after.ID, limit+1)
	if err != nil {
		return nil, "", fail(ctx, "list audit", err)
	}
	defer rows.Close()
	entries, next, err := tiers.ScanAuditPage(rows, k, limit, func() (tiers.AuditEntry, int64, error) { return scanAudit(rows) })
	return entries, next, fail(ctx, "list audit", err)
}

// scanAudit reads a row of audit_list.sql: an entry and its id.
func scanAudit(rows pgx.Rows) (tiers.AuditEntry, int64, error) {
	var (
		e                      tiers.AuditEntry
		id, token              int64
		op                     string
		outcome, reason, state int16
	)
	if err := rows.Scan(&id, &e.At, &op, &outcome, &reason, &state, &token, &e.Holder,
		&e.Actor.Principal, &e.Actor.Transport, &e.EffectRecovered, &e.PayloadHash); err != nil {
		return e, id, err
	}
	var err error
	if e.Op, err = tiers.ParseAuditOp(op); err != nil {
		return e, id, fmt.Errorf("row %d: %w", id, err)
	}
	// The columns hold the tiers values (0002_audit); a row of a DEFERRED
	// or SUPERSEDED claim of a key without a record has state and token 0.
	e.At = e.At.UTC()
	e.Outcome, e.Reason, e.State, e.Token = tiers.Outcome(outcome), tiers.Reason(reason), tiers.State(state), uint64(token)
	if len(e.PayloadHash) == 0 {
		e.PayloadHash = nil
	}
	return e, id, nil
}
