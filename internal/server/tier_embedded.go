package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// The embedded tiers: an in-process fast tier in front of a SQLite file in
// --data-dir, which this process holds (datadir.go).

// fastInProcess is the fast-tier kind of the embedded tiers: the records
// live on claimd's own heap (runtime.go sizes the collector by it).
const fastInProcess = "memory"

func openEmbedded(ctx context.Context, c *TierConfig, obs twotier.Observer, _ *slog.Logger) (*Tiers, error) {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	durability, err := sqlite.ParseDurability(c.SQLiteDurability) // validate accepted it
	if err != nil {
		return nil, err
	}
	lock, err := lockDataDir(c.DataDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(c.DataDir, "claimd.db")
	lite, err := sqlite.New(ctx, sqlite.Config{Path: path, Durability: durability, Step: c.Step})
	if err != nil {
		lock.unlock()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	fast := memory.New(memory.Config{})
	f, d := c.wrap(fast, lite)
	return &Tiers{
		Store: twotier.New(f, d, twotier.Config{Observer: obs}), Durable: lite, Mode: "embedded (" + path + ")",
		Durability: durability.String(),
		FastKind:   fastInProcess, DurableKind: "sqlite",
		Sources: metrics.Sources{
			FastLiveKeys: func(context.Context) (int64, error) { return int64(fast.Len()), nil },
			DurableStats: func(ctx context.Context) (int64, int, error) {
				n, err := lite.Stats(ctx)
				return n, 0, err // one audit table, no partitions
			},
		},
		Target:   sqliteTarget(lite),
		Sweeper:  fast,
		announce: announceSQLiteDurability(durability.String()),
		release:  lock.unlock,
	}, nil
}

// announceSQLiteDurability shows the embedded tier's durability in
// /metrics and, when it is relaxed, warns at every start what an operator
// chose to risk.
func announceSQLiteDurability(durability string) func(*metrics.Metrics, *slog.Logger) {
	return func(met *metrics.Metrics, log *slog.Logger) {
		met.SetSQLiteDurability(durability)
		if durability == sqlite.DurabilityRelaxed.String() {
			log.Warn("sqlite durability relaxed: commits are answered before they are fsynced (synchronous=NORMAL); "+
				"an OS crash or power loss may lose the last claims and transitions already answered, "+
				"and a provider's retry of a forgotten ACQUIRED or SETTLED runs its side effect again. "+
				"A killed claimd loses nothing. Drop --sqlite-durability=relaxed to fsync every commit",
				"sqlite_durability", durability)
		}
	}
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
