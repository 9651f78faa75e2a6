package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit partitions cover one UTC month each, [first instant of the month,
// first instant of the next), and are named audit_log_yYYYYmMM.
const partitionPrefix = "audit_log_y"

// db is what partition maintenance needs from a connection or a pool.
type db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// monthStart returns the first instant of t's month in UTC.
func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// partitionName names the audit partition of the month starting at m.
func partitionName(m time.Time) string {
	return fmt.Sprintf("%s%04dm%02d", partitionPrefix, m.Year(), int(m.Month()))
}

// partitionBounds is the bound clause of the audit partition of the month
// starting at m: FOR VALUES FROM (m) TO (the next month).
func partitionBounds(m time.Time) string {
	return fmt.Sprintf(`FOR VALUES FROM ('%s') TO ('%s')`, m.Format(time.RFC3339), m.AddDate(0, 1, 0).Format(time.RFC3339))
}

// parsePartitionName returns the month an audit partition covers; ok is
// false for a table this package did not name.
func parsePartitionName(name string) (month time.Time, ok bool) {
	rest, found := strings.CutPrefix(name, partitionPrefix)
	if !found || len(rest) != len("2006m01") || rest[4] != 'm' {
		return time.Time{}, false
	}
	y, err1 := strconv.Atoi(rest[:4])
	m, err2 := strconv.Atoi(rest[5:])
	if err1 != nil || err2 != nil || m < 1 || m > 12 {
		return time.Time{}, false
	}
	return time.Date(y, time.Month(m), 1, 0, 0, 0, 0, time.UTC), true
}

// auditPartitions lists the partitions attached to audit_log.
func auditPartitions(ctx context.Context, d db) ([]string, error) {
	rows, _ := d.Query(ctx, `SELECT c.relname::text
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_log'::regclass
		ORDER BY 1`)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// maintenanceLockTimeout bounds how long creating or dropping a partition
// waits for its lock on audit_log. That lock conflicts with the audit inserts
// of every write, and while it waits in the lock queue the writes queue
// behind it: an analyst's long query on audit_log must cost maintenance a
// retry (the error wraps ErrUnavailable), not stall every claim.
const maintenanceLockTimeout = "2s"

// lockSchema serialises partition maintenance with Migrate and with other
// processes (the transaction-level schema advisory lock; re-entrant for
// Migrate's own session) and sets maintenanceLockTimeout for the rest of the
// transaction.
func lockSchema(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLockKey); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+maintenanceLockTimeout+`'`)
	return err
}

// EnsureAuditPartitions creates the audit partitions of now's month and of
// the monthsAhead months after it, where missing. It is idempotent and safe
// to run from several processes at once: the creation runs under the schema
// advisory lock, and takes no lock at all when every partition exists.
func (s *Store) EnsureAuditPartitions(ctx context.Context, now time.Time, monthsAhead int) error {
	return ensureAuditPartitions(ctx, s.pool, now, monthsAhead)
}

