package memory

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

const (
	ttl        = 84 * time.Hour
	lease      = 60 * time.Second
	pendingTTL = 5 * time.Second
)

// t0 is the fake "now" of every test: a whole millisecond, as the service
// clock's fake gives.
var t0 = time.Date(2026, 11, 2, 10, 30, 0, 123_000_000, time.UTC)

var key = tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_1"}

func hash(s string) []byte {
	h := make([]byte, 32)
	copy(h, s)
	return h
}

// claimed is the record a first claim of key at t0 creates, as the durable
// tier would return it.
func claimed() tiers.Record {
	return tiers.NewRecord(tiers.ClaimParams{Key: key, Now: t0, Lease: lease, TTL: ttl, PayloadHash: hash("a"), Holder: "pod-a", AttemptID: "att-1"})
}

func with(rec tiers.Record, f func(*tiers.Record)) tiers.Record {
	f(&rec)
	return rec
}

func reserveParams(now time.Time, nonce string) tiers.ReserveParams {
	return tiers.ReserveParams{Key: key, Now: now, Nonce: nonce, PendingTTL: pendingTTL}
}

func mustPut(t *testing.T, s *Store, rec tiers.Record) {
	t.Helper()
	if err := s.Put(context.Background(), rec); err != nil {
		t.Fatalf("Put(%q v%d) error = %v", rec.Key.Key, rec.Version, err)
	}
}

func mustReserve(t *testing.T, s *Store, p tiers.ReserveParams) tiers.FastResult {
	t.Helper()
	res, err := s.Reserve(context.Background(), p)
	if err != nil {
		t.Fatalf("Reserve(%q) error = %v", p.Key.Key, err)
	}
	return res
}

func TestReserveAfterWindowTakeoverDropsTheRecord(t *testing.T) {
	s := New(Config{})
	mustPut(t, s, claimed())
	p := reserveParams(t0.Add(ttl), "n1")
	if got := mustReserve(t, s, p); got.Verdict != tiers.FastTakeover {
		t.Fatalf("Reserve(window over) verdict = %d, want FastTakeover", got.Verdict)
	}
	if got := s.Len(); got != 0 {
		t.Errorf("Len() after window over = %d, want 0 (dropped on access)", got)
	}
	p.Nonce = "n2"
	if got := mustReserve(t, s, p); got.Verdict != tiers.FastReserved {
		t.Errorf("Reserve(window over, again) verdict = %d, want FastReserved", got.Verdict)
	}
}

func TestPutVersionOrder(t *testing.T) {
	v := func(version uint64, state tiers.State) tiers.Record {
		return with(claimed(), func(r *tiers.Record) { r.Version, r.State = version, state })
	}
	tests := []struct {
		desc        string
		puts        []tiers.Record
		wantVersion uint64
		wantOutcome tiers.Outcome
	}{
		{"newer replaces older", []tiers.Record{v(1, tiers.StateReceived), v(2, tiers.StateSettled)}, 2, tiers.OutcomeDuplicate},
		{"older never replaces newer", []tiers.Record{v(3, tiers.StateSettled), v(2, tiers.StateProcessing)}, 3, tiers.OutcomeDuplicate},
		{"equal version is not rewritten", []tiers.Record{v(2, tiers.StateSettled), v(2, tiers.StateProcessing)}, 2, tiers.OutcomeDuplicate},
		{"skipped versions are fine", []tiers.Record{v(1, tiers.StateReceived), v(5, tiers.StateProcessing)}, 5, tiers.OutcomeInProgress},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s := New(Config{})
			for _, rec := range tc.puts {
				mustPut(t, s, rec)
			}
			got := mustReserve(t, s, reserveParams(t0.Add(time.Second), "n"))
			if got.Record.Version != tc.wantVersion || got.Outcome != tc.wantOutcome {
				t.Errorf("Reserve(%q) = v%d %v, want v%d %v", key.Key, got.Record.Version, got.Outcome, tc.wantVersion, tc.wantOutcome)
			}
		})
	}
}

func TestPutReplacesMarker(t *testing.T) {
	s := New(Config{})
	mustReserve(t, s, reserveParams(t0, "n1"))
	mustPut(t, s, claimed())
	got := mustReserve(t, s, reserveParams(t0.Add(time.Second), "n2"))
	if got.Outcome != tiers.OutcomeInProgress || got.Record.Token != 1 {
		t.Errorf("Reserve(%q) after Put = %v token %d, want IN_PROGRESS token 1", key.Key, got.Outcome, got.Record.Token)
	}
}

