package redis

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// The benchmarks run against the real server: a round trip and the script
// are what they measure, and allocations are those of the whole call.
// redis-cpu-µs/op is the server's own CPU per call (its process's run time
// from /proc/<pid>/schedstat, network included): what a script costs Redis,
// the share of its one core that each claim takes.

// reportServerCPU reports the Redis server's CPU per operation over the
// benchmark loop; call it after ResetTimer, and the returned func at the end.
func reportServerCPU(b *testing.B, url string) func() {
	b.Helper()
	pid := ""
	for _, l := range strings.Split(rawClient(b, url).Info(testCtx(b), "server").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, "process_id:"); ok {
			pid = v
		}
	}
	ns := func() int64 {
		f, err := os.ReadFile("/proc/" + pid + "/schedstat")
		if err != nil {
			b.Fatalf("the Redis server's CPU: %v", err)
		}
		n, err := strconv.ParseInt(strings.Fields(string(f))[0], 10, 64)
		if err != nil {
			b.Fatalf("the Redis server's CPU: %v", err)
		}
		return n
	}
	start := ns()
	return func() { b.ReportMetric(float64(ns()-start)/1e3/float64(b.N), "redis-cpu-µs/op") }
}

func BenchmarkReserveNew(b *testing.B) {
	url := testenv.Redis(b)
	s := newStore(b, url)
	ctx := testCtx(b)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()
	keys := make([]tiers.Key, b.N)
	for i := range keys {
		keys[i] = tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_" + strconv.Itoa(i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportServerCPU(b, url)()
	for i := range b.N {
		res, err := s.Reserve(ctx, tiers.ReserveParams{Key: keys[i], Now: now, Nonce: "nonce-1", PendingTTL: testPendingTTL, PayloadHash: hash("p"), AttemptID: "att"})
		if err != nil || res.Verdict != tiers.FastReserved {
			b.Fatalf("Reserve(%q) = %+v, %v, want reserved", keys[i].Key, res, err)
		}
	}
}

func BenchmarkReserveDuplicate(b *testing.B) {
	url := testenv.Redis(b)
	s := newStore(b, url)
	ctx := testCtx(b)
	now := clock.NewFake(time.Now()).Now()
	rec := claimRecord(tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_dup"}, now)
	rec.State, rec.Version, rec.Result = tiers.StateSettled, 3, []byte(`{"charge":"ch_1","status":"succeeded"}`)
	if err := s.Put(ctx, rec); err != nil {
		b.Fatal(err)
	}
	p := tiers.ReserveParams{Key: rec.Key, Now: now, Nonce: "nonce-1", PendingTTL: testPendingTTL, PayloadHash: rec.PayloadHash}
	b.ReportAllocs()
	b.ResetTimer()
	defer reportServerCPU(b, url)()
	for range b.N {
		res, err := s.Reserve(ctx, p)
		if err != nil || res.Outcome != tiers.OutcomeDuplicate {
			b.Fatalf("Reserve(%q) = %+v, %v, want DUPLICATE", rec.Key.Key, res, err)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	url := testenv.Redis(b)
	s := newStore(b, url)
	ctx := testCtx(b)
	rec := claimRecord(tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_put"}, clock.NewFake(time.Now()).Now())
	b.ReportAllocs()
	b.ResetTimer()
	defer reportServerCPU(b, url)()
	for i := range b.N {
		rec.Version = uint64(i + 1) // every Put writes
		if err := s.Put(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserveNewConcurrent is BenchmarkReserveNew from 50 callers, so
// the coalescer sends the scripts in pipelines as it does under load: the
// server's CPU per call is then mostly the script's own.
func BenchmarkReserveNewConcurrent(b *testing.B) {
	url := testenv.Redis(b)
	s := newStore(b, url)
	ctx := testCtx(b)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()
	var seq atomic.Int64
	b.SetParallelism(25)
	b.ReportAllocs()
	b.ResetTimer()
	defer reportServerCPU(b, url)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_" + strconv.FormatInt(seq.Add(1), 10)}
			res, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "nonce-1", PendingTTL: testPendingTTL, PayloadHash: hash("p"), AttemptID: "att"})
			if err != nil || res.Verdict != tiers.FastReserved {
				b.Errorf("Reserve(%q) = %+v, %v, want reserved", k.Key, res, err)
				return
			}
		}
	})
}