func ensureAuditPartitions(ctx context.Context, d db, now time.Time, monthsAhead int) error {
	if monthsAhead < 0 {
		return fmt.Errorf("postgres: EnsureAuditPartitions: monthsAhead %d is negative", monthsAhead)
	}
	have, err := auditPartitions(ctx, d)
	if err != nil {
		return fail(ctx, "list audit partitions", err)
	}
	exists := make(map[string]bool, len(have))
	for _, n := range have {
		exists[n] = true
	}
	var missing []time.Time
	for i, m := 0, monthStart(now); i <= monthsAhead; i, m = i+1, m.AddDate(0, 1, 0) {
		if !exists[partitionName(m)] {
			missing = append(missing, m)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	err = pgx.BeginFunc(ctx, d, func(tx pgx.Tx) error {
		if err := lockSchema(ctx, tx); err != nil {
			return err
		}
		for _, m := range missing {
			// IF NOT EXISTS: another process may have created it between
			// our listing and our lock.
			sql := `CREATE TABLE IF NOT EXISTS ` + pgx.Identifier{partitionName(m)}.Sanitize() + ` PARTITION OF audit_log ` + partitionBounds(m)
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	})
	return fail(ctx, "create audit partitions", err)
}

// DropAuditPartitionsBefore drops the audit partitions whose whole month
// ends at or before cutoff (retention), and returns their names, oldest
// first. Dropping a partition removes a month of rows at once, with none of
// the dead tuples a DELETE would leave behind. Each is detached first, with
// DETACH PARTITION CONCURRENTLY, and dropped once it is a table of its own:
// audit_log is never locked against writes, neither while the detach waits
// for a reader of the old month nor while the drop's commit removes the
// month's files (seconds per few GiB, minutes for a busy month), which a
// plain DROP of the partition would do holding audit_log exclusively, with
// every claim's audit row queued behind it. On an error the partitions
// dropped so far are returned with it; one left half done is finished by
// the next call (detachedMark).
func (s *Store) DropAuditPartitionsBefore(ctx context.Context, cutoff time.Time) (dropped []string, err error) {
	parts, err := expiringPartitions(ctx, s.pool)
	if err != nil {
		return nil, fail(ctx, "list audit partitions", err)
	}
	for _, p := range parts {
		if !p.endsBy(cutoff) {
			continue
		}
		if err := s.withSchemaLock(ctx, func(conn *pgx.Conn) error {
			if err := detachPartition(ctx, conn, p); err != nil {
				return err
			}
			return dropDetached(ctx, conn, p.name)
		}); err != nil {
			return dropped, fail(ctx, "drop audit partition "+p.name, err)
		}
		dropped = append(dropped, p.name)
	}
	return dropped, nil
}

// detachedMark is the comment an audit partition carries from just before
// claimd detaches it until it is dropped. A table of the schema named like
// an audit partition, detached and marked, is one a pass left half done (a
// crash, a lost connection, an export that failed twice): the next pass
// exports or drops it as if it were still attached. A partition someone
// detached by hand has no mark, and claimd leaves it alone.
const detachedMark = "claimd: detached to drop"

// partitionState is where an audit partition stands in its detach.
type partitionState int

const (
	attached      partitionState = iota
	detachPending                // a DETACH ... CONCURRENTLY that did not finish (lock timeout, lost session)
	detached                     // a table of its own, marked detachedMark
)

// expiring is an audit partition maintenance may export and drop.
type expiring struct {
	name  string
	state partitionState
}

// endsBy says whether p's whole month ends at or before cutoff.
func (p expiring) endsBy(cutoff time.Time) bool {
	m, ok := parsePartitionName(p.name)
	return ok && !m.AddDate(0, 1, 0).After(cutoff)
}

// expiringPartitions lists the audit partitions, attached or on their way
// out (detachedMark), oldest first.
func expiringPartitions(ctx context.Context, d db) ([]expiring, error) {
	rows, _ := d.Query(ctx, `SELECT c.relname::text, i.inhrelid IS NOT NULL, coalesce(i.inhdetachpending, false)
		FROM pg_class c
		LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = 'audit_log'::regclass
		WHERE c.relkind = 'r'
			AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'audit_log'::regclass)
			AND (i.inhrelid IS NOT NULL OR obj_description(c.oid, 'pg_class') = $1)
		ORDER BY 1`, detachedMark)
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (expiring, error) {
		var (
			p                 expiring
			inherits, pending bool
		)
		err := r.Scan(&p.name, &inherits, &pending)
		switch {
		case !inherits:
			p.state = detached
		case pending:
			p.state = detachPending
		}
		return p, err
	})
	if err != nil {
		return nil, err
	}
	out := parts[:0]
	for _, p := range parts {
		if _, ok := parsePartitionName(p.name); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// withSchemaLock runs fn on a session of its own that holds the schema
// advisory lock (serialising it with Migrate and other partition changes)
// and waits at most maintenanceLockTimeout for any lock. The session is
// closed afterwards, never pooled: that releases the lock whatever
// happened, and a DETACH ... CONCURRENTLY needs a session outside any
// transaction block anyway.
func (s *Store) withSchemaLock(ctx context.Context, fn func(*pgx.Conn) error) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, `SET lock_timeout = '`+maintenanceLockTimeout+`'`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, schemaLockKey); err != nil {
		return err
	}
	return fn(conn)
}

// detachPartition takes p out of audit_log without locking audit_log
// against writes: it marks p (detachedMark), then DETACH PARTITION
// CONCURRENTLY (SHARE UPDATE EXCLUSIVE on audit_log, which the inserts of
// other months never wait for), or FINALIZE for one an earlier detach left
// pending. It waits for readers of p, up to maintenanceLockTimeout each.
func detachPartition(ctx context.Context, conn *pgx.Conn, p expiring) error {
	if p.state == detached {
		return nil
	}
	id := pgx.Identifier{p.name}.Sanitize()
	if _, err := conn.Exec(ctx, `COMMENT ON TABLE `+id+` IS '`+detachedMark+`'`); err != nil {
		return err
	}
	how := "CONCURRENTLY"
	if p.state == detachPending {
		how = "FINALIZE"
	}
	_, err := conn.Exec(ctx, `ALTER TABLE audit_log DETACH PARTITION `+id+` `+how)
	return err
}

// dropDetached drops the detached audit partition name. Only that table is
// locked while its commit removes the files.
func dropDetached(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
	return err
}

// reattachPartition puts a partition detachPartition took out back into
// audit_log (an archive whose export failed), unmarked. The CHECK
// constraint DETACH ... CONCURRENTLY left on it spares ATTACH the scan of
// the month, and ATTACH takes only SHARE UPDATE EXCLUSIVE on audit_log.
func reattachPartition(ctx context.Context, conn *pgx.Conn, name string) error {
	m, ok := parsePartitionName(name)
	if !ok {
		return fmt.Errorf("%q is not an audit partition's name", name)
	}
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, `ALTER TABLE audit_log ATTACH PARTITION `+id+` `+partitionBounds(m)); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `COMMENT ON TABLE `+id+` IS NULL`)
	return err
}
