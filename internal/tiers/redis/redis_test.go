package redis

import (
	"testing"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// TestFastConformance holds the Redis fast tier to the Fast contract that
// every fast tier passes. Subtests share one server; the suite gives each
// its own namespace.
func TestFastConformance(t *testing.T) {
	tierstest.RunFast(t, func(t *testing.T) tiers.Fast {
		s, err := New(testCtx(t), Config{URL: testenv.Redis(t)})
		if err != nil {
			t.Fatalf("New() error = %v", err)
		}
		return s
	})
}

// TestFastConformanceCluster holds the fast tier to the same contract on a
// real Redis Cluster of three primaries and three replicas, reached through
// a cluster URL: every record is one key on one slot, so each script runs
// on the primary that owns it.
func TestFastConformanceCluster(t *testing.T) {
	url := testenv.RedisCluster(t)
	tierstest.RunFast(t, func(t *testing.T) tiers.Fast {
		s, err := New(testCtx(t), Config{URL: url})
		if err != nil {
			t.Fatalf("New() error = %v", err)
		}
		if s.Deployment() != Cluster {
			t.Fatalf("New(%q).Deployment() = %v, want cluster", url, s.Deployment())
		}
		return s
	})
}

// TestFastConformanceSentinel holds the fast tier to the same contract on a
// primary watched by three sentinels, reached through a Sentinel URL.
func TestFastConformanceSentinel(t *testing.T) {
	url := testenv.RedisSentinel(t)
	tierstest.RunFast(t, func(t *testing.T) tiers.Fast {
		s, err := New(testCtx(t), Config{URL: url})
		if err != nil {
			t.Fatalf("New() error = %v", err)
		}
		if s.Deployment() != Sentinel {
			t.Fatalf("New(%q).Deployment() = %v, want sentinel", url, s.Deployment())
		}
		return s
	})
}
