// Package janitor keeps the durable tier within its retention: it deletes
// claims whose dedup window ended more than a grace period ago, and the
// entities and deferral rows whose last window ended by then, in bounded
// batches; it creates the audit log's partitions ahead of the months that
// will need them; and it removes audit entries older than the retention
// period. Every replica runs one, and one at a time is active: on
// PostgreSQL a pass runs under an advisory lock (postgres.TryJanitorLock),
// and a replica that finds it held skips its pass. The embedded tier (SQLite)
// has one writer process and just runs.
//
// Deleting a claim past its window changes no answer: a claim of that key
// after its window is ACQUIRED/WINDOW_EXPIRED with the row, ACQUIRED/NEW
// without it. The grace period keeps the row a little longer for on-call
// debugging (Get) and so that no clock skew between replicas makes a
// difference.
package janitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
)

// Defaults of Config.
const (
	DefaultInterval = 10 * time.Minute
	DefaultGrace    = time.Hour
	// DefaultRetention keeps the live audit log to 35 days, which is more
	// than the longest window of a built-in provider (Adyen's 31 days), so
	// every claim whose duplicates are still suppressed can be explained from
	// it; PostgreSQL drops whole months, so it holds 35 to 66 days. Older
	// months belong in Parquet files (--audit-export-dir), not in the
	// database: at 2,000 events/s a 400-day log was 46 TiB.
	DefaultRetention       = 35 * 24 * time.Hour
	DefaultBatchSize       = 1000
	DefaultPartitionsAhead = 3
)

// Target is a durable tier the janitor keeps. The janitor knows this
// interface, not the backends: cmd/claimd builds one for PostgreSQL and one
// for SQLite.
type Target interface {
	// TryLock makes the caller the active janitor for one pass, without
	// waiting. ok is false when another process is; release, set when ok,
	// ends the pass.
	TryLock(ctx context.Context) (release func(), ok bool, err error)
	// PruneClaims deletes up to limit claims whose window ended before
	// cutoff; a caller loops until it returns less than limit.
	PruneClaims(ctx context.Context, cutoff time.Time, limit int) (int, error)
	// PruneEntities deletes up to limit entities (with their applied
	// events) and up to limit deferral rows whose last window ended before
	// cutoff (tiers.EntityPruner); a caller loops until both counts are
	// below limit.
	PruneEntities(ctx context.Context, cutoff time.Time, limit int) (tiers.Pruned, error)
	// Count counts what PruneClaims and PruneEntities would delete, every
	// kind (dry run).
	Count(ctx context.Context, cutoff time.Time) (tiers.Pruned, error)
	// PrepareAudit makes the audit log ready for the writes of now's month
	// and monthsAhead more (creates partitions), where that applies.
	PrepareAudit(ctx context.Context, now time.Time, monthsAhead int) error
	// ExpireAudit removes the audit entries written before cutoff, or with
	// dryRun counts what it would remove. Partitioned logs drop whole
	// months (Partitions); the others delete rows in batches of limit (Rows).
	ExpireAudit(ctx context.Context, cutoff time.Time, limit int, dryRun bool) (AuditExpiry, error)
}

// AuditExpiry is what ExpireAudit removed (or would remove).
type AuditExpiry struct {
	Partitions []string // dropped partitions, oldest first
	Rows       int64    // deleted rows
	// Exported are the files the dropped partitions were exported to
	// first (--audit-export-dir), in Partitions' order; ExportFailed is
	// the partition whose export failed and was kept, "" when none did.
	Exported     []string
	ExportFailed string
}

// Sweeper is a process-local fast tier whose expired entries only go when
// swept (memory.Store). Every replica sweeps its own, lock or no lock.
type Sweeper interface {
	Sweep(now time.Time) int
}

// Observer is told of every pass; internal/metrics implements it.
type Observer interface {
	JanitorPass(r Report, err error)
}

// Config configures a Janitor. Zero values mean the defaults, except Grace,
// where zero means none (claims go as soon as their window ends).
type Config struct {
	Target          Target      // required
	Fast            Sweeper     // optional
	Clock           clock.Clock // default clock.Real: cutoffs are computed from it
	Interval        time.Duration
	Grace           time.Duration
	Retention       time.Duration
	BatchSize       int
	PartitionsAhead int
	Observer        Observer
	Logger          *slog.Logger
}

// Janitor runs retention passes. It is safe for concurrent use; concurrent
// passes exclude each other through Target.TryLock.
type Janitor struct {
	cfg Config
}

