package tiers

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Queue is the group-commit queue the backends share (PostgreSQL's claim,
// read and write batchers, SQLite's committer, Redis's script coalescer).
// A caller submits an item and waits for its answer; the flushers (Start)
// take batches of the items queued meanwhile (Batches) and hand the flush
// callback those whose callers still wait, each as a Call to answer.
//
// The contract, in one place for every batcher:
//   - An item is run at most once, by the flush, or not at all.
//   - A caller whose context ends before the flush takes its item
//     withdraws it: Submit returns the context's error, and the flush never
//     sees the item (nothing is run for it).
//   - A caller whose context ends after the flush took its item gets what
//     the queue's Leaving says: the context's error at once (LeaveAtOnce),
//     or the item's answer once it comes (AwaitAnswer).
//   - Every other caller gets the answer the flush gave its own call.
//
// Close stops accepting items, lets the flushers drain what is queued, and
// waits for them. Items queued before Start wait for it (tests pause a
// queue that way).
type Queue[T, R any] struct {
	ch      chan *Call[T, R]
	leaving Leaving
	mu      sync.RWMutex // guards closed against sends on a closed channel
	closed  bool
	wg      sync.WaitGroup

	// awaiting, when set (tests), is called when a caller whose context
	// ended goes on waiting for the answer of its taken item.
	awaiting func()
}

// Leaving is what Submit does when its caller's context ends after the
// flush took the item: the item is then running, and may take effect
// whatever the caller does.
type Leaving int

const (
	// LeaveAtOnce returns the context's error at once; the item's answer,
	// when it comes, is heard by nobody. For items whose effect unheard is
	// safe: a claim that commits unheard holds its key under a lease, a
	// read changes nothing, a Redis script is checked by version or nonce.
	LeaveAtOnce Leaving = iota
	// AwaitAnswer waits for the item's answer and returns it as if the
	// caller had stayed (with the error, if any, the flush gave): for
	// writes whose answer is the only word of what they did, which a fast
	// tier in front must hear to repair itself (postgres's fenced writes).
	AwaitAnswer
)

// ErrQueueClosed is Submit's answer once the queue is closing: nothing was
// queued.
var ErrQueueClosed = errors.New("queue closed")

// ErrNotQueued is TrySubmit's answer when the queue is full or closing:
// nothing was queued, and the caller runs its item itself.
var ErrNotQueued = errors.New("not queued: queue full or closing")

// The states of a Call: queued until the flush takes it (taken: it will be
// answered) or its caller leaves first (withdrawn: nothing is run for it).
const (
	callQueued int32 = iota
	callTaken
	callWithdrawn
)

// Call is one caller's item in a Queue, as the flush sees it. The flush
// must Answer every call it is given, exactly once.
type Call[T, R any] struct {
	// Item is what the caller submitted. The flush may change it (a cache
	// of derived values); the caller's own copy stays as it was.
	Item T

	ctx   context.Context
	state atomic.Int32
	res   R
	err   error
	done  chan struct{}
}

// Context is the caller's context. A batch statement must not run under
// it (one caller's end would fail the others: BatchContext); an item run
// alone may.
func (c *Call[T, R]) Context() context.Context { return c.ctx }

// Answer hands the caller res and err, the result of its own item.
func (c *Call[T, R]) Answer(res R, err error) {
	c.res, c.err = res, err
	close(c.done)
}

// NewQueue returns a queue with room for size items whose callers, when
// they leave after their item was taken, do as leaving says.
func NewQueue[T, R any](size int, leaving Leaving) *Queue[T, R] {
	return &Queue[T, R]{ch: make(chan *Call[T, R], size), leaving: leaving}
}

// Start runs flushers goroutines, each the Batches loop of at most max
// items per batch over the queue. flush gets the calls of a batch whose
// callers still wait, in the order they were queued, never none; it may
// reorder the slice but must not keep it.
func (q *Queue[T, R]) Start(flushers, max int, flush func(batch []*Call[T, R])) {
	q.wg.Add(flushers)
	for range flushers {
		go func() {
			defer q.wg.Done()
			Batches(q.ch, max, func(batch []*Call[T, R]) {
				if live := take(batch); len(live) > 0 {
					flush(live)
				}
			})
		}()
	}
}

// take marks the calls of batch whose callers still wait as taken and
// returns them, in order, in batch's own array. The others are withdrawn:
// their callers return their contexts' errors, and nothing is run for them.
func take[T, R any](batch []*Call[T, R]) []*Call[T, R] {
	live := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() == nil && c.state.CompareAndSwap(callQueued, callTaken) {
			live = append(live, c)
			continue
		}
		c.state.CompareAndSwap(callQueued, callWithdrawn) // its caller left, or is leaving
	}
	return live
}

