package tiers

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// Queue feeds the group-commit loop the backends share (Batches): callers
// queue requests while a batch is in flight. Start runs the flushers; Close
// stops accepting requests, lets the flushers drain what is queued, and
// waits for them. Requests queued before Start wait for it (tests pause a
// queue that way).
type Queue[T any] struct {
	ch     chan T
	mu     sync.RWMutex // guards closed against sends on a closed channel
	closed bool
	wg     sync.WaitGroup
}

// ErrQueueClosed is Enqueue's answer once the queue is closing.
var ErrQueueClosed = errors.New("queue closed")

// NewQueue returns a queue with room for size requests.
func NewQueue[T any](size int) *Queue[T] { return &Queue[T]{ch: make(chan T, size)} }

// Start runs flushers goroutines, each the Batches loop of at most max
// requests per batch over the queue.
func (q *Queue[T]) Start(flushers, max int, flush func(batch []T)) {
	q.wg.Add(flushers)
	for range flushers {
		go func() {
			defer q.wg.Done()
			Batches(q.ch, max, flush)
		}()
	}
}

// TryEnqueue queues r unless the queue is full or closed: false tells the
// caller to run its request itself.
func (q *Queue[T]) TryEnqueue(r T) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return false
	}
	select {
	case q.ch <- r:
		return true
	default:
		return false
	}
}

// Enqueue queues r, waiting for room while ctx allows. It returns
// ErrQueueClosed once the queue is closing and ctx's error when the caller
// left first; either way nothing was queued. A sender waiting for room
// holds Close back, and gets room because the flushers drain until Close.
func (q *Queue[T]) Enqueue(ctx context.Context, r T) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return ErrQueueClosed
	}
	select {
	case q.ch <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting requests, lets the flushers finish what is queued,
// and waits for them.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	q.wg.Wait()
}

// Len is the number of requests waiting, Cap the queue's room.
func (q *Queue[T]) Len() int { return len(q.ch) }
func (q *Queue[T]) Cap() int { return cap(q.ch) }

// LatestDeadline collects the deadlines of a batch's callers: the batch's
// statement outlives any one caller (one caller's end must not fail the
// others' writes), but none of them.
type LatestDeadline struct {
	at        time.Time
	unbounded bool
}

// Add counts ctx's deadline, or its lack of one.
func (l *LatestDeadline) Add(ctx context.Context) {
	if d, ok := ctx.Deadline(); !ok {
		l.unbounded = true
	} else if d.After(l.at) {
		l.at = d
	}
}

// Context ends at the latest deadline added or, when a caller had none (or
// none was added), after fallback; a fallback of 0 leaves it unbounded.
func (l *LatestDeadline) Context(fallback time.Duration) (context.Context, context.CancelFunc) {
	at := l.at
	if l.unbounded || at.IsZero() {
		if fallback == 0 {
			return context.WithCancel(context.Background())
		}
		at = time.Now().Add(fallback)
	}
	return context.WithDeadline(context.Background(), at)
}

// Batches runs the group-commit loop the backends share (PostgreSQL's claim
// and write batchers, SQLite's committer, Redis's script coalescer): it
// takes the first request off queue, adds whatever else is already queued
// (up to max), hands the batch to flush, and starts over, until queue is
// closed and drained. A batch is whatever queued while the previous one was
// in flight; no timer ever holds a request back. The slice flush gets is
// reused: flush must not keep it, and its references are cleared after
// flush returns so answered callers can be collected.
//
// Before it sends a batch, the loop yields its processor (runtime.Gosched)
// to the goroutines that are already runnable, and takes what they queue
// meanwhile; it yields again as long as a yield brings more, up to max.
// Those goroutines were woken by the previous batch's answers or by their
// callers' requests and are about to queue: without the yield, the first
// of them went out alone, a whole round trip and commit for one request,
// while the rest queued behind it. Under a closed loop of 50 callers half
// of PostgreSQL's batches were of one claim; with the yield a lifecycle
// event cost a sixth less CPU (claimd, Redis and PostgreSQL together) and
// ran 13 % faster (bench/NOTES.md). A yield holds a batch back only while
// others run that would have run anyway, and when nothing else is runnable
// it returns at once: a lone request on a quiet server still goes out
// immediately.
func Batches[T any](queue <-chan T, max int, flush func(batch []T)) {
	batches(queue, max, flush, runtime.Gosched)
}

// batches is Batches with yield in place of runtime.Gosched (tests).
func batches[T any](queue <-chan T, max int, flush func(batch []T), yield func()) {
	batch := make([]T, 0, max)
	for q := range queue {
		batch = fill(queue, append(batch[:0], q), max)
		for n := 0; n != len(batch) && len(batch) < max; {
			n = len(batch)
			yield()
			batch = fill(queue, batch, max)
		}
		flush(batch)
		clear(batch)
	}
}

// fill appends to batch what queue holds now, up to max requests in all.
func fill[T any](queue <-chan T, batch []T, max int) []T {
	for len(batch) < max {
		select {
		case q, ok := <-queue:
			if !ok {
				return batch
			}
			batch = append(batch, q)
		default:
			return batch
		}
	}
	return batch
}
