package metrics_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/metrics"
)

// evictionSeries returns the claimd_redis_eviction_policy_unsafe series of a
// scrape.
func evictionSeries(got map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		if strings.HasPrefix(k, "claimd_redis_eviction_policy_unsafe{") {
			out[k] = v
		}
	}
	return out
}

// TestEvictionPolicyGauge: one series, labelled with the policy, 1 when it
// may evict claim keys; none while the policy cannot be read.
func TestEvictionPolicyGauge(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	name := "claimd_redis_eviction_policy_unsafe"
	for _, tc := range []struct {
		ev   metrics.Eviction
		want map[string]float64
	}{
		{metrics.Eviction{Policy: "allkeys-lru", Known: true, Unsafe: true}, map[string]float64{sel(name, "policy", "allkeys-lru"): 1}},
		{metrics.Eviction{Policy: "noeviction", Known: true}, map[string]float64{sel(name, "policy", "noeviction"): 0}},
		{metrics.Eviction{}, map[string]float64{}},
	} {
		src := metrics.Sources{FastEviction: func(context.Context) (metrics.Eviction, error) { return tc.ev, nil }}
		if err := w.m.Sample(ctx, start, src); err != nil {
			t.Fatal(err)
		}
		got := evictionSeries(w.scrape(t))
		if len(got) != len(tc.want) {
			t.Fatalf("after sampling %+v: series %v, want %v", tc.ev, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Fatalf("after sampling %+v: %s = %v, want %v", tc.ev, k, got[k], v)
			}
		}
	}
}

// TestEvictionPolicyLog: the sampler logs a change of policy, not every
// sample: a warning for each switch to an evicting policy, info once when
// the policy cannot be read, info when it is safe again.
func TestEvictionPolicyLog(t *testing.T) {
	w := newWorld(t)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	lru := metrics.Eviction{Policy: "allkeys-lru", Known: true, Unsafe: true}
	safe := metrics.Eviction{Policy: "noeviction", Known: true}
	seq := []metrics.Eviction{lru, lru, {}, {}, safe, lru, safe, safe}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	i := 0
	src := metrics.Sources{FastEviction: func(context.Context) (metrics.Eviction, error) {
		// The sampler may take one more sample between the cancel and its
		// return: it sees the last policy again, which logs nothing.
		ev := seq[min(i, len(seq)-1)]
		if i++; i >= len(seq) {
			cancel() // RunSampler returns after this sample
		}
		return ev, nil
	}}
	w.m.RunSampler(ctx, time.Millisecond, src, log)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		level := line[strings.Index(line, "level=")+len("level="):]
		got = append(got, level[:strings.IndexByte(level, ' ')])
	}
	want := []string{"WARN", "INFO", "WARN", "INFO"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("log levels = %v, want %v; log:\n%s", got, want, buf.String())
	}
	if !strings.Contains(buf.String(), "maxmemory_policy=allkeys-lru") {
		t.Errorf("log does not name the policy:\n%s", buf.String())
	}
}
