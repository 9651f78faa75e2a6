package memory

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// settledWith is a settled record of key k holding a result of n bytes.
func settledWith(k string, n int) tiers.Record {
	return tiers.Record{
		Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: k}, State: tiers.StateSettled,
		Token: 1, Version: 3, Result: bytes.Repeat([]byte{'r'}, n),
		FirstSeenAt: t0, UpdatedAt: t0, LeaseExpiresAt: t0.Add(time.Minute), WindowExpiresAt: t0.Add(time.Hour),
	}
}

// TestMaxBytesBoundsResults: the entries' bytes never pass MaxBytes, however
// many large results are cached, and the newest entries stay (the evicted
// ones only cost a trip to the durable tier).
func TestMaxBytesBoundsResults(t *testing.T) {
	const maxBytes = 1 << 20
	s := New(Config{Shards: 4, MaxEntries: 100_000, MaxBytes: maxBytes})
	ctx := context.Background()
	for i := range 1000 {
		if err := s.Put(ctx, settledWith(fmt.Sprint("evt_", i), 64<<10)); err != nil {
			t.Fatal(err)
		}
		if b := s.Bytes(); b > maxBytes {
			t.Fatalf("after %d Puts of 64 KiB results: Bytes() = %d, over MaxBytes %d", i+1, b, maxBytes)
		}
	}
	if n := s.Len(); n == 0 || n > maxBytes/(64<<10) {
		t.Fatalf("Len() = %d after 1000 Puts of 64 KiB into %d bytes, want between 1 and %d", n, maxBytes, maxBytes/(64<<10))
	}
	last := settledWith("evt_999", 0).Key
	res, err := s.Reserve(ctx, tiers.ReserveParams{Key: last, Now: t0, Nonce: "n", PendingTTL: time.Second})
	if err != nil || res.Verdict != tiers.FastDecided || res.Outcome != tiers.OutcomeDuplicate {
		t.Fatalf("Reserve(newest key) = %+v, %v; want DUPLICATE from the cache", res, err)
	}
}

// TestEntryOverShardBudgetIsNotCached: a record larger than a shard's share
// of MaxBytes is not cached (the durable tier answers for it), and what the
// shard held before stays.
func TestEntryOverShardBudgetIsNotCached(t *testing.T) {
	s := New(Config{Shards: 1, MaxEntries: 10, MaxBytes: 32 << 10})
	ctx := context.Background()
	if err := s.Put(ctx, settledWith("evt_small", 10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, settledWith("evt_big", 64<<10)); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len() = %d, want 1: the 64 KiB result does not fit a 32 KiB cache", s.Len())
	}
	res, err := s.Reserve(ctx, tiers.ReserveParams{Key: settledWith("evt_big", 0).Key, Now: t0, Nonce: "n", PendingTTL: time.Second})
	if err != nil || res.Verdict != tiers.FastReserved {
		t.Fatalf("Reserve(evt_big) = %+v, %v; want FastReserved (not cached)", res, err)
	}
}

// TestBytesFollowRemovals: replacing, aborting, sweeping and closing give
// their bytes back, so the count never drifts from what is held.
func TestBytesFollowRemovals(t *testing.T) {
	s := New(Config{Shards: 2})
	ctx := context.Background()
	rec := settledWith("evt_a", 100)
	if err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	one := s.Bytes()
	newer := rec
	newer.Version++
	newer.Result = bytes.Repeat([]byte{'x'}, 1000)
	if err := s.Put(ctx, newer); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Bytes(), one+900; got != want {
		t.Fatalf("Bytes() after replacing a 100-byte result by 1000 bytes = %d, want %d", got, want)
	}
	k := tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_pending"}
	if _, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: t0, Nonce: "n1", PendingTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(ctx, k, "n1"); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Bytes(), one+900; got != want {
		t.Fatalf("Bytes() after a marker was placed and aborted = %d, want %d", got, want)
	}
	if n := s.Sweep(t0.Add(2 * time.Hour)); n != 1 || s.Bytes() != 0 {
		t.Fatalf("Sweep past the window = %d dropped, Bytes() %d; want 1, 0", n, s.Bytes())
	}
}