// New checks cfg and applies its defaults.
func New(cfg Config) (*Janitor, error) {
	if cfg.Target == nil {
		return nil, errors.New("janitor: Config.Target is required")
	}
	if cfg.Interval < 0 || cfg.Grace < 0 || cfg.Retention < 0 || cfg.BatchSize < 0 || cfg.PartitionsAhead < 0 {
		return nil, fmt.Errorf("janitor: negative setting in %+v", cfg)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.PartitionsAhead == 0 {
		cfg.PartitionsAhead = DefaultPartitionsAhead
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Janitor{cfg: cfg}, nil
}

// Report is what one pass did (or, in a dry run, would do).
type Report struct {
	Started      time.Time // the janitor clock at the start of the pass
	Duration     time.Duration
	DryRun       bool
	Skipped      bool      // another replica held the janitor lock: nothing done
	ClaimsCutoff time.Time // claims, entities and deferrals whose window ended before this go
	AuditCutoff  time.Time // audit entries written before this go
	Claims       int64     // claims deleted
	Entities     int64     // entities deleted
	EntityEvents int64     // their applied events, deleted with them
	Deferrals    int64     // deferral rows deleted
	Audit        AuditExpiry
	FastSwept    int // expired entries dropped from the process-local fast tier
}

// Pass runs one retention pass: sweep the local fast tier; then, as the
// active janitor, create the audit partitions ahead, delete expired claims
// batch by batch, then expired entities and deferrals, and expire the audit
// log. A dry run takes no lock and
// changes nothing: it counts. A pass stops at the first error, keeping what
// it did so far (every step is idempotent; the next pass goes on).
func (j *Janitor) Pass(ctx context.Context, dryRun bool) (rep Report, err error) {
	now := j.cfg.Clock.Now()
	started := time.Now()
	rep = Report{
		Started:      now,
		DryRun:       dryRun,
		ClaimsCutoff: now.Add(-j.cfg.Grace),
		AuditCutoff:  now.Add(-j.cfg.Retention),
	}
	defer func() {
		rep.Duration = time.Since(started)
		if j.cfg.Observer != nil {
			j.cfg.Observer.JanitorPass(rep, err)
		}
		j.log(ctx, rep, err)
	}()
	if dryRun {
		n, err := j.cfg.Target.Count(ctx, rep.ClaimsCutoff)
		if err != nil {
			return rep, fmt.Errorf("janitor: count claims: %w", err)
		}
		rep.add(n)
		if rep.Audit, err = j.cfg.Target.ExpireAudit(ctx, rep.AuditCutoff, j.cfg.BatchSize, true); err != nil {
			return rep, fmt.Errorf("janitor: count audit: %w", err)
		}
		return rep, nil
	}

	if j.cfg.Fast != nil {
		rep.FastSwept = j.cfg.Fast.Sweep(now)
	}
	release, ok, err := j.cfg.Target.TryLock(ctx)
	if err != nil {
		return rep, fmt.Errorf("janitor: lock: %w", err)
	}
	if !ok {
		rep.Skipped = true
		return rep, nil
	}
	defer release()

	if err := j.cfg.Target.PrepareAudit(ctx, now, j.cfg.PartitionsAhead); err != nil {
		return rep, fmt.Errorf("janitor: create audit partitions: %w", err)
	}
	for {
		n, err := j.cfg.Target.PruneClaims(ctx, rep.ClaimsCutoff, j.cfg.BatchSize)
		rep.Claims += int64(n)
		if err != nil {
			return rep, fmt.Errorf("janitor: prune claims: %w", err)
		}
		if n < j.cfg.BatchSize {
			break
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	for {
		n, err := j.cfg.Target.PruneEntities(ctx, rep.ClaimsCutoff, j.cfg.BatchSize)
		rep.add(n)
		if err != nil {
			return rep, fmt.Errorf("janitor: prune entities: %w", err)
		}
		if n.Entities < int64(j.cfg.BatchSize) && n.Deferrals < int64(j.cfg.BatchSize) {
			break
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	if rep.Audit, err = j.cfg.Target.ExpireAudit(ctx, rep.AuditCutoff, j.cfg.BatchSize, false); err != nil {
		return rep, fmt.Errorf("janitor: expire audit: %w", err)
	}
	return rep, nil
}

// add counts n in rep.
func (rep *Report) add(n tiers.Pruned) {
	rep.Claims += n.Claims
	rep.Entities += n.Entities
	rep.EntityEvents += n.EntityEvents
	rep.Deferrals += n.Deferrals
}

// Run runs a pass at once and then every Interval until ctx ends. A failed
// pass is logged and counted; the next one tries again.
func (j *Janitor) Run(ctx context.Context) {
	t := time.NewTicker(j.cfg.Interval)
	defer t.Stop()
	for {
		j.Pass(ctx, false) //nolint:errcheck // reported by log and Observer
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (j *Janitor) log(ctx context.Context, rep Report, err error) {
	if err != nil {
		if ctx.Err() == nil {
			j.cfg.Logger.Warn("janitor pass failed", "err", err, "claims_deleted", rep.Claims,
				"audit_partitions_dropped", rep.Audit.Partitions, "audit_export_failed", rep.Audit.ExportFailed)
		}
		return
	}
	level := slog.LevelInfo
	if rep.Skipped || (rep.Claims == 0 && rep.Entities == 0 && rep.Deferrals == 0 &&
		rep.Audit.Rows == 0 && len(rep.Audit.Partitions) == 0) {
		level = slog.LevelDebug // an idle pass every few minutes is noise
	}
	j.cfg.Logger.Log(ctx, level, "janitor pass",
		"dry_run", rep.DryRun, "skipped", rep.Skipped,
		"claims_cutoff", rep.ClaimsCutoff, "claims_deleted", rep.Claims,
		"entities_deleted", rep.Entities, "entity_events_deleted", rep.EntityEvents, "deferrals_deleted", rep.Deferrals,
		"audit_cutoff", rep.AuditCutoff, "audit_partitions_dropped", rep.Audit.Partitions, "audit_exported", rep.Audit.Exported,
		"audit_rows_deleted", rep.Audit.Rows,
		"fast_swept", rep.FastSwept, "duration_ms", rep.Duration.Milliseconds())
}
