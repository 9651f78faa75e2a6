package tiers

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// submitted is the end of one Submit running on a goroutine of its own.
type submitted struct {
	res int
	err error
}

// submit runs q.Submit(ctx, item) on a goroutine and returns its end.
func submit(q *Queue[int, int], ctx context.Context, item int) <-chan submitted {
	end := make(chan submitted, 1)
	go func() {
		res, err := q.Submit(ctx, item)
		end <- submitted{res, err}
	}()
	return end
}

// queueing submits items one after the other to q, paused, each once the
// one before it is queued, so that the queue holds them in that order.
func queueing(t *testing.T, q *Queue[int, int], ctx context.Context, items ...int) []<-chan submitted {
	t.Helper()
	var ends []<-chan submitted
	for _, item := range items {
		n := q.Len()
		ends = append(ends, submit(q, ctx, item))
		waitFor(t, "item queued", func() bool { return q.Len() > n })
	}
	return ends
}

// waitFor polls cond, yielding between polls, and fails the test when it
// still does not hold after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10s", what)
		}
		runtime.Gosched()
	}
}

// end waits for a Submit to return, failing the test after 10 s.
func end(t *testing.T, what string, e <-chan submitted) submitted {
	t.Helper()
	select {
	case s := <-e:
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Submit still waiting after 10s", what)
		return submitted{}
	}
}

// TestQueueAnswersEachCaller: the flush gets a batch's calls in the order
// they were queued, and each caller gets the answer and error of its own.
func TestQueueAnswersEachCaller(t *testing.T) {
	q := NewQueue[int, int](8, LeaveAtOnce)
	ends := queueing(t, q, context.Background(), 1, 2, 3)
	errTwo := errors.New("two failed")
	var got []int
	q.Start(1, 8, func(batch []*Call[int, int]) {
		for _, c := range batch {
			got = append(got, c.Item)
			if c.Item == 2 {
				c.Answer(0, errTwo)
				continue
			}
			c.Answer(c.Item*10, nil)
		}
	})
	want := []submitted{{10, nil}, {0, errTwo}, {30, nil}}
	for i, e := range ends {
		if s := end(t, "answered", e); s != want[i] {
			t.Errorf("Submit(%d) = %d, %v; want %d, %v", i+1, s.res, s.err, want[i].res, want[i].err)
		}
	}
	q.Close()
	if !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("flush got %v, want [1 2 3], in the order queued", got)
	}
}

// TestQueueLeftBeforeTaken: a caller whose context ends while its item
// waits gets the context's error, and the flush never sees its item,
// whether the caller noticed before the flusher came or not.
func TestQueueLeftBeforeTaken(t *testing.T) {
	for _, c := range []struct {
		desc     string
		leaving  Leaving
		noticed  bool // the caller returned before the flusher started
		wantSeen []int
	}{
		{"caller returned first, leave at once", LeaveAtOnce, true, []int{2}},
		{"caller returned first, await answer", AwaitAnswer, true, []int{2}},
		{"flusher came first, leave at once", LeaveAtOnce, false, []int{2}},
		{"flusher came first, await answer", AwaitAnswer, false, []int{2}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			q := NewQueue[int, int](8, c.leaving)
			ctx, cancel := context.WithCancel(context.Background())
			left := queueing(t, q, ctx, 1)[0]
			stayed := queueing(t, q, context.Background(), 2)[0]
			cancel()
			if c.noticed {
				if s := end(t, "left", left); !errors.Is(s.err, context.Canceled) {
					t.Errorf("Submit of a caller gone = %d, %v; want context.Canceled", s.res, s.err)
				}
			}
			var seen []int
			q.Start(1, 8, func(batch []*Call[int, int]) {
				for _, call := range batch {
					seen = append(seen, call.Item)
					call.Answer(call.Item, nil)
				}
			})
			if s := end(t, "stayed", stayed); s.res != 2 || s.err != nil {
				t.Errorf("Submit of the caller that stayed = %d, %v; want 2, nil", s.res, s.err)
			}
			if !c.noticed {
				if s := end(t, "left", left); !errors.Is(s.err, context.Canceled) {
					t.Errorf("Submit of a caller gone = %d, %v; want context.Canceled", s.res, s.err)
				}
			}
			q.Close()
			if !slices.Equal(seen, c.wantSeen) {
				t.Errorf("flush saw %v, want %v: a withdrawn item must not run", seen, c.wantSeen)
			}
		})
	}
}

