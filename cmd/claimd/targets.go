package main

import (
	"context"
	"time"

	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// The janitor knows its Target interface, not the backends: the wiring
// builds one for each durable tier here.

// postgresTarget is the janitor's view of the PostgreSQL durable tier:
// passes exclude each other across replicas through the janitor advisory
// lock, and the audit log expires by whole monthly partitions (a DROP TABLE
// leaves no dead tuples behind, where a DELETE of a month of rows would).
func postgresTarget(s *postgres.Store) janitor.Target { return pgTarget{s} }

type pgTarget struct{ s *postgres.Store }

func (t pgTarget) TryLock(ctx context.Context) (func(), bool, error) {
	return t.s.TryJanitorLock(ctx)
}

func (t pgTarget) PruneClaims(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return t.s.Prune(ctx, cutoff, limit)
}

func (t pgTarget) PruneEntities(ctx context.Context, cutoff time.Time, limit int) (tiers.Pruned, error) {
	return t.s.PruneEntities(ctx, cutoff, limit)
}

func (t pgTarget) Count(ctx context.Context, cutoff time.Time) (tiers.Pruned, error) {
	return t.s.CountPrunable(ctx, cutoff)
}

func (t pgTarget) PrepareAudit(ctx context.Context, now time.Time, monthsAhead int) error {
	return t.s.EnsureAuditPartitions(ctx, now, monthsAhead)
}

// ExpireAudit drops the partitions whose whole month ended by cutoff: an
// entry stays up to a month past the retention period, never less.
func (t pgTarget) ExpireAudit(ctx context.Context, cutoff time.Time, _ int, dryRun bool) (janitor.AuditExpiry, error) {
	var (
		names []string
		err   error
	)
	if dryRun {
		names, err = t.s.AuditPartitionsBefore(ctx, cutoff)
	} else {
		names, err = t.s.DropAuditPartitionsBefore(ctx, cutoff)
	}
	return janitor.AuditExpiry{Partitions: names}, err
}

// sqliteTarget is the janitor's view of the embedded durable tier. One
// process writes the file (claimd prune alongside the server waits for
// SQLite's write lock per batch), so there is no janitor lock; the audit log
// is one table, expired by rows in batches.
func sqliteTarget(s *sqlite.Store) janitor.Target { return liteTarget{s} }

type liteTarget struct{ s *sqlite.Store }

func (liteTarget) TryLock(context.Context) (func(), bool, error) { return func() {}, true, nil }

func (t liteTarget) PruneClaims(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return t.s.Prune(ctx, cutoff, limit)
}

func (t liteTarget) PruneEntities(ctx context.Context, cutoff time.Time, limit int) (tiers.Pruned, error) {
	return t.s.PruneEntities(ctx, cutoff, limit)
}

func (t liteTarget) Count(ctx context.Context, cutoff time.Time) (tiers.Pruned, error) {
	return t.s.CountPrunable(ctx, cutoff)
}

func (liteTarget) PrepareAudit(context.Context, time.Time, int) error { return nil }

func (t liteTarget) ExpireAudit(ctx context.Context, cutoff time.Time, limit int, dryRun bool) (janitor.AuditExpiry, error) {
	if dryRun {
		n, err := t.s.CountAuditBefore(ctx, cutoff)
		return janitor.AuditExpiry{Rows: n}, err
	}
	var total int64
	for {
		n, err := t.s.PruneAudit(ctx, cutoff, limit)
		total += int64(n)
		if err != nil || n < limit {
			return janitor.AuditExpiry{Rows: total}, err
		}
		if err := ctx.Err(); err != nil {
			return janitor.AuditExpiry{Rows: total}, err
		}
	}
}
