package postgres

import (
	"context"
	"sync/atomic"

	"github.com/claimd/claimd/internal/tiers"
)

// Batched reads of records.
//
// With Redis in front, a claim that Redis answers IN_PROGRESS is confirmed
// by a read of its row (twotier's confirm), so a burst of retries
// of a key in progress, the load the fast tier is there to absorb, would
// cost PostgreSQL a statement per retry. The reader coalesces the reads
// that arrive while one is in flight into the next statement, as the claim
// batcher does with claims: claim_batch_seen.sql reads every distinct key
// of a batch once. A read only joins a statement that starts after it was
// queued, so it sees every row committed before its call, as a statement of
// its own would. A read alone runs get.sql on the flusher.

// reader coalesces concurrent Gets into one statement per round trip.
type reader struct {
	s     *Store
	max   int
	queue *tiers.Queue[*queuedGet]

	// statements counts the batch statements run (a read alone is not
	// one), for tests.
	statements atomic.Int64
}

// queuedGet is one caller of Get waiting in the reader.
type queuedGet struct {
	ctx    context.Context
	key    tiers.Key
	answer chan getAnswer // buffered: the flusher never waits for a caller that left
}

// getAnswer is a read's answer: the record, tiers.ErrNotFound, or the
// statement's raw error.
type getAnswer struct {
	rec tiers.Record
	err error
}

func newReader(s *Store, maxBatch int) *reader {
	return &reader{s: s, max: maxBatch, queue: tiers.NewQueue[*queuedGet](batchQueueFactor * maxBatch)}
}

// start starts the one flusher: reads do not wait on the log, so one
// statement in flight at a time is enough to keep them coalescing.
func (r *reader) start() { r.queue.Start(1, r.max, r.flush) }

// flush reads the distinct keys of batch and answers every caller.
func (r *reader) flush(batch []*queuedGet) {
	waiting := make(map[tiers.Key][]*queuedGet, len(batch))
	var args batchArgs
	var deadline tiers.LatestDeadline
	for _, q := range batch {
		if q.ctx.Err() != nil {
			continue // nobody to answer: its caller left
		}
		if _, ok := waiting[q.key]; !ok {
			args.namespaces = append(args.namespaces, q.key.Namespace)
			args.providers = append(args.providers, q.key.Provider)
			args.keys = append(args.keys, q.key.Key)
		}
		waiting[q.key] = append(waiting[q.key], q)
		deadline.Add(q.ctx)
	}
	if len(waiting) == 0 {
		return
	}
	ctx, cancel := deadline.Context(batchTimeout)
	defer cancel()
	answer := func(k tiers.Key, a getAnswer) {
		for _, q := range waiting[k] {
			q.answer <- a
		}
	}
	if len(waiting) == 1 {
		for k := range waiting {
			rec, err := getOn(ctx, r.s.pool, k)
			answer(k, getAnswer{rec: rec, err: err})
		}
		return
	}
	r.statements.Add(1)
	found := make(map[tiers.Key]batchAnswer, len(waiting))
	err := r.s.readSeen(ctx, &args, found)
	for k := range waiting {
		switch row, ok := found[k]; {
		case err != nil:
			answer(k, getAnswer{err: err})
		case ok:
			answer(k, getAnswer{rec: *row.seen})
		default:
			answer(k, getAnswer{err: notFound(k)})
		}
	}
}

// getBatched is Get when batching is on: it joins the next read statement,
// or reads alone when the queue is full. It returns tiers.ErrNotFound or
// the raw database error, as get does.
func (s *Store) getBatched(ctx context.Context, k tiers.Key) (tiers.Record, error) {
	if err := ctx.Err(); err != nil {
		return tiers.Record{}, err
	}
	q := &queuedGet{ctx: ctx, key: k, answer: make(chan getAnswer, 1)}
	if !s.reads.queue.TryEnqueue(q) {
		return s.get(ctx, k)
	}
	select {
	case a := <-q.answer:
		return a.rec, a.err
	case <-ctx.Done():
		return tiers.Record{}, ctx.Err()
	}
}
