package tiers

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestBatchesTakesWhatIsQueued: a batch is the first request plus what is
// already queued, at most max, in order; closing the queue drains it.
func TestBatchesTakesWhatIsQueued(t *testing.T) {
	queue := make(chan int, 10)
	for i := range 7 {
		queue <- i
	}
	close(queue)
	var batches [][]int
	Batches(queue, 3, func(b []int) { batches = append(batches, slices.Clone(b)) })
	want := [][]int{{0, 1, 2}, {3, 4, 5}, {6}}
	if !slices.EqualFunc(batches, want, slices.Equal[[]int]) {
		t.Fatalf("Batches = %v, want %v", batches, want)
	}
}

// TestBatchesDoesNotWaitToFill: a lone request is flushed at once, not held
// back for company.
func TestBatchesDoesNotWaitToFill(t *testing.T) {
	queue := make(chan int)
	flushed := make(chan []int)
	go Batches(queue, 64, func(b []int) { flushed <- slices.Clone(b) })
	queue <- 42
	if got := <-flushed; !slices.Equal(got, []int{42}) {
		t.Fatalf("first batch = %v, want [42]", got)
	}
	close(queue)
}

// TestQueueLifecycle: requests queued before Start wait for it; TryEnqueue
// refuses a full queue; Close lets the flushers drain what is queued and
// then refuses every request.
func TestQueueLifecycle(t *testing.T) {
	q := NewQueue[int](2)
	if !q.TryEnqueue(1) || !q.TryEnqueue(2) {
		t.Fatal("TryEnqueue into an empty queue of room 2 refused")
	}
	if q.TryEnqueue(3) {
		t.Error("TryEnqueue into a full queue accepted")
	}
	if q.Len() != 2 || q.Cap() != 2 {
		t.Errorf("Len, Cap = %d, %d; want 2, 2", q.Len(), q.Cap())
	}
	flushed := make(chan []int, 4)
	q.Start(1, 8, func(b []int) { flushed <- slices.Clone(b) })
	q.Close()
	close(flushed)
	var got []int
	for b := range flushed {
		got = append(got, b...)
	}
	if !slices.Equal(got, []int{1, 2}) {
		t.Errorf("flushed %v, want the two queued before Start", got)
	}
	if q.TryEnqueue(4) {
		t.Error("TryEnqueue after Close accepted")
	}
	if err := q.Enqueue(context.Background(), 5); !errors.Is(err, ErrQueueClosed) {
		t.Errorf("Enqueue after Close = %v, want ErrQueueClosed", err)
	}
}

// TestQueueEnqueueWaitsForRoom: Enqueue into a full queue waits while its
// context allows, and queues nothing when the caller leaves first.
func TestQueueEnqueueWaitsForRoom(t *testing.T) {
	q := NewQueue[int](1)
	if err := q.Enqueue(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Enqueue(ctx, 2); !errors.Is(err, context.Canceled) || q.Len() != 1 {
		t.Errorf("Enqueue into a full queue, caller gone = %v with %d queued; want context.Canceled, 1", err, q.Len())
	}
	done := make(chan error)
	go func() { done <- q.Enqueue(context.Background(), 3) }()
	flushed := make(chan []int, 4)
	q.Start(1, 1, func(b []int) { flushed <- slices.Clone(b) })
	if err := <-done; err != nil {
		t.Errorf("Enqueue once the flusher made room = %v", err)
	}
	q.Close()
	close(flushed)
	var got []int
	for b := range flushed {
		got = append(got, b...)
	}
	if !slices.Equal(got, []int{1, 3}) {
		t.Errorf("flushed %v, want [1 3]", got)
	}
}

// TestLatestDeadline: the batch context ends at the latest caller's
// deadline, or after the fallback when a caller has none; a fallback of 0
// leaves it unbounded.
func TestLatestDeadline(t *testing.T) {
	early, cancelEarly := context.WithDeadline(context.Background(), time.Now().Add(time.Minute))
	defer cancelEarly()
	late, cancelLate := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancelLate()
	lateAt, _ := late.Deadline()

	var l LatestDeadline
	l.Add(early)
	l.Add(late)
	ctx, cancel := l.Context(time.Second)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(lateAt) {
		t.Errorf("deadline of two bounded callers = %v, %v; want the later, %v", d, ok, lateAt)
	}
	cancel()

	l.Add(context.Background())
	before := time.Now()
	ctx, cancel = l.Context(time.Second)
	if d, ok := ctx.Deadline(); !ok || d.Before(before.Add(time.Second)) || d.After(time.Now().Add(time.Second)) {
		t.Errorf("deadline with an unbounded caller = %v, %v; want the fallback, a second from now", d, ok)
	}
	cancel()
	ctx, cancel = l.Context(0)
	if _, ok := ctx.Deadline(); ok {
		t.Error("a fallback of 0 with an unbounded caller set a deadline")
	}
	cancel()
}
