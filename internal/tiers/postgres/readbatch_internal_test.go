package postgres

import (
	"context"
	"errors"
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
	rs := queueCalls(t, keys, s.Get, s.reads.queue.Len)
	rs[5].cancel() // leaves before the statement
	s.reads.start()
	for _, r := range rs {
		<-r.done
	}

	if n := s.reads.statements.Load(); n != 1 {
		t.Errorf("read statements = %d, want 1 for %d reads queued together", n, len(keys))
	}
	for i, r := range rs[:4] {
		if r.err != nil || r.res.Key != r.p || r.res.Holder != "pod-a" || r.res.Token != tokens[r.p.Key] {
			t.Errorf("read %d: Get(%q) = key %v holder %q token %d, %v; want its record held by pod-a", i, r.p.Key, r.res.Key, r.res.Holder, r.res.Token, r.err)
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
	rs := queueCalls(t, []tiers.Key{batchKey("evt_late")}, s.Get, s.reads.queue.Len)
	// The row commits after the read was queued and before any statement
	// ran: the read must see it.
	if res, err := plain.Claim(ctx, batchParams(clk, "evt_late", "pod-a")); err != nil || res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim = %v, %v", res.Outcome, err)
	}
	s.reads.start()
	<-rs[0].done
	if rs[0].err != nil || rs[0].res.Holder != "pod-a" {
		t.Fatalf("Get(row committed after it was queued) = holder %q, %v; want pod-a's record", rs[0].res.Holder, rs[0].err)
	}
	if n := s.reads.statements.Load(); n != 0 {
		t.Errorf("read statements = %d, want 0 for a read alone", n)
	}
}
