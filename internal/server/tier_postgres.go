package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/claimd/claimd/internal/auditfile"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// The PostgreSQL durable tier, alone (--postgres-url) or behind Redis
// (tier_redis.go).

// openPostgres opens PostgreSQL alone; a fast tier in front
// (openRedisPostgres) replaces Store and FastKind.
func openPostgres(ctx context.Context, c *TierConfig, _ twotier.Observer, _ *slog.Logger) (*Tiers, error) {
	pg, err := postgres.New(ctx, postgres.Config{URL: c.PostgresURL, Schema: c.PostgresSchema, Migrate: true, Step: c.Step})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return &Tiers{
		Store: pg, Durable: pg, Mode: "postgres", Durability: "postgres",
		FastKind: "none", DurableKind: "postgres",
		Sources: metrics.Sources{DurableStats: pg.EstimatedStats},
		Target:  postgresTarget(pg),
	}, nil
}

// postgresTarget is the janitor's view of the PostgreSQL durable tier:
// passes exclude each other across replicas through the janitor advisory
// lock, and the audit log expires by whole monthly partitions, each
// detached concurrently and then dropped (no dead tuples behind, where a
// DELETE of a month of rows would leave them; no lock on audit_log that
// claims would wait for).
func postgresTarget(s *postgres.Store) janitor.Target { return pgTarget{s: s} }

type pgTarget struct {
	s *postgres.Store
	// exportDir, when set (--audit-export-dir), receives each partition
	// retention drops as <partition>.parquet before it is dropped.
	exportDir string
}

// exportingTo is t archiving to dir.
func (t pgTarget) exportingTo(dir string) janitor.Target {
	t.exportDir = dir
	return t
}

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
// entry stays up to a month past the retention period, never less. With an
// export directory, each partition is first written to it, oldest first,
// and dropped only once its file is durable (ArchiveAuditPartition); the
// first export that fails stops the pass and keeps its partition and the
// younger ones, for the next pass to try again.
func (t pgTarget) ExpireAudit(ctx context.Context, cutoff time.Time, _ int, dryRun bool) (janitor.AuditExpiry, error) {
	var (
		names []string
		err   error
	)
	switch {
	case dryRun:
		names, err = t.s.AuditPartitionsBefore(ctx, cutoff)
	case t.exportDir != "":
		return t.archiveBefore(ctx, cutoff)
	default:
		names, err = t.s.DropAuditPartitionsBefore(ctx, cutoff)
	}
	return janitor.AuditExpiry{Partitions: names}, err
}

func (t pgTarget) archiveBefore(ctx context.Context, cutoff time.Time) (janitor.AuditExpiry, error) {
	var ex janitor.AuditExpiry
	names, err := t.s.AuditPartitionsBefore(ctx, cutoff)
	if err != nil {
		return ex, err
	}
	for _, name := range names {
		path, err := t.archive(ctx, name)
		if err != nil {
			ex.ExportFailed = name
			return ex, fmt.Errorf("export %s to %s (the partition is kept; the next pass tries again): %w", name, t.exportDir, err)
		}
		ex.Partitions = append(ex.Partitions, name)
		ex.Exported = append(ex.Exported, path)
	}
	return ex, nil
}

// archive exports the partition name to exportDir/name.parquet and drops it.
func (t pgTarget) archive(ctx context.Context, name string) (string, error) {
	f, err := auditfile.Create(t.exportDir, name+".parquet")
	if err != nil {
		return "", err
	}
	defer f.Close() // removes the temporary file of a failed export
	if _, err := t.s.ArchiveAuditPartition(ctx, name, f); err != nil {
		return "", err
	}
	return f.Path(), nil
}