// After a prune the durable tier starts a key again at version 1; the cached
// record of the old window, with its higher version, must not block it.
func TestPutOverExpiredHigherVersion(t *testing.T) {
	s := New(Config{})
	mustPut(t, s, with(claimed(), func(r *tiers.Record) { r.State, r.Version = tiers.StateSettled, 4 }))
	later := t0.Add(ttl + time.Hour)
	fresh := tiers.NewRecord(tiers.ClaimParams{Key: key, Now: later, Lease: lease, TTL: ttl, Holder: "pod-b"})
	mustPut(t, s, fresh)
	got := mustReserve(t, s, reserveParams(later.Add(time.Second), "n"))
	if got.Outcome != tiers.OutcomeInProgress || got.Record.Holder != "pod-b" || got.Record.Version != 1 {
		t.Errorf("Reserve(%q) = %v holder %q v%d, want IN_PROGRESS pod-b v1", key.Key, got.Outcome, got.Record.Holder, got.Record.Version)
	}
}

// Put carries no time of its own, so a record whose window is over by the
// time it is put is dropped by the first Reserve (or Sweep) that sees it
// over; it never answers.
func TestPutOfEndedWindowNeverAnswers(t *testing.T) {
	s := New(Config{})
	mustPut(t, s, claimed())
	got := mustReserve(t, s, reserveParams(t0.Add(ttl+time.Hour), "n"))
	if got.Verdict != tiers.FastTakeover {
		t.Errorf("Reserve(past the window) verdict = %d, want FastTakeover", got.Verdict)
	}
	if n := s.Len(); n != 0 {
		t.Errorf("Len() = %d, want 0: a record past its window is not kept", n)
	}
	if n := s.Sweep(t0.Add(ttl + time.Hour)); n != 0 {
		t.Errorf("Sweep() = %d, want 0 (already dropped)", n)
	}
}

func TestPutOfRecordOverWhenWrittenStoresNothing(t *testing.T) {
	s := New(Config{})
	mustPut(t, s, with(claimed(), func(r *tiers.Record) { r.UpdatedAt = r.WindowExpiresAt }))
	if got := s.Len(); got != 0 {
		t.Errorf("Len() = %d, want 0: a record past its window is not cached", got)
	}
}

func TestAbort(t *testing.T) {
	tests := []struct {
		desc    string
		setup   func(t *testing.T, s *Store)
		nonce   string
		wantLen int
	}{
		{"our marker is deleted", func(t *testing.T, s *Store) { mustReserve(t, s, reserveParams(t0, "ours")) }, "ours", 0},
		{"another marker stays", func(t *testing.T, s *Store) { mustReserve(t, s, reserveParams(t0, "theirs")) }, "ours", 1},
		{"a record stays", func(t *testing.T, s *Store) {
			mustReserve(t, s, reserveParams(t0, "ours"))
			mustPut(t, s, claimed())
		}, "ours", 1},
		{"absent key is fine", func(t *testing.T, s *Store) {}, "ours", 0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s := New(Config{})
			tc.setup(t, s)
			if err := s.Abort(context.Background(), key, tc.nonce); err != nil {
				t.Fatalf("Abort(%q) error = %v", tc.nonce, err)
			}
			if got := s.Len(); got != tc.wantLen {
				t.Errorf("Len() after Abort(%q) = %d, want %d", tc.nonce, got, tc.wantLen)
			}
		})
	}
}

func TestSweep(t *testing.T) {
	s := New(Config{})
	mustReserve(t, s, tiers.ReserveParams{Key: tiers.Key{Namespace: "n", Provider: "p", Key: "pending"}, Now: t0, Nonce: "x", PendingTTL: pendingTTL})
	for i := range 3 {
		rec := claimed()
		rec.Key.Key = fmt.Sprintf("evt_%d", i)
		rec.WindowExpiresAt = t0.Add(time.Duration(i+1) * time.Hour)
		mustPut(t, s, rec)
	}
	tests := []struct {
		desc     string
		now      time.Time
		wantGone int
		wantLen  int
	}{
		{"nothing expired yet", t0.Add(pendingTTL - time.Millisecond), 0, 4},
		{"the marker lapses", t0.Add(pendingTTL), 1, 3},
		{"a window ends at its instant", t0.Add(2 * time.Hour), 2, 1},
		{"the rest", t0.Add(ttl), 1, 0},
	}
	for _, tc := range tests {
		if got := s.Sweep(tc.now); got != tc.wantGone {
			t.Errorf("%s: Sweep() = %d, want %d", tc.desc, got, tc.wantGone)
		}
		if got := s.Len(); got != tc.wantLen {
			t.Errorf("%s: Len() = %d, want %d", tc.desc, got, tc.wantLen)
		}
	}
}

