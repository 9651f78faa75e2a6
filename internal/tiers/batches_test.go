package tiers

import (
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
