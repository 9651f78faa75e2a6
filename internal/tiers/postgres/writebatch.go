package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// writeBatcher group-commits the fenced UPDATEs of Transition, Renew and
// Release (fenced.go), as batch.go does first claims: the statements of
// concurrent callers go to PostgreSQL as one pipeline (pgx SendBatch), which
// runs as one implicit transaction, so they share one round trip and one
// commit (one WAL flush). A batch fills while the previous one is in flight;
// there is no timer.
//
// Each statement is the very one a lone call runs and answers its own
// caller: a row (the update happened) or none (the caller explains the miss
// from the current row, as before). Nothing is decided across callers. When
// the transaction fails, none of it committed (or, if the connection broke
// at the commit, maybe all of it did), and every caller runs its statement
// again alone: one caller's failure is not the others', and a fenced update
// repeated after a commit nobody heard is answered as the repeat it is.
type writeBatcher struct {
	s     *Store
	max   int
	queue chan *queuedWrite

	mu     sync.RWMutex // guards closed against sends on a closed queue
	closed bool
	wg     sync.WaitGroup

	// batches counts the pipelines of two or more statements sent, for
	// tests.
	batches atomic.Int64
}

// queuedWrite is one fenced UPDATE waiting in the batcher.
type queuedWrite struct {
	ctx    context.Context
	key    tiers.Key
	sql    string
	args   []any
	answer chan writeAnswer // buffered: the flusher never waits for a caller that left
}

// writeAnswer is what the batch did with one statement.
type writeAnswer struct {
	rec   tiers.Record
	ok    bool // the UPDATE matched: rec is the record it wrote
	err   error
	alone bool // not run (or its transaction failed): the caller runs it itself
}

// newWriteBatcher returns a batcher; start starts its flusher. Statements
// enqueued before wait for it.
func newWriteBatcher(s *Store, maxBatch int) *writeBatcher {
	return &writeBatcher{s: s, max: maxBatch, queue: make(chan *queuedWrite, batchQueueFactor*maxBatch)}
}

func (w *writeBatcher) start() {
	w.wg.Add(1)
	go w.flusher()
}

// close stops accepting statements, lets the flusher finish what is
// queued, and waits for it.
func (w *writeBatcher) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.queue)
	}
	w.mu.Unlock()
	w.wg.Wait()
}

func (w *writeBatcher) enqueue(q *queuedWrite) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return false
	}
	select {
	case w.queue <- q:
		return true
	default:
		return false
	}
}

func (w *writeBatcher) flusher() {
	defer w.wg.Done()
	tiers.Batches(w.queue, w.max, w.flush)
}

// flush runs batch's statements in one pipeline and answers each caller.
func (w *writeBatcher) flush(batch []*queuedWrite) {
	// A caller that already left is not written for: it reports its
	// context's error, so the write must not happen behind its back.
	live := batch[:0:0]
	var deadline time.Time
	unbounded := false
	for _, q := range batch {
		if q.ctx.Err() != nil {
			q.answer <- writeAnswer{alone: true}
			continue
		}
		live = append(live, q)
		if d, ok := q.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	if unbounded || deadline.IsZero() {
		deadline = time.Now().Add(batchTimeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if len(live) == 1 {
		// Alone: the flusher runs it itself, so that the statements
		// arriving meanwhile wait and form the next batch.
		q := live[0]
		rec, ok, err := w.s.updateRowNow(ctx, q.key, q.sql, q.args...)
		q.answer <- writeAnswer{rec: rec, ok: ok, err: err}
		return
	}
	// One lock order for every batch: rows are locked in key order.
	slices.SortStableFunc(live, func(a, b *queuedWrite) int {
		return cmp.Or(cmp.Compare(a.key.Namespace, b.key.Namespace), cmp.Compare(a.key.Provider, b.key.Provider), cmp.Compare(a.key.Key, b.key.Key))
	})
	w.batches.Add(1)
	var b pgx.Batch
	for _, q := range live {
		b.Queue(q.sql, q.args...)
	}
	answers := make([]writeAnswer, len(live))
	br := w.s.pool.SendBatch(ctx, &b)
	failed := false
	for i, q := range live {
		rec, err := scanRecord(br.QueryRow(), q.key)
		switch {
		case err == nil:
			answers[i] = writeAnswer{rec: rec, ok: true}
		case errors.Is(err, pgx.ErrNoRows):
			answers[i] = writeAnswer{}
		default:
			failed = true
		}
	}
	if err := br.Close(); err != nil {
		failed = true
	}
	for i, q := range live {
		if failed {
			q.answer <- writeAnswer{alone: true}
			continue
		}
		q.answer <- answers[i]
	}
}

// updateRow runs a fenced UPDATE … RETURNING statement: ok is false when it
// matched no row. With batching on it joins the next group commit.
func (s *Store) updateRow(ctx context.Context, k tiers.Key, sql string, args ...any) (tiers.Record, bool, error) {
	if s.writes == nil {
		return s.updateRowNow(ctx, k, sql, args...)
	}
	if err := ctx.Err(); err != nil {
		return tiers.Record{}, false, err
	}
	q := &queuedWrite{ctx: ctx, key: k, sql: sql, args: args, answer: make(chan writeAnswer, 1)}
	if !s.writes.enqueue(q) {
		return s.updateRowNow(ctx, k, sql, args...)
	}
	select {
	case a := <-q.answer:
		if a.alone {
			return s.updateRowNow(ctx, k, sql, args...)
		}
		return a.rec, a.ok, a.err
	case <-ctx.Done():
		// The statement may still commit with its batch: like any write
		// whose reply was lost, the caller's retry is answered as a
		// repeat.
		return tiers.Record{}, false, ctx.Err()
	}
}

// updateRowNow runs the statement on its own.
func (s *Store) updateRowNow(ctx context.Context, k tiers.Key, sql string, args ...any) (tiers.Record, bool, error) {
	return updateRowOn(ctx, s.pool, k, sql, args...)
}
