package postgres

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// pausedReader returns a Store whose reader has no flusher yet (see
// pausedStore), and a plain store over the same database.
func pausedReader(t *testing.T) (*Store, *Store) {
	t.Helper()
	s, plain := pausedStore(t, testenv.Postgres(t, Migrate))
	s.reads = newReader(s, defaultMaxBatch)
	return s, plain
}

// read is one Get running against a paused reader.
type read struct {
	key    tiers.Key
	cancel context.CancelFunc
	rec    tiers.Record
	err    error
	done   chan struct{}
}

// queueReads starts a Get of each key and returns once every one of them
// waits in s's reader.
func queueReads(t *testing.T, s *Store, keys []tiers.Key) []*read {
	t.Helper()
	rs := make([]*read, len(keys))
	for i, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		r := &read{key: k, cancel: cancel, done: make(chan struct{})}
		rs[i] = r
		go func() {
			defer close(r.done)
			r.rec, r.err = s.Get(ctx, r.key)
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.reads.queue.Len() < len(keys) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reads queued after 10s: Get does not go through the reader", s.reads.queue.Len(), len(keys))
		}
		runtime.Gosched() // the callers are about to enqueue; nothing else to wait on
	}
	return rs
}

// Reads queued together are one statement, which reads each distinct key
// once and answers every caller: the record, or ErrNotFound. A caller that
// left gets its own context's error.
func TestReadsShareAStatement(t *testing.T) {
	s, plain := pausedReader(t)
	clk := clock.NewFake(time.Now())
	ctx := context.Background()
	tokens := map[string]uint64{}
	for _, k := range []string{"evt_busy", "evt_other"} {
		res, err := plain.Claim(ctx, batchParams(clk, k, "pod-a"))
		if err != nil || res.Outcome != tiers.OutcomeAcquired {
			t.Fatalf("Claim(%q) = %v, %v", k, res.Outcome, err)
		}
		tokens[k] = res.Record.Token
	}
	keys := []tiers.Key{batchKey("evt_busy"), batchKey("evt_busy"), batchKey("evt_busy"), batchKey("evt_other"), batchKey("evt_none"), batchKey("evt_busy")}
	rs := queueReads(t, s, keys)
	rs[5].cancel() // leaves before the statement
	s.reads.start()
	for _, r := range rs {
		<-r.done
	}

	if n := s.reads.statements.Load(); n != 1 {
		t.Errorf("read statements = %d, want 1 for %d reads queued together", n, len(keys))
	}
	for i, r := range rs[:4] {
		if r.err != nil || r.rec.Key != r.key || r.rec.Holder != "pod-a" || r.rec.Token != tokens[r.key.Key] {
			t.Errorf("read %d: Get(%q) = key %v holder %q token %d, %v; want its record held by pod-a", i, r.key.Key, r.rec.Key, r.rec.Holder, r.rec.Token, r.err)
		}
	}
	if err := rs[4].err; !errors.Is(err, tiers.ErrNotFound) {
		t.Errorf("Get(absent key) error = %v, want ErrNotFound", err)
	}
	if err := rs[5].err; !errors.Is(err, context.Canceled) {
		t.Errorf("Get(caller left) error = %v, want context.Canceled", err)
	}
}

// A read alone runs get.sql, not the batch statement, and its statement
// starts after it was queued: it sees a row committed in between.
func TestReadAloneAndReadAfterCommit(t *testing.T) {
	s, plain := pausedReader(t)
	clk := clock.NewFake(time.Now())
	ctx := context.Background()
	rs := queueReads(t, s, []tiers.Key{batchKey("evt_late")})
	// The row commits after the read was queued and before any statement
	// ran: the read must see it.
	if res, err := plain.Claim(ctx, batchParams(clk, "evt_late", "pod-a")); err != nil || res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim = %v, %v", res.Outcome, err)
	}
	s.reads.start()
	<-rs[0].done
	if rs[0].err != nil || rs[0].rec.Holder != "pod-a" {
		t.Fatalf("Get(row committed after it was queued) = holder %q, %v; want pod-a's record", rs[0].rec.Holder, rs[0].err)
	}
	if n := s.reads.statements.Load(); n != 0 {
		t.Errorf("read statements = %d, want 0 for a read alone", n)
	}
}
