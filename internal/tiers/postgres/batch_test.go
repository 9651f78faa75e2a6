package postgres_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// TestConformanceUnbatched holds the single-statement path (batching off)
// to the storage contract too: it is what a batched claim falls back on.
// The subtests share the database.
func TestConformanceUnbatched(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
	tierstest.RunDurable(t, func(t *testing.T) func(t *testing.T) tiers.Durable {
		return func(t *testing.T) tiers.Durable {
			s, err := postgres.New(context.Background(), postgres.Config{URL: url, MaxBatch: 1})
			if err != nil {
				t.Fatalf("New() error = %v", err)
			}
			return s
		}
	})
}

// TestConfigRejectsNegativeBatch: a negative batch size or flusher count is
// a configuration error, not a default.
func TestConfigRejectsNegativeBatch(t *testing.T) {
	url := testenv.Postgres(t, postgres.Migrate)
	for _, cfg := range []postgres.Config{{URL: url, MaxBatch: -1}, {URL: url, BatchFlushers: -1}} {
		if s, err := postgres.New(context.Background(), cfg); err == nil {
			s.Close()
			t.Errorf("New(MaxBatch %d, BatchFlushers %d) error = nil, want an error", cfg.MaxBatch, cfg.BatchFlushers)
		}
	}
}

// BenchmarkClaimNewParallel measures first claims from 50 concurrent
// callers, the load group commit is for, on a server with synchronous
// commit (the shared test server skips flushes, which would hide what a
// commit costs), with batching on and off.
func BenchmarkClaimNewParallel(b *testing.B) {
	srv := testenv.StartPostgresWith(b, testenv.Options{Durable: true}, postgres.Migrate)
	for _, bc := range []struct {
		name string
		cfg  postgres.Config
	}{
		{"batched", postgres.Config{}},
		{"unbatched", postgres.Config{MaxBatch: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := bc.cfg
			cfg.URL = srv.URL()
			s, err := postgres.New(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			base := tiers.ClaimParams{Key: key(""), Now: clock.NewFake(time.Now()).Now(), Lease: lease, TTL: ttl, Holder: "pod-a", Salt: ownerSalt, SecretHash: ownerHash}
			prefix := "evt_" + bc.name + "_" + strconv.FormatInt(time.Now().UnixNano(), 36) + "_"
			var seq atomic.Int64
			b.SetParallelism(25) // 50 callers on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				p := base
				for pb.Next() {
					p.Key.Key = prefix + strconv.FormatInt(seq.Add(1), 10)
					res, err := s.Claim(context.Background(), p)
					if err != nil || res.Outcome != tiers.OutcomeAcquired {
						b.Errorf("Claim(%q) = %v, %v; want ACQUIRED", p.Key.Key, res.Outcome, err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkClaimDuplicateBatching measures one caller retrying a settled
// key on PostgreSQL alone, where every duplicate reaches the durable tier,
// with batching on and off: a claim alone in its batch goes on to claim.sql,
// so batching costs a quiet tier only the hand-off to the flusher.
func BenchmarkClaimDuplicateBatching(b *testing.B) {
	for _, bc := range []struct {
		name     string
		maxBatch int
	}{{"batched", 0}, {"unbatched", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			url := testenv.Postgres(b, postgres.Migrate)
			s, err := postgres.New(context.Background(), postgres.Config{URL: url, MaxBatch: bc.maxBatch})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			e := &env{t: b, url: url, store: s, clk: clock.NewFake(time.Now())}
			settled(e, "evt_dup")
			p := e.params("evt_dup")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := s.Claim(ctx, p)
				if err != nil || res.Outcome != tiers.OutcomeDuplicate {
					b.Fatalf("Claim(%q) = %v, %v; want DUPLICATE", p.Key.Key, res.Outcome, err)
				}
			}
		})
	}
}
