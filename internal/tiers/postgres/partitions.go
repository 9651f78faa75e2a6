package postgres

import (
	"context"
	"fmt"
	"sort"
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
			sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF audit_log FOR VALUES FROM ('%s') TO ('%s')`,
				pgx.Identifier{partitionName(m)}.Sanitize(),
				m.Format(time.RFC3339), m.AddDate(0, 1, 0).Format(time.RFC3339))
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
// the dead tuples a DELETE would leave behind.
func (s *Store) DropAuditPartitionsBefore(ctx context.Context, cutoff time.Time) (dropped []string, err error) {
	have, err := auditPartitions(ctx, s.pool)
	if err != nil {
		return nil, fail(ctx, "list audit partitions", err)
	}
	dropped = partitionsEndingBy(have, cutoff)
	if len(dropped) == 0 {
		return nil, nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockSchema(ctx, tx); err != nil {
			return err
		}
		for _, n := range dropped {
			// IF EXISTS: another process may have dropped it meanwhile.
			if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{n}.Sanitize()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fail(ctx, "drop audit partitions", err)
	}
	return dropped, nil
}

// partitionsEndingBy picks, from names, the audit partitions whose whole
// month ends at or before cutoff, oldest first: the ones retention drops.
func partitionsEndingBy(names []string, cutoff time.Time) []string {
	var out []string
	for _, n := range names {
		if m, ok := parsePartitionName(n); ok && !m.AddDate(0, 1, 0).After(cutoff) {
			out = append(out, n)
		}
	}
	sort.Strings(out) // the names sort by month
	return out
}
