package redis

import (
	"strconv"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// The benchmarks run against the real server: a round trip and the script
// are what they measure, and allocations are those of the whole call.

func BenchmarkReserveNew(b *testing.B) {
	s := newStore(b, testenv.Redis(b))
	ctx := testCtx(b)
	now := clock.NewFake(time.Now()).Now()
	ns := testNS()
	keys := make([]tiers.Key, b.N)
	for i := range keys {
		keys[i] = tiers.Key{Namespace: ns, Provider: "stripe", Key: "evt_" + strconv.Itoa(i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		res, err := s.Reserve(ctx, tiers.ReserveParams{Key: keys[i], Now: now, Nonce: "nonce-1", PendingTTL: testPendingTTL, PayloadHash: hash("p"), AttemptID: "att"})
		if err != nil || res.Verdict != tiers.FastReserved {
			b.Fatalf("Reserve(%q) = %+v, %v, want reserved", keys[i].Key, res, err)
		}
	}
}

func BenchmarkReserveDuplicate(b *testing.B) {
	s := newStore(b, testenv.Redis(b))
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
	for range b.N {
		res, err := s.Reserve(ctx, p)
		if err != nil || res.Outcome != tiers.OutcomeDuplicate {
			b.Fatalf("Reserve(%q) = %+v, %v, want DUPLICATE", rec.Key.Key, res, err)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	s := newStore(b, testenv.Redis(b))
	ctx := testCtx(b)
	rec := claimRecord(tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_put"}, clock.NewFake(time.Now()).Now())
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		rec.Version = uint64(i + 1) // every Put writes
		if err := s.Put(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
}
