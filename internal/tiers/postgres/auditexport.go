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
func (s *Store) ExportAuditPartition(ctx context.Context, name string, sink AuditSink) (int64, error) {
	if _, err := findExpiring(ctx, s.pool, name); err != nil {
		return 0, fail(ctx, "export audit partition "+name, err)
	}
	rows, err := s.exportSnapshot(ctx, name, sink)
	return rows, fail(ctx, "export audit partition "+name, err)
}

// exportSnapshot streams every row of the audit table name into sink from
// one snapshot (a REPEATABLE READ, READ ONLY transaction), then commits
// sink.
func (s *Store) exportSnapshot(ctx context.Context, name string, sink AuditSink) (rows int64, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if rows, err = exportRows(ctx, tx, name, sink); err != nil {
			return err
		}
		return sink.Commit()
	})
	return rows, err
}

// ArchiveAuditPartition exports the audit partition name to sink, as
// ExportAuditPartition does, and drops it once sink committed. It detaches
// the partition first (DETACH PARTITION CONCURRENTLY, as
// DropAuditPartitionsBefore does): from then on no write can land in it (a
// write to that month, which only a clock skewed by the whole retention
// period would make, fails as it would after the drop), so the file holds
// every row the drop removes, and audit_log is never locked against other
// months' writes, neither during the export nor during the drop. When the
// export or the commit fails, the partition is attached again (the next
// pass tries again); if even that fails, it stays detached and marked
// (detachedMark), and the next pass exports it from there.
func (s *Store) ArchiveAuditPartition(ctx context.Context, name string, sink AuditSink) (rows int64, err error) {
	p, err := findExpiring(ctx, s.pool, name)
	if err != nil {
		return 0, fail(ctx, "archive audit partition "+name, err)
	}
	if err := s.withSchemaLock(ctx, func(conn *pgx.Conn) error { return detachPartition(ctx, conn, p) }); err != nil {
		return 0, fail(ctx, "archive audit partition "+name+": detach", err)
	}
	rows, err = s.exportSnapshot(ctx, name, sink)
	if err != nil {
		// Attached again even when ctx ended: a month out of audit_log's
		// reads until the next pass is worse than a few more seconds.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := s.withSchemaLock(rctx, func(conn *pgx.Conn) error { return reattachPartition(rctx, conn, name) }); rerr != nil {
			err = fmt.Errorf("%w (and attaching it again failed, so it stays detached for the next pass: %v)", err, rerr)
		}
		return rows, fail(ctx, "archive audit partition "+name, err)
	}
	err = s.withSchemaLock(ctx, func(conn *pgx.Conn) error { return dropDetached(ctx, conn, name) })
	return rows, fail(ctx, "archive audit partition "+name+": drop", err)
}

// findExpiring returns the audit partition name, attached or on its way
// out (detachedMark), or ErrNoAuditPartition.
func findExpiring(ctx context.Context, d db, name string) (expiring, error) {
	if _, ok := parsePartitionName(name); !ok {
		return expiring{}, fmt.Errorf("%w: %q is not an audit partition's name (audit_log_yYYYYmMM)", ErrNoAuditPartition, name)
	}
	parts, err := expiringPartitions(ctx, d)
	if err != nil {
		return expiring{}, err
	}
	for _, p := range parts {
		if p.name == name {
			return p, nil
		}
	}
	return expiring{}, fmt.Errorf("%w: %s", ErrNoAuditPartition, name)
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
