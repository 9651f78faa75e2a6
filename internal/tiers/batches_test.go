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

// TestBatchesTakesWhatAYieldBrings: before a batch goes out, the loop
// yields to the goroutines already runnable and takes what they queue; it
// yields again while a yield brings more, never past max, and a yield that
// brings nothing sends the batch.
func TestBatchesTakesWhatAYieldBrings(t *testing.T) {
	for _, c := range []struct {
		desc       string
		arrivals   [][]int // what each yield queues, in turn
		max        int
		want       [][]int
		wantYields int
	}{
		{"nothing runnable: the lone request goes at once", nil, 64, [][]int{{0}}, 1},
		{"one yield brings two", [][]int{{1, 2}}, 64, [][]int{{0, 1, 2}}, 2},
		{"yields while they bring more", [][]int{{1}, {2, 3}, {4}}, 64, [][]int{{0, 1, 2, 3, 4}}, 4},
		{"never past max", [][]int{{1}, {2, 3}, {4}}, 3, [][]int{{0, 1, 2}, {3, 4}}, 4},
	} {
		t.Run(c.desc, func(t *testing.T) {
			queue := make(chan int, 16)
			queue <- 0
			yields := 0
			yield := func() {
				if yields < len(c.arrivals) {
					for _, r := range c.arrivals[yields] {
						queue <- r
					}
				}
				if yields++; yields == len(c.arrivals)+1 {
					close(queue) // no more arrivals: the loop drains and ends
				}
			}
			var got [][]int
			done := make(chan struct{})
			go func() {
				defer close(done)
				batches(queue, c.max, func(b []int) { got = append(got, slices.Clone(b)) }, yield)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("batches still waiting after 10s: it never yielded")
			}
			if !slices.EqualFunc(got, c.want, slices.Equal[[]int]) || yields != c.wantYields {
				t.Errorf("batches = %v after %d yields, want %v after %d", got, yields, c.want, c.wantYields)
			}
		})
	}
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
