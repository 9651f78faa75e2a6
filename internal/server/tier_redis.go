package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/twotier"
	"github.com/claimd/claimd/internal/tlsconfig"
)

// The Redis fast tier (one server, Cluster or Sentinel: the URL says
// which) in front of PostgreSQL.

func openRedisPostgres(ctx context.Context, c *TierConfig, obs twotier.Observer, log *slog.Logger) (*Tiers, error) {
	t, err := openPostgres(ctx, c, obs, log)
	if err != nil {
		return nil, err
	}
	rcfg, err := c.redisConfig(log)
	if err != nil {
		t.Close()
		return nil, err
	}
	rd, err := redis.New(ctx, rcfg)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	f, d := c.wrap(rd, t.Durable)
	t.Store, t.Mode, t.FastKind = twotier.New(f, d, twotier.Config{Observer: obs}), "redis+postgres", "redis"
	t.Sources.FastLiveKeys = rd.LiveKeys
	t.Sources.FastEviction = func(ctx context.Context) (metrics.Eviction, error) { return redisEviction(ctx, rd) }
	t.redis = rd
	return t, nil
}

func (c *TierConfig) redisTLS() bool {
	return c.RedisCA != "" || c.RedisCert != "" || c.RedisKey != ""
}

// redisConfig is the fast tier's configuration: the URL and, for rediss://,
// the TLS files of the flags (go-redis's URL has no parameter for them).
func (c *TierConfig) redisConfig(log *slog.Logger) (redis.Config, error) {
	if c.FastKeyring == nil {
		return redis.Config{}, fmt.Errorf("%w: --redis-url needs --fast-tier-key-file", ErrUsage)
	}
	cfg := redis.Config{URL: c.RedisURL, Keyring: c.FastKeyring}
	if !c.redisTLS() {
		return cfg, nil
	}
	r, err := tlsconfig.New(tlsconfig.Config{
		Files:  tlsconfig.Files{CA: c.RedisCA, Cert: c.RedisCert, Key: c.RedisKey},
		Logger: log,
	})
	if err != nil {
		return cfg, fmt.Errorf("--redis-ca, --redis-cert, --redis-key: %w", err)
	}
	cfg.TLS = r.ClientConfig()
	return cfg, nil
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

// requireNoEviction is --require-noeviction: Redis must answer that its
// maxmemory-policy is noeviction. (Whatever the flag, the metrics sampler
// reads the policy at start and on every sample, warns about one that may
// evict claim keys and sets claimd_redis_eviction_policy_unsafe.) Tiers
// without Redis pass.
func (t *Tiers) requireNoEviction(ctx context.Context) error {
	if t.redis == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ev, err := redisEviction(ctx, t.redis)
	switch {
	case err != nil:
		return fmt.Errorf("--require-noeviction: reading Redis's maxmemory-policy: %w", err)
	case !ev.Known:
		return errors.New("--require-noeviction: Redis refuses CONFIG GET, so its maxmemory-policy cannot be checked; grant the user +config|get or drop the flag")
	case ev.Unsafe:
		return fmt.Errorf("--require-noeviction: Redis's maxmemory-policy is %s, which may evict claim keys; set it to noeviction and do not share this Redis with a cache", ev.Policy)
	}
	return nil
}
