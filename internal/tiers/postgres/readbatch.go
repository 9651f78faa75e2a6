package postgres

import (
	"context"
	"errors"
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
	queue *tiers.Queue[tiers.Key, tiers.Record]

	// statements counts the batch statements run (a read alone is not
	// one), for tests.
	statements atomic.Int64
}

// queuedGet is one caller of Get, as the flusher sees it; it is answered
// with the record, tiers.ErrNotFound, or the statement's raw error.
type queuedGet = tiers.Call[tiers.Key, tiers.Record]

// newReader returns a reader; a caller that leaves returns at once, since a
// read changes nothing.
func newReader(s *Store, maxBatch int) *reader {
	return &reader{s: s, max: maxBatch, queue: tiers.NewQueue[tiers.Key, tiers.Record](batchQueueFactor*maxBatch, tiers.LeaveAtOnce)}
}

// start starts the one flusher: reads do not wait on the log, so one
// statement in flight at a time is enough to keep them coalescing.
func (r *reader) start() { r.queue.Start(1, r.max, r.flush) }

// flush reads the distinct keys of batch and answers every caller.
func (r *reader) flush(batch []*queuedGet) {
	waiting := make(map[tiers.Key][]*queuedGet, len(batch))
	var args batchArgs
	for _, c := range batch {
		if _, ok := waiting[c.Item]; !ok {
			args.namespaces = append(args.namespaces, c.Item.Namespace)
			args.providers = append(args.providers, c.Item.Provider)
			args.keys = append(args.keys, c.Item.Key)
		}
		waiting[c.Item] = append(waiting[c.Item], c)
	}
	ctx, cancel := tiers.BatchContext(batch, batchTimeout)
	defer cancel()
	answer := func(k tiers.Key, rec tiers.Record, err error) {
		for _, c := range waiting[k] {
			c.Answer(rec, err)
		}
	}
	if len(waiting) == 1 {
		k := batch[0].Item
		rec, err := getOn(ctx, r.s.pool, k)
		answer(k, rec, err)
		return
	}
	r.statements.Add(1)
	found := make(map[tiers.Key]batchAnswer, len(waiting))
	err := r.s.readSeen(ctx, &args, found)
	for k := range waiting {
		switch row, ok := found[k]; {
		case err != nil:
			answer(k, tiers.Record{}, err)
		case ok:
			answer(k, *row.seen, nil)
		default:
			answer(k, tiers.Record{}, notFound(k))
		}
	}
}

// getBatched is Get when batching is on: it joins the next read statement,
// or reads alone when the queue is full. It returns tiers.ErrNotFound or
// the raw database error, as get does.
func (s *Store) getBatched(ctx context.Context, k tiers.Key) (tiers.Record, error) {
	rec, err := s.reads.queue.TrySubmit(ctx, k)
	if errors.Is(err, tiers.ErrNotQueued) {
		return s.get(ctx, k)
	}
	return rec, err
}
