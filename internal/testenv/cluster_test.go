package testenv_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/testenv"
)

func clusterClient(t *testing.T, url string) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(url)
	if err != nil {
		t.Fatalf("ParseClusterURL(%q): %v", url, err)
	}
	opts.MaxRetries = -1
	c := redis.NewClusterClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisClusterSpreadsKeysAndRestarts: the cluster has three primaries
// that each hold a share of the keys, KeySlot agrees with CLUSTER KEYSLOT,
// and a stopped cluster comes back serving (and empty).
func TestRedisClusterSpreadsKeysAndRestarts(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := testenv.StartRedisCluster(t)
	rc := clusterClient(t, c.URL())

	for i := range 60 {
		k := fmt.Sprintf("idem:{ns:stripe:evt_%d}", i)
		if err := rc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		want, err := rc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := testenv.KeySlot(k); int64(got) != want {
			t.Fatalf("KeySlot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
	var primaries atomic.Int64
	err := rc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if n > 0 {
			primaries.Add(1)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if primaries.Load() != 3 {
		t.Fatalf("primaries holding keys = %d, want 3", primaries.Load())
	}

	c.Stop(t)
	if err := rc.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Stop: want an error")
	}
	c.Start(t)
	n, err := rc.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE after Start: %v", err)
	}
	if n != 0 {
		t.Fatalf("DBSIZE after Start = %d, want 0 (no persistence)", n)
	}
}

// slotOwner is the address of the node of c that serves key (the others
// answer a plain GET of it with MOVED).
func slotOwner(ctx context.Context, t *testing.T, c *testenv.Cluster, key string) string {
	t.Helper()
	for _, addr := range c.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		err := n.Get(ctx, key).Err()
		n.Close()
		if err == nil {
			return addr
		}
		if !strings.HasPrefix(err.Error(), "MOVED ") {
			t.Fatalf("GET %s on node %s = %v, want the value or MOVED", key, addr, err)
		}
	}
	t.Fatalf("no node of the cluster serves %s", key)
	return ""
}

// TestSlotMigrationRedirects moves a slot holding keys from one primary to
// another step by step: a new key written while the slot migrates is sent
// on with ASK, a client with the old map is sent on with MOVED, and every
// key is readable where it ends up.
func TestSlotMigrationRedirects(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	c := testenv.StartRedisCluster(t)
	rc := clusterClient(t, c.URL())
	key := func(i int) string { return fmt.Sprintf("{tag}:%d", i) } // one slot for all
	slot := testenv.KeySlot(key(0))
	for i := range 10 {
		if err := rc.Set(ctx, key(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	src := slotOwner(ctx, t, c, key(0))
	m, err := c.BeginSlotMigration(ctx, []int{slot})
	if err != nil {
		t.Fatalf("BeginSlotMigration: %v", err)
	}
	if _, err := m.MoveKeys(ctx); err != nil {
		t.Fatalf("MoveKeys: %v", err)
	}
	// Absent on the source now: ASK to the target.
	if err := rc.Set(ctx, key(10), 10, 0).Err(); err != nil {
		t.Fatalf("SET during migration: %v", err)
	}
	moved, err := m.Finish(ctx)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if moved != 10 {
		t.Fatalf("keys moved = %d, want 10", moved)
	}
	for i := range 11 {
		if got, err := rc.Get(ctx, key(i)).Int(); err != nil || got != i {
			t.Fatalf("GET %s after migration = %d, %v; want %d", key(i), got, err, i)
		}
	}
	// The cluster client above may have refreshed its slot map before it
	// read (go-redis reloads it after errors and when it is old), so a
	// client that certainly has the old map asks too: the old owner must
	// send it on with MOVED to another node.
	n := redis.NewClient(&redis.Options{Addr: src, MaxRetries: -1})
	err = n.Get(ctx, key(0)).Err()
	n.Close()
	if err == nil || !strings.HasPrefix(err.Error(), "MOVED ") || strings.HasSuffix(err.Error(), " "+src) {
		t.Fatalf("GET %s on the old owner %s after migration = %v, want MOVED to another node", key(0), src, err)
	}
	stats, err := c.ErrorStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats["ASK"] == 0 || stats["MOVED"] == 0 {
		t.Fatalf("error replies = %v, want ASK and MOVED both seen", stats)
	}
}

// TestRedisSentinelFailover: with the primary stopped, the sentinels promote
// the replica and a failover client writes to it.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := testenv.StartRedisSentinel(t, testenv.SentinelOptions{DownAfter: time.Second})
	opts, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		t.Fatalf("ParseFailoverURL(%q): %v", s.URL(), err)
	}
	fc := redis.NewFailoverClient(opts)
	t.Cleanup(func() { fc.Close() })
	if err := fc.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Primary().Stop(t)
	if err := s.WaitPrimary(ctx, s.Replica()); err != nil {
		t.Fatalf("WaitPrimary(replica): %v", err)
	}
	if err := fc.Set(ctx, "k", "after", 0).Err(); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}
	if got := fc.Get(ctx, "k").Val(); got != "after" {
		t.Fatalf("GET after failover = %q, want after", got)
	}
}
