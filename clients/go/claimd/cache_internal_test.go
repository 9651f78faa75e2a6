package claimd

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// TestDuplicateCacheBounds: the cache keeps at most its size (the least
// recently used goes), forgets an answer when its window ends on the
// cache's clock, keeps only SETTLED and FAILED records, and answers only
// claims by event id outside entity lifecycles.
func TestDuplicateCacheBounds(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	d := newDuplicateCache(2, func() time.Time { return now })
	settled := func(key string, window time.Duration) *pb.Record {
		return &pb.Record{Namespace: "ns", Provider: "stripe", Key: key, State: pb.EventState_EVENT_STATE_SETTLED,
			FencingToken: 1, Result: []byte(key), WindowExpiresAt: timestamppb.New(now.Add(window))}
	}
	ask := func(id string) ClaimRequest { return ClaimRequest{Namespace: "ns", Provider: "stripe", EventID: id} }

	d.rememberRecord(settled("a", time.Hour))
	d.rememberRecord(settled("b", 2*time.Hour))
	if got := d.lookup(ask("a")); got == nil || string(got.GetResult()) != "a" || got.GetOutcome() != pb.Outcome_OUTCOME_DUPLICATE {
		t.Fatalf("lookup(a) = %v, want the DUPLICATE with result a", got)
	}
	d.rememberRecord(settled("c", time.Hour)) // b is the least recently used
	if d.lookup(ask("b")) != nil || d.lookup(ask("a")) == nil || d.lookup(ask("c")) == nil || d.len() != 2 {
		t.Errorf("after a third record: b kept=%v a=%v c=%v len=%d; want b evicted, a and c kept, 2",
			d.lookup(ask("b")) != nil, d.lookup(ask("a")) != nil, d.lookup(ask("c")) != nil, d.len())
	}

	now = now.Add(time.Hour) // a's and c's windows end
	if d.lookup(ask("a")) != nil || d.lookup(ask("c")) != nil || d.len() != 0 {
		t.Errorf("after the window: a=%v c=%v len=%d, want both forgotten", d.lookup(ask("a")) != nil, d.lookup(ask("c")) != nil, d.len())
	}

	processing := settled("p", time.Hour)
	processing.State = pb.EventState_EVENT_STATE_PROCESSING
	released := settled("r", time.Hour)
	released.Released = true
	lifecycle := settled("l", time.Hour)
	lifecycle.Lifecycle = "charge"
	for _, rec := range []*pb.Record{processing, released, lifecycle} {
		d.rememberRecord(rec)
		if d.lookup(ask(rec.Key)) != nil {
			t.Errorf("rememberRecord(%s %v released=%v lifecycle=%q) was kept, want not", rec.Key, rec.State, rec.Released, rec.Lifecycle)
		}
	}

	d.rememberRecord(settled("s", time.Hour))
	for _, r := range []ClaimRequest{
		{Namespace: "ns", Provider: "stripe", EventID: "s", EntityID: "ch_1", EventType: "charge.succeeded"},
		{Namespace: "ns", Provider: "stripe", EventID: "s", Scope: "x"},
		{Namespace: "ns", Provider: "stripe", Delivery: &Delivery{Body: []byte(`{"id":"s"}`)}},
		{Namespace: "other", Provider: "stripe", EventID: "s"},
	} {
		if d.lookup(r) != nil {
			t.Errorf("lookup(%+v) answered from the cache, want claimd asked", r)
		}
	}
	if got := d.lookup(ask("s")); got == nil {
		t.Errorf("lookup(s) = nil, want the cached answer")
	} else {
		got.Result = []byte("changed")
		if again := d.lookup(ask("s")); string(again.GetResult()) != "s" {
			t.Errorf("a caller's change to its answer reached the cache: %q", again.GetResult())
		}
	}
}