// Submit queues item, waiting for room while ctx allows, and returns its
// answer (Queue says what a caller that leaves gets). It returns
// ErrQueueClosed once the queue is closing, and ctx's error when the caller
// left before the item was queued: either way nothing was queued.
func (q *Queue[T, R]) Submit(ctx context.Context, item T) (R, error) {
	return q.submit(ctx, item, true)
}

// TrySubmit is Submit without waiting for room: when the queue is full or
// closing it returns ErrNotQueued at once, and the caller runs item itself.
func (q *Queue[T, R]) TrySubmit(ctx context.Context, item T) (R, error) {
	return q.submit(ctx, item, false)
}

func (q *Queue[T, R]) submit(ctx context.Context, item T, wait bool) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	c := &Call[T, R]{Item: item, ctx: ctx, done: make(chan struct{})}
	if err := q.enqueue(ctx, c, wait); err != nil {
		return zero, err
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
	}
	if q.leaving == LeaveAtOnce || c.state.CompareAndSwap(callQueued, callWithdrawn) || c.state.Load() == callWithdrawn {
		return zero, ctx.Err()
	}
	// Taken: the item runs, and only its answer tells what it did.
	if q.awaiting != nil {
		q.awaiting()
	}
	<-c.done
	return c.res, c.err
}

// enqueue queues c; with wait, it waits for room while ctx allows. A
// sender waiting for room holds Close back, and gets room because the
// flushers drain until Close.
func (q *Queue[T, R]) enqueue(ctx context.Context, c *Call[T, R], wait bool) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		if !wait {
			return ErrNotQueued
		}
		return ErrQueueClosed
	}
	if !wait {
		select {
		case q.ch <- c:
			return nil
		default:
			return ErrNotQueued
		}
	}
	select {
	case q.ch <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting items, lets the flushers finish what is queued,
// and waits for them.
func (q *Queue[T, R]) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	q.wg.Wait()
}

// Len is the number of items waiting, Cap the queue's room.
func (q *Queue[T, R]) Len() int { return len(q.ch) }
func (q *Queue[T, R]) Cap() int { return cap(q.ch) }

// BatchContext is the context of a statement run for batch: it outlives
// any one caller (one caller's end must not fail the others' items) but
// none of them, ending at the latest of their deadlines or, when a caller
// has none, after fallback; a fallback of 0 leaves it unbounded.
func BatchContext[T, R any](batch []*Call[T, R], fallback time.Duration) (context.Context, context.CancelFunc) {
	var l latestDeadline
	for _, c := range batch {
		l.add(c.ctx)
	}
	return l.context(fallback)
}

// latestDeadline collects the deadlines of a batch's callers.
type latestDeadline struct {
	at        time.Time
	unbounded bool
}

// add counts ctx's deadline, or its lack of one.
func (l *latestDeadline) add(ctx context.Context) {
	if d, ok := ctx.Deadline(); !ok {
		l.unbounded = true
	} else if d.After(l.at) {
		l.at = d
	}
}

// context ends at the latest deadline added or, when a caller had none (or
// none was added), after fallback; a fallback of 0 leaves it unbounded.
func (l *latestDeadline) context(fallback time.Duration) (context.Context, context.CancelFunc) {
	at := l.at
	if l.unbounded || at.IsZero() {
		if fallback == 0 {
			return context.WithCancel(context.Background())
		}
		at = time.Now().Add(fallback)
	}
	return context.WithDeadline(context.Background(), at)
}
