package main

import (
	"context"
	"fmt"
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

// stores is what the tier flags select: the Store the service calls, the
// durable tier under it, and the views of them that metrics sampling and
// the janitor need.
type stores struct {
	store   tiers.Store
	durable tiers.Durable
	mode    string // for the start-up log line

	fastKind, durableKind string          // claimd_tiers_info
	sources               metrics.Sources // background gauges
	target                janitor.Target  // retention
	sweeper               janitor.Sweeper // the in-process fast tier, or nil
}

// openStores builds the tiers of DESIGN §6: embedded by default; PostgreSQL
// alone with --postgres-url; Redis in front of PostgreSQL with both.
func openStores(ctx context.Context, c *commonConfig, obs twotier.Observer) (*stores, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.PostgresURL != "" {
		pg, err := postgres.New(ctx, postgres.Config{URL: c.PostgresURL, Migrate: true})
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		st := &stores{
			store: pg, durable: pg, mode: "postgres",
			fastKind: "none", durableKind: "postgres",
			sources: metrics.Sources{DurableStats: pg.Stats},
			target:  janitor.Postgres(pg),
		}
		if c.RedisURL == "" {
			return st, nil
		}
		rd, err := redis.New(ctx, redis.Config{URL: c.RedisURL})
		if err != nil {
			pg.Close()
			return nil, fmt.Errorf("redis: %w", err)
		}
		f, d := crashPoints(rd, pg) // no-ops unless built with -tags chaos
		st.store, st.mode, st.fastKind = twotier.New(f, d, twotier.Config{Observer: obs}), "redis+postgres", "redis"
		st.sources.FastLiveKeys = rd.LiveKeys
		return st, nil
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	path := filepath.Join(c.DataDir, "claimd.db")
	lite, err := sqlite.New(ctx, sqlite.Config{Path: path})
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	fast := memory.New(memory.Config{})
	f, d := crashPoints(fast, lite) // no-ops unless built with -tags chaos
	return &stores{
		store: twotier.New(f, d, twotier.Config{Observer: obs}), durable: lite, mode: "embedded (" + path + ")",
		fastKind: "memory", durableKind: "sqlite",
		sources: metrics.Sources{
			FastLiveKeys: func(context.Context) (int64, error) { return int64(fast.Len()), nil },
			DurableStats: func(ctx context.Context) (int64, int, error) {
				n, err := lite.Stats(ctx)
				return n, 0, err // one audit table, no partitions
			},
		},
		target:  janitor.SQLite(lite),
		sweeper: fast,
	}, nil
}

func (s *stores) Close() error {
	if s == nil {
		return nil
	}
	return s.store.Close()
}
