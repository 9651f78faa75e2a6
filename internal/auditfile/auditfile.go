// Package auditfile writes and reads a month of the audit log as a Parquet
// file: what the janitor (--audit-export-dir) and claimd audit export keep of
// a PostgreSQL audit partition before it is dropped, and what claimd inspect
// --file reads back. Any engine that reads Parquet reads it too (DuckDB:
// SELECT * FROM 'audit_log_y2026m11.parquet'; ClickHouse, Spark, pandas).
//
// One row per audit_log row, every column kept, typed: timestamps are
// TIMESTAMP(MICROS, UTC), the id, token and version INT64, the payload hash
// BYTE_ARRAY, and the small enums their names (the proto's, without the
// prefix), so that a query reads "outcome = 'DUPLICATE'" with no table of
// numbers beside it:
//
//	op       claim | transition | renew | release
//	outcome  ACQUIRED | DUPLICATE | IN_PROGRESS | PAYLOAD_MISMATCH | DEFERRED | SUPERSEDED; NULL unless op = claim
//	reason   NEW | RELEASED | LEASE_EXPIRED | WINDOW_EXPIRED; NULL unless outcome = ACQUIRED
//	state    RECEIVED | VALIDATED | PROCESSING | SETTLED | FAILED (UNSPECIFIED: a DEFERRED or SUPERSEDED claim of a key without a record)
//
// Columns are zstd-compressed, the repeated text ones dictionary-encoded.
package auditfile

import (
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// Row is one audit_log row. Its parquet tags are the file's schema; the
// column names are audit_log's (migrations 0002, 0005, 0006).
type Row struct {
	ID              int64     `parquet:"id"`
	At              time.Time `parquet:"at,timestamp(microsecond)"`
	Namespace       string    `parquet:"namespace,dict"`
	Provider        string    `parquet:"provider,dict"`
	Key             string    `parquet:"key"`
	Op              string    `parquet:"op,dict"`
	Outcome         string    `parquet:"outcome,dict,optional"`
	Reason          string    `parquet:"reason,dict,optional"`
	State           string    `parquet:"state,dict"`
	Token           int64     `parquet:"token"`
	Version         int64     `parquet:"version"`
	Holder          string    `parquet:"holder,dict"`
	AttemptID       string    `parquet:"attempt_id"`
	PayloadSHA256   []byte    `parquet:"payload_sha256,optional"`
	LoggedAt        time.Time `parquet:"logged_at,timestamp(microsecond)"`
	EffectRecovered bool      `parquet:"effect_recovered"`
	Principal       string    `parquet:"principal,dict"`
	Transport       string    `parquet:"transport,dict"`
}

// Names of the enums as the file holds them; "" (NULL) for the zero
// Outcome and Reason, as audit_log holds NULL.
func OutcomeName(o tiers.Outcome) string { return nameOrNull(o) }

// ReasonName is Reason's column value (see OutcomeName).
func ReasonName(r tiers.Reason) string { return nameOrNull(r) }

func nameOrNull[E interface {
	~uint8
	String() string
}](e E) string {
	if e == 0 {
		return ""
	}
	return e.String()
}

// parseEnum is the inverse of E.String and nameOrNull: "" is the zero value.
func parseEnum[E interface {
	~uint8
	String() string
}](column, name string) (E, error) {
	if name == "" {
		return 0, nil
	}
	for i := range 256 {
		if e := E(i); e.String() == name {
			return e, nil
		}
	}
	return 0, fmt.Errorf("unknown %s %q", column, name)
}

// Entry is the row as ListAudit answers it.
func (r *Row) Entry() (tiers.AuditEntry, error) {
	e := tiers.AuditEntry{
		At: r.At.UTC(), Token: uint64(r.Token), Holder: r.Holder,
		Actor:           tiers.Actor{Principal: r.Principal, Transport: r.Transport},
		EffectRecovered: r.EffectRecovered,
	}
	var err error
	if e.Op, err = tiers.ParseAuditOp(r.Op); err != nil {
		return e, fmt.Errorf("auditfile: row %d: %w", r.ID, err)
	}
	if e.Outcome, err = parseEnum[tiers.Outcome]("outcome", r.Outcome); err != nil {
		return e, fmt.Errorf("auditfile: row %d: %w", r.ID, err)
	}
	if e.Reason, err = parseEnum[tiers.Reason]("reason", r.Reason); err != nil {
		return e, fmt.Errorf("auditfile: row %d: %w", r.ID, err)
	}
	if e.State, err = parseEnum[tiers.State]("state", r.State); err != nil {
		return e, fmt.Errorf("auditfile: row %d: %w", r.ID, err)
	}
	if len(r.PayloadSHA256) > 0 {
		e.PayloadHash = append([]byte(nil), r.PayloadSHA256...)
	}
	return e, nil
}
