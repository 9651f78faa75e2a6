package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/tiers"
)

// A month of the audit log leaves PostgreSQL as a file (auditfile) before
// its partition is dropped: claimd audit export writes one on demand, and
// the janitor with --audit-export-dir archives each partition retention
// drops.

// ErrNoAuditPartition is returned for a month the audit log has no
// partition of (never created, or dropped already).
var ErrNoAuditPartition = errors.New("postgres: no such audit partition")

// AuditSink receives the rows of an exported partition (auditfile.File).
// Commit makes what was written durable; a partition is dropped only after
// its sink's Commit returned nil.
type AuditSink interface {
	Write(*auditfile.Row) error
	Commit() error
}

// AuditPartitionName names the audit partition of t's month
// (audit_log_yYYYYmMM).
func AuditPartitionName(t time.Time) string { return partitionName(monthStart(t)) }

// auditExportColumns are every column of audit_log, in auditfile.Row's
// order.
const auditExportColumns = `id, at, namespace, provider, key, op, outcome, reason, state, token, version,
	holder, attempt_id, payload_sha256, logged_at, effect_recovered, principal, transport`

// ExportAuditPartition writes every row of the audit partition name to
// sink, from one snapshot (a REPEATABLE READ, READ ONLY transaction), and
// commits sink. It changes nothing in the database. The rows stream from
// the server as sink takes them: a month is never held in memory.
func (s *Store) ExportAuditPartition(ctx context.Context, name string, sink AuditSink) (rows int64, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := checkPartition(ctx, tx, name); err != nil {
			return err
		}
		if rows, err = exportRows(ctx, tx, name, sink); err != nil {
			return err
		}
		return sink.Commit()
	})
	return rows, fail(ctx, "export audit partition "+name, err)
}

// ArchiveAuditPartition exports the audit partition name to sink, as
// ExportAuditPartition does, and drops it once sink committed; when the
// export or the commit fails, the partition stays (the next pass tries
// again). One transaction holds the partition in SHARE mode from before its
// first row is read until it is dropped: a write to that month (only a
// clock skewed by the whole retention period would make one) waits, or
// fails with the drop's lock, rather than land in a partition already
// exported. Other months' writes and every read go on meanwhile; audit_log
// itself is locked only for the DROP, under the schema lock and
// maintenanceLockTimeout like every partition change.
func (s *Store) ArchiveAuditPartition(ctx context.Context, name string, sink AuditSink) (rows int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+maintenanceLockTimeout+`'`); err != nil {
			return err
		}
		if err := checkPartition(ctx, tx, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{name}.Sanitize()+` IN SHARE MODE`); err != nil {
			return err
		}
		if rows, err = exportRows(ctx, tx, name, sink); err != nil {
			return err
		}
		if err := sink.Commit(); err != nil {
			return err
		}
		if err := lockSchema(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize())
		return err
	})
	return rows, fail(ctx, "archive audit partition "+name, err)
}

// checkPartition makes sure name is an audit partition this package named
// and that it is attached to audit_log: name goes into SQL as an
// identifier, and only a partition may be exported or dropped.
func checkPartition(ctx context.Context, tx pgx.Tx, name string) error {
	if _, ok := parsePartitionName(name); !ok {
		return fmt.Errorf("%w: %q is not an audit partition's name (audit_log_yYYYYmMM)", ErrNoAuditPartition, name)
	}
	have, err := auditPartitions(ctx, tx)
	if err != nil {
		return err
	}
	for _, n := range have {
		if n == name {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrNoAuditPartition, name)
}

// exportRows streams the rows of the partition name into sink, in the
// table's order (about the order of at: rows arrive in it).
func exportRows(ctx context.Context, tx pgx.Tx, name string, sink AuditSink) (int64, error) {
	rows, err := tx.Query(ctx, `SELECT `+auditExportColumns+` FROM `+pgx.Identifier{name}.Sanitize())
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var (
		n               int64
		r               auditfile.Row
		outcome, reason *int16
		state           int16
	)
	for rows.Next() {
		r = auditfile.Row{}
		if err := rows.Scan(&r.ID, &r.At, &r.Namespace, &r.Provider, &r.Key, &r.Op, &outcome, &reason, &state,
			&r.Token, &r.Version, &r.Holder, &r.AttemptID, &r.PayloadSHA256, &r.LoggedAt,
			&r.EffectRecovered, &r.Principal, &r.Transport); err != nil {
			return n, err
		}
		r.At, r.LoggedAt = r.At.UTC(), r.LoggedAt.UTC()
		if outcome != nil {
			r.Outcome = auditfile.OutcomeName(tiers.Outcome(*outcome))
		}
		if reason != nil {
			r.Reason = auditfile.ReasonName(tiers.Reason(*reason))
		}
		r.State = tiers.State(state).String()
		if err := sink.Write(&r); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}