// TestQueueLeftAfterTaken: a caller whose context ends while the flush
// runs its item gets the context's error at once (LeaveAtOnce), or waits
// for the item's answer and returns it (AwaitAnswer).
func TestQueueLeftAfterTaken(t *testing.T) {
	for _, c := range []struct {
		desc    string
		leaving Leaving
	}{
		{"leave at once", LeaveAtOnce},
		{"await answer", AwaitAnswer},
	} {
		t.Run(c.desc, func(t *testing.T) {
			q := NewQueue[int, int](8, c.leaving)
			awaiting := make(chan struct{}, 1)
			q.awaiting = func() { awaiting <- struct{}{} }
			taken, released := make(chan struct{}), make(chan struct{})
			release := sync.OnceFunc(func() { close(released) })
			q.Start(1, 8, func(batch []*Call[int, int]) {
				close(taken)
				<-released
				for _, call := range batch {
					call.Answer(call.Item*10, nil)
				}
			})
			defer q.Close()
			defer release() // before Close, when the test fails early
			ctx, cancel := context.WithCancel(context.Background())
			e := submit(q, ctx, 7)
			<-taken
			cancel()
			if c.leaving == LeaveAtOnce {
				// Returned while the flush still holds the item.
				if s := end(t, "left", e); !errors.Is(s.err, context.Canceled) {
					t.Errorf("Submit, caller gone while its item ran = %d, %v; want context.Canceled", s.res, s.err)
				}
				release()
				return
			}
			select { // the caller saw its context end, and waits on
			case <-awaiting:
			case s := <-e:
				t.Fatalf("Submit, caller gone while its item ran = %d, %v before the answer; want it to wait for the answer", s.res, s.err)
			}
			release()
			if s := end(t, "awaited", e); s.res != 70 || s.err != nil {
				t.Errorf("Submit, caller gone while its item ran = %d, %v; want its answer 70, nil", s.res, s.err)
			}
		})
	}
}

// TestQueueRoom: TrySubmit refuses a full or closing queue at once and
// queues nothing; Submit waits for room while its caller stays, and
// refuses a closing queue; a caller gone before it submits queues nothing.
func TestQueueRoom(t *testing.T) {
	q := NewQueue[int, int](1, LeaveAtOnce)
	first := queueing(t, q, context.Background(), 1)[0]
	if _, err := q.TrySubmit(context.Background(), 2); !errors.Is(err, ErrNotQueued) || q.Len() != 1 {
		t.Errorf("TrySubmit into a full queue = %v with %d queued; want ErrNotQueued, 1", err, q.Len())
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.Submit(gone, 3); !errors.Is(err, context.Canceled) || q.Len() != 1 {
		t.Errorf("Submit by a caller gone = %v with %d queued; want context.Canceled, 1", err, q.Len())
	}
	waiting := submit(q, context.Background(), 4) // waits for room
	q.Start(1, 1, func(batch []*Call[int, int]) {
		for _, c := range batch {
			c.Answer(c.Item, nil)
		}
	})
	if s := end(t, "first", first); s.res != 1 || s.err != nil {
		t.Errorf("Submit(1) = %d, %v; want 1, nil", s.res, s.err)
	}
	if s := end(t, "waited for room", waiting); s.res != 4 || s.err != nil {
		t.Errorf("Submit(4) into a full queue, once the flusher made room = %d, %v; want 4, nil", s.res, s.err)
	}
	q.Close()
	if _, err := q.Submit(context.Background(), 5); !errors.Is(err, ErrQueueClosed) {
		t.Errorf("Submit after Close = %v, want ErrQueueClosed", err)
	}
	if _, err := q.TrySubmit(context.Background(), 6); !errors.Is(err, ErrNotQueued) {
		t.Errorf("TrySubmit after Close = %v, want ErrNotQueued", err)
	}
}

// TestBatchContext: a batch's context ends at the latest caller's
// deadline, or after the fallback when a caller has none; a fallback of 0
// leaves it unbounded.
func TestBatchContext(t *testing.T) {
	early, cancelEarly := context.WithDeadline(context.Background(), time.Now().Add(time.Minute))
	defer cancelEarly()
	late, cancelLate := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancelLate()
	lateAt, _ := late.Deadline()
	call := func(ctx context.Context) *Call[int, int] { return &Call[int, int]{ctx: ctx} }

	bounded := []*Call[int, int]{call(early), call(late)}
	ctx, cancel := BatchContext(bounded, time.Second)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(lateAt) {
		t.Errorf("deadline of two bounded callers = %v, %v; want the later, %v", d, ok, lateAt)
	}
	cancel()

	unbounded := append(bounded, call(context.Background()))
	before := time.Now()
	ctx, cancel = BatchContext(unbounded, time.Second)
	if d, ok := ctx.Deadline(); !ok || d.Before(before.Add(time.Second)) || d.After(time.Now().Add(time.Second)) {
		t.Errorf("deadline with an unbounded caller = %v, %v; want the fallback, a second from now", d, ok)
	}
	cancel()
	ctx, cancel = BatchContext(unbounded, 0)
	if _, ok := ctx.Deadline(); ok {
		t.Error("a fallback of 0 with an unbounded caller set a deadline")
	}
	cancel()
}
