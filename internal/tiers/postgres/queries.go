package postgres

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/claimd/claimd/internal/tiers"
)

// The statements live in queries/*.sql so they read as SQL. A {NAME} in them
// is replaced once, at package initialisation, by the numeric value of the
// tiers constant of that name (or by the record's column list), so the SQL
// text is constant for the life of the process and pgx prepares each
// statement once per connection.
var (
	claimSQL      = loadQuery("claim")
	auditClaimSQL = loadQuery("audit_claim")
	getSQL        = loadQuery("get")
	transitionSQL = loadQuery("transition")
	// transitionBatchSQL is transition.sql for a batch (writebatch.go).
	transitionBatchSQL = loadQuery("transition_batch")
	renewSQL           = loadQuery("renew")
	releaseSQL         = loadQuery("release")
	pruneSQL           = loadQuery("prune")
	countPrunableSQL   = loadQuery("count_prunable")
)

//go:embed queries/*.sql
var queryFS embed.FS

// recordColumns are the columns scanRecord reads, in its order.
const recordColumns = `state, token, version, attempt, reason, released, holder, attempt_id,
    salt, secret_hash, payload_sha256, result, first_seen_at, lease_expires_at, window_expires_at, updated_at,
    lifecycle, entity_id, event_type`

var placeholders = map[string]string{
	"RECORD":         recordColumns,
	"RECEIVED":       num(tiers.StateReceived),
	"VALIDATED":      num(tiers.StateValidated),
	"PROCESSING":     num(tiers.StateProcessing),
	"SETTLED":        num(tiers.StateSettled),
	"FAILED":         num(tiers.StateFailed),
	"NEW":            num(tiers.ReasonNew),
	"RELEASED":       num(tiers.ReasonReleased),
	"LEASE_EXPIRED":  num(tiers.ReasonLeaseExpired),
	"WINDOW_EXPIRED": num(tiers.ReasonWindowExpired),
	"ACQUIRED":       num(tiers.OutcomeAcquired),
}

// querier runs a statement on the pool or in a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

var placeholder = regexp.MustCompile(`\{[A-Z_]+\}`)

func num[T ~uint8](v T) string { return strconv.Itoa(int(v)) }

// loadQuery reads queries/name.sql and expands its placeholders. A missing
// file or an unknown placeholder is a bug in this package: it panics at
// start-up rather than failing a claim.
func loadQuery(name string) string {
	b, err := queryFS.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("postgres: query %s: %v", name, err))
	}
	return placeholder.ReplaceAllStringFunc(string(b), func(m string) string {
		v, ok := placeholders[m[1:len(m)-1]]
		if !ok {
			panic(fmt.Sprintf("postgres: query %s: unknown placeholder %s", name, m))
		}
		return v
	})
}

// scanRecord scans one row of recordColumns, after the destinations in
// before, into a Record of key k. Times come back in UTC, as the service
// clock gives them.
func scanRecord(row pgx.Row, k tiers.Key, before ...any) (tiers.Record, error) {
	var (
		rec            = tiers.Record{Key: k}
		state, reason  int16
		token, version int64
		attempt        int32
	)
	dest := append(before,
		&state, &token, &version, &attempt, &reason, &rec.Released, &rec.Holder, &rec.AttemptID,
		&rec.Salt, &rec.SecretHash, &rec.PayloadHash, &rec.Result,
		&rec.FirstSeenAt, &rec.LeaseExpiresAt, &rec.WindowExpiresAt, &rec.UpdatedAt,
		&rec.Lifecycle, &rec.EntityID, &rec.EventType)
	if err := row.Scan(dest...); err != nil {
		return tiers.Record{}, err
	}
	// The CHECK constraints of claims keep these conversions in range.
	rec.State = tiers.State(state)
	rec.Reason = tiers.Reason(reason)
	rec.Token = uint64(token)
	rec.Version = uint64(version)
	rec.Attempt = uint32(attempt)
	for _, t := range []*time.Time{&rec.FirstSeenAt, &rec.LeaseExpiresAt, &rec.WindowExpiresAt, &rec.UpdatedAt} {
		*t = t.UTC()
	}
	return rec, nil
}
