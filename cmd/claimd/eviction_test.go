package main

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// TestRedisEvictionPolicy runs claimd against a real Redis configured both
// ways: --require-noeviction refuses an evicting policy at start; without
// the flag claimd starts, and every sample reads the policy, warns about an
// evicting one and sets claimd_redis_eviction_policy_unsafe.
func TestRedisEvictionPolicy(t *testing.T) {
	t.Parallel()
	rd := testenv.StartRedis(t)
	pg := testenv.StartPostgres(t, postgres.Migrate)
	opts, err := goredis.ParseURL(rd.URL())
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opts)
	t.Cleanup(func() { raw.Close() })
	setPolicy := func(p string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := raw.ConfigSet(ctx, "maxmemory-policy", p).Err(); err != nil {
			t.Fatal(err)
		}
	}
	tiersFlags := []string{"--redis-url", rd.URL(), "--fast-tier-key-file", fastKeyFile(t), "--postgres-url", pg.URL(), "--data-dir", t.TempDir(), "--log-format", "json"}

	setPolicy("allkeys-lru")
	out, code := run(t, append(append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, tiersFlags...), "--require-noeviction")...)
	if code == 0 || !strings.Contains(out, "maxmemory-policy is allkeys-lru") {
		t.Fatalf("claimd serve --require-noeviction with allkeys-lru = exit %d\n%s\nwant a refusal naming the policy", code, out)
	}

	setPolicy("noeviction")
	p := start(t, append(tiersFlags, "--require-noeviction", "--metrics-sample-interval", "20ms")...)
	metric := func() string {
		t.Helper()
		_, body := get(t, "http://"+p.http+"/metrics")
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "claimd_redis_eviction_policy_unsafe{") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}

	// Changed at run time: the next sample warns and sets the gauge.
	setPolicy("volatile-lru")
	p.logs.wait(t, "warning about volatile-lru", func(r map[string]any) bool {
		return r["level"] == "WARN" && r["maxmemory_policy"] == "volatile-lru"
	})
	if got := metric(); got != `claimd_redis_eviction_policy_unsafe{policy="volatile-lru"} 1` {
		t.Fatalf("metric after volatile-lru = %q, want policy volatile-lru at 1", got)
	}
	setPolicy("noeviction")
	p.logs.wait(t, "noeviction again", func(r map[string]any) bool {
		return r["level"] == "INFO" && r["maxmemory_policy"] == "noeviction"
	})
	if got := metric(); got != `claimd_redis_eviction_policy_unsafe{policy="noeviction"} 0` {
		t.Fatalf("metric after noeviction = %q, want policy noeviction at 0", got)
	}
	p.stop(t)
}
