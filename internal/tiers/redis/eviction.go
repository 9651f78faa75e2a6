package redis

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// ErrPolicyHidden: Redis answered CONFIG GET with an error reply (an ACL
// user without +config, a managed Redis that renames or forbids CONFIG), so
// its maxmemory-policy cannot be checked from claimd.
var ErrPolicyHidden = errors.New("redis: maxmemory-policy cannot be read: CONFIG GET refused")

// EvictionPolicy returns Redis's maxmemory-policy (CONFIG GET). It returns
// an error wrapping ErrPolicyHidden when Redis refuses the command, and one
// wrapping tiers.ErrUnavailable when Redis does not answer.
func (s *Store) EvictionPolicy(ctx context.Context) (string, error) {
	cfg, err := s.client.ConfigGet(ctx, "maxmemory-policy").Result()
	var reply goredis.Error
	switch {
	case errors.As(err, &reply) && ctx.Err() == nil:
		return "", fmt.Errorf("%w: %w", ErrPolicyHidden, err)
	case err != nil:
		return "", s.fail(ctx, "config get maxmemory-policy", "", err)
	}
	policy, ok := cfg["maxmemory-policy"]
	if !ok {
		return "", ErrPolicyHidden
	}
	return policy, nil
}

// EvictsClaims reports whether a Redis with maxmemory-policy policy may
// evict claim keys when it reaches maxmemory: every policy but noeviction.
// The volatile-* policies count too, because every record and pending
// marker carries an expiry (its window end). Each evicted record sends the
// next delivery of its key to the durable tier (a fast-tier false
// negative), and a Redis shared with a cache loses claimd's keys exactly
// when it is under pressure. With noeviction a full Redis refuses writes
// instead, which claimd counts as fast-tier errors and degrades around.
func EvictsClaims(policy string) bool { return policy != "noeviction" }
