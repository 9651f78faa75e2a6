package tiers

import (
	"slices"
	"testing"
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