func TestMaxEntriesEvicts(t *testing.T) {
	tests := []struct {
		desc   string
		cfg    Config
		insert int
		want   int
	}{
		{"one shard", Config{Shards: 1, MaxEntries: 4}, 10, 4},
		{"fewer entries than shards", Config{Shards: 64, MaxEntries: 3}, 100, 3},
		{"uneven split", Config{Shards: 4, MaxEntries: 10}, 1000, 10},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s := New(tc.cfg)
			for i := range tc.insert {
				rec := claimed()
				rec.Key.Key = fmt.Sprintf("evt_%d", i)
				mustPut(t, s, rec)
			}
			if got := s.Len(); got != tc.want {
				t.Errorf("Len() after %d Puts = %d, want %d", tc.insert, got, tc.want)
			}
		})
	}
}

func TestEvictionPrefersExpired(t *testing.T) {
	s := New(Config{Shards: 1, MaxEntries: 2})
	live := claimed()
	live.Key.Key = "live"
	mustPut(t, s, live)
	mustReserve(t, s, tiers.ReserveParams{Key: tiers.Key{Namespace: "n", Provider: "p", Key: "lapsed"}, Now: t0, Nonce: "x", PendingTTL: time.Millisecond})
	next := claimed()
	next.Key.Key = "next"
	mustPut(t, s, next)
	got := mustReserve(t, s, tiers.ReserveParams{Key: live.Key, Now: t0.Add(time.Second), Nonce: "n", PendingTTL: pendingTTL})
	if got.Outcome != tiers.OutcomeInProgress {
		t.Errorf("Reserve(live) = verdict %d %v, want IN_PROGRESS: the lapsed marker should have been evicted", got.Verdict, got.Outcome)
	}
}

func TestNoAliasing(t *testing.T) {
	s := New(Config{})
	rec := with(claimed(), func(r *tiers.Record) { r.State, r.Result = tiers.StateSettled, []byte("result") })
	mustPut(t, s, rec)
	rec.Result[0] = 'X'
	rec.PayloadHash[0] = 'X'
	got := mustReserve(t, s, reserveParams(t0.Add(time.Second), "n"))
	if string(got.Record.Result) != "result" || got.Record.PayloadHash[0] != 'a' {
		t.Fatalf("Reserve after caller changed its slices = %q/%q, want result/a…", got.Record.Result, got.Record.PayloadHash[:1])
	}
	got.Record.Result[0] = 'Y'
	again := mustReserve(t, s, reserveParams(t0.Add(time.Second), "n"))
	if string(again.Record.Result) != "result" {
		t.Fatalf("Reserve after caller changed a returned slice = %q, want result", again.Record.Result)
	}
}

func TestErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	closed := New(Config{})
	closed.Close()
	tests := []struct {
		desc string
		s    *Store
		ctx  context.Context
		want error
	}{
		{"cancelled context passes through", New(Config{}), cancelled, context.Canceled},
		{"closed store is unavailable", closed, context.Background(), tiers.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			calls := map[string]error{
				"Reserve": func() error { _, err := tc.s.Reserve(tc.ctx, reserveParams(t0, "n")); return err }(),
				"Put":     tc.s.Put(tc.ctx, claimed()),
				"Abort":   tc.s.Abort(tc.ctx, key, "n"),
				"Ping":    tc.s.Ping(tc.ctx),
			}
			for call, err := range calls {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s error = %v, want %v", call, err, tc.want)
				}
			}
		})
	}
}

func BenchmarkReserve(b *testing.B) {
	s := New(Config{})
	ctx := context.Background()
	b.ReportAllocs()
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			p := reserveParams(t0, "n")
			p.Key.Key = "evt_" + fmt.Sprint(i)
			if _, err := s.Reserve(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		b.ReportAllocs()
		mustPutB(b, s, with(claimed(), func(r *tiers.Record) { r.State, r.Version, r.Result = tiers.StateSettled, 2, []byte("ok") }))
		p := reserveParams(t0.Add(time.Second), "n")
		for b.Loop() {
			if _, err := s.Reserve(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("duplicate-parallel", func(b *testing.B) {
		b.ReportAllocs()
		p := reserveParams(t0.Add(time.Second), "n")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Reserve(ctx, p); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func mustPutB(b *testing.B, s *Store, rec tiers.Record) {
	b.Helper()
	if err := s.Put(context.Background(), rec); err != nil {
		b.Fatal(err)
	}
}
