package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/seal"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// ErrUsage marks an error in what was asked for (a value, or values that do
// not go together) rather than in what happened: cmd/claimd exits 2 on it.
// Its messages name the flags, which are the Config's only source.
var ErrUsage = errors.New("usage")

// TierConfig selects the tiers of DESIGN §6: embedded by default;
// PostgreSQL alone with PostgresURL; Redis in front of PostgreSQL with both.
// Each field is the flag of the same name (cmd/claimd/config.go).
type TierConfig struct {
	DataDir          string
	SQLiteDurability string
	PostgresURL      string
	PostgresSchema   string
	RedisURL         string
	// RedisCA, RedisCert and RedisKey are the TLS files of a rediss://
	// fast tier (PostgreSQL takes its own in the URL: sslrootcert,
	// sslcert, sslkey).
	RedisCA, RedisCert, RedisKey string
	// FastKeyring seals the Redis fast tier's records; New loads it
	// (fastkey.go) before it opens the tiers.
	FastKeyring *seal.Keyring

	// Wrap, when not nil, wraps the fast and the durable tier before they
	// are composed: the fault suite's crash points (cmd/claimd's
	// crashpoint_chaos.go, built with -tags chaos). nil in production.
	Wrap func(tiers.Fast, tiers.Durable) (tiers.Fast, tiers.Durable)
	// Step is the durable tiers' Config.Step, the crash points inside
	// their transactions; nil in production.
	Step func(point string, k tiers.Key)
}

// A tierKind is one way of opening the tiers, and all the wiring knows of
// it: open builds the Store and names the kind's janitor target, metric
// sources and start-up checks in the Tiers it returns. Adding a tier is a
// row here and a file of its own (tier_*.go).
type tierKind struct {
	name string
	// chosen reports whether c selects this kind; the first row that does
	// is opened.
	chosen func(c *TierConfig) bool
	open   func(ctx context.Context, c *TierConfig, obs twotier.Observer, log *slog.Logger) (*Tiers, error)
}

var tierKinds = []tierKind{
	{"redis+postgres", func(c *TierConfig) bool { return c.RedisURL != "" }, openRedisPostgres},
	{"postgres", func(c *TierConfig) bool { return c.PostgresURL != "" }, openPostgres},
	{"embedded", func(*TierConfig) bool { return true }, openEmbedded},
}

// Tiers is what the tier flags select: the Store the service calls, the
// durable tier under it, and the views of them that metrics sampling and
// the janitor need.
type Tiers struct {
	Store   tiers.Store
	Durable tiers.Durable
	// Mode names the tiers for the start-up log line.
	Mode string
	// Durability is what an answered write survives, for the start-up log
	// line: the embedded tier's full or relaxed, or postgres (PostgreSQL's
	// own fsync and synchronous_commit settings decide).
	Durability string
	// FastKind and DurableKind are claimd_tiers_info's labels; FastKind is
	// fastInProcess for the embedded tiers.
	FastKind, DurableKind string
	// Sources are the background gauges' readers.
	Sources metrics.Sources
	// Target is the janitor's view of the durable tier (retention).
	Target janitor.Target
	// Sweeper is the in-process fast tier, or nil.
	Sweeper janitor.Sweeper

	// announce shows at start what an operator chose to risk; nil when
	// there is nothing to show.
	announce func(*metrics.Metrics, *slog.Logger)
	// redis is the Redis fast tier, or nil (--require-noeviction).
	redis *redis.Store
	// release runs after the Store closes (the embedded tiers' hold on
	// --data-dir); nil for the server tiers.
	release func() error
}

// OpenTiers checks c and opens the tiers it selects (tierKinds). obs, when
// not nil, is told of the fast tier's failures.
func OpenTiers(ctx context.Context, c *TierConfig, obs twotier.Observer, log *slog.Logger) (*Tiers, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	for _, k := range tierKinds {
		if k.chosen(c) {
			return k.open(ctx, c, obs, log)
		}
	}
	return nil, errors.New("no tier kind chosen") // the last row chooses every config
}

// Validate checks the flags that need no I/O, before anything is opened.
func (c *TierConfig) Validate() error {
	if c.RedisURL != "" && c.PostgresURL == "" {
		return fmt.Errorf("%w: --redis-url needs --postgres-url: Redis is a cache, PostgreSQL the source of truth", ErrUsage)
	}
	if c.redisTLS() && !strings.HasPrefix(c.RedisURL, "rediss://") {
		return fmt.Errorf("%w: --redis-ca, --redis-cert and --redis-key need a rediss:// --redis-url", ErrUsage)
	}
	d, err := sqlite.ParseDurability(c.SQLiteDurability)
	if err != nil {
		return fmt.Errorf("%w: --sqlite-durability: %v", ErrUsage, err)
	}
	if d != sqlite.DurabilityFull && c.PostgresURL != "" {
		return fmt.Errorf("%w: --sqlite-durability=%s applies to the embedded tier only; PostgreSQL's durability is its own fsync and synchronous_commit", ErrUsage, d)
	}
	return nil
}

// wrap applies c.Wrap, when there is one.
func (c *TierConfig) wrap(f tiers.Fast, d tiers.Durable) (tiers.Fast, tiers.Durable) {
	if c.Wrap == nil {
		return f, d
	}
	return c.Wrap(f, d)
}

// Close closes the Store, then releases what the kind holds.
func (t *Tiers) Close() error {
	if t == nil {
		return nil
	}
	err := t.Store.Close()
	if t.release != nil {
		err = errors.Join(err, t.release())
	}
	return err
}

// Janitor builds the janitor of t with r's settings.
func (t *Tiers) Janitor(r RetentionConfig, cfg janitor.Config) (*janitor.Janitor, error) {
	cfg.Target = t.Target
	if r.AuditExportDir != "" {
		ex, ok := t.Target.(interface{ exportingTo(string) janitor.Target })
		if !ok {
			return nil, fmt.Errorf("%w: --audit-export-dir exports PostgreSQL's monthly audit partitions; the %s tier deletes its audit rows one by one", ErrUsage, t.DurableKind)
		}
		cfg.Target = ex.exportingTo(r.AuditExportDir)
	}
	cfg.Grace, cfg.BatchSize, cfg.Retention = r.Grace, r.Batch, r.Retention
	return janitor.New(cfg)
}
