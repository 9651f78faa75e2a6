package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// fastInProcess is the fast-tier kind of the embedded tiers: the records
// live on claimd's own heap (runtime.go sizes the collector by it).
const fastInProcess = "memory"

// stores is what the tier flags select: the Store the service calls, the
// durable tier under it, and the views of them that metrics sampling and
// the janitor need.
type stores struct {
	store   tiers.Store
	durable tiers.Durable
	mode    string // for the start-up log line
	// durability is what an answered write survives, for the start-up log
	// line: the embedded tier's full or relaxed, or postgres (PostgreSQL's
	// own fsync and synchronous_commit settings decide).
	durability string

	fastKind, durableKind string          // claimd_tiers_info; fastInProcess for the embedded tiers
	sources               metrics.Sources // background gauges
	target                janitor.Target  // retention
	sweeper               janitor.Sweeper // the in-process fast tier, or nil
	redis                 *redis.Store    // the Redis fast tier, or nil
	// lock is the embedded tiers' hold on --data-dir, released by Close
	// after the tiers; nil for the server tiers.
	lock *dataDirLock
}

// openStores builds the tiers of DESIGN §6: embedded by default; PostgreSQL
// alone with --postgres-url; Redis in front of PostgreSQL with both.
func openStores(ctx context.Context, c *commonConfig, obs twotier.Observer, log *slog.Logger) (*stores, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.PostgresURL != "" {
		pg, err := postgres.New(ctx, postgres.Config{URL: c.PostgresURL, Schema: c.PostgresSchema, Migrate: true, Step: crashStep()})
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		st := &stores{
			store: pg, durable: pg, mode: "postgres", durability: "postgres",
			fastKind: "none", durableKind: "postgres",
			sources: metrics.Sources{DurableStats: pg.Stats},
			target:  postgresTarget(pg),
		}
		if c.RedisURL == "" {
			return st, nil
		}
		rcfg, err := c.redisConfig(log)
		if err != nil {
			pg.Close()
			return nil, err
		}
		rd, err := redis.New(ctx, rcfg)
		if err != nil {
			pg.Close()
			return nil, fmt.Errorf("redis: %w", err)
		}
		f, d := crashPoints(rd, pg) // no-ops unless built with -tags chaos
		st.store, st.mode, st.fastKind = twotier.New(f, d, twotier.Config{Observer: obs}), "redis+postgres", "redis"
		st.sources.FastLiveKeys = rd.LiveKeys
		st.sources.FastEviction = func(ctx context.Context) (metrics.Eviction, error) { return redisEviction(ctx, rd) }
		st.redis = rd
		return st, nil
	}
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
	lite, err := sqlite.New(ctx, sqlite.Config{Path: path, Durability: durability, Step: crashStep()})
	if err != nil {
		lock.unlock()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	fast := memory.New(memory.Config{})
	f, d := crashPoints(fast, lite) // no-ops unless built with -tags chaos
	return &stores{
		store: twotier.New(f, d, twotier.Config{Observer: obs}), durable: lite, mode: "embedded (" + path + ")",
		durability: durability.String(),
		fastKind:   fastInProcess, durableKind: "sqlite",
		sources: metrics.Sources{
			FastLiveKeys: func(context.Context) (int64, error) { return int64(fast.Len()), nil },
			DurableStats: func(ctx context.Context) (int64, int, error) {
				n, err := lite.Stats(ctx)
				return n, 0, err // one audit table, no partitions
			},
		},
		target:  sqliteTarget(lite),
		sweeper: fast,
		lock:    lock,
	}, nil
}

// announceDurability shows the embedded tier's durability in /metrics and,
// when it is relaxed, warns at every start what an operator chose to risk.
func (s *stores) announceDurability(met *metrics.Metrics, log *slog.Logger) {
	if s.durableKind != "sqlite" {
		return
	}
	met.SetSQLiteDurability(s.durability)
	if s.durability == sqlite.DurabilityRelaxed.String() {
		log.Warn("sqlite durability relaxed: commits are answered before they are fsynced (synchronous=NORMAL); "+
			"an OS crash or power loss may lose the last claims and transitions already answered, "+
			"and a provider's retry of a forgotten ACQUIRED or SETTLED runs its side effect again. "+
			"A killed claimd loses nothing. Drop --sqlite-durability=relaxed to fsync every commit",
			"sqlite_durability", s.durability)
	}
}

// redisEviction reads rd's eviction policy for the metrics sampler and
// --require-noeviction. A Redis that refuses CONFIG GET has an unknown
// policy, which is not an error.
func redisEviction(ctx context.Context, rd *redis.Store) (metrics.Eviction, error) {
	policy, err := rd.EvictionPolicy(ctx)
	switch {
	case errors.Is(err, redis.ErrPolicyHidden):
		return metrics.Eviction{}, nil
	case err != nil:
		return metrics.Eviction{}, err
	}
	return metrics.Eviction{Policy: policy, Known: true, Unsafe: redis.EvictsClaims(policy)}, nil
}

func (s *stores) Close() error {
	if s == nil {
		return nil
	}
	err := s.store.Close()
	return errors.Join(err, s.lock.unlock())
}
