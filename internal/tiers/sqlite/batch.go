package sqlite

import (
	"context"
	"sync/atomic"

	"github.com/claimd/claimd/internal/tiers"
)

// Group commit of writes.
//
// With synchronous=FULL a COMMIT waits for an fsync of the WAL, and one
// fsync per claim caps the embedded tier at the disk's flush rate however
// many callers wait. SQLite has a single writer anyway, so every write goes
// to one committer goroutine, the model of postgres/batch.go: it takes
// whatever is queued (up to MaxBatch) the moment it is free, runs the writes
// one after the other in one transaction, commits once, and then answers
// every caller. No timer holds a write back: a lone write commits at once,
// and batches grow only with the load, filling while the previous COMMIT is
// being fsynced.
//
// Each write reads, decides and writes in its own savepoint, after the
// writes queued before it: it sees them exactly as it would if each had
// committed on its own, so two claims of one key in one batch are answered
// ACQUIRED and IN_PROGRESS, and every decision stays tiers.Decide's. A write
// whose statements fail is rolled back to its savepoint and answered with
// its error; the others still commit. Claims, Transitions, Renews, Releases
// and the janitor's deletes all queue here: SQLite would serialize them on
// the write lock in any case, and a transition settling a payment needs its
// fsync as much as the claim did.

// Defaults of the committer.
const (
	defaultMaxBatch = 64
	// commitQueueFactor sizes the queue as a multiple of MaxBatch: a write
	// that finds it full waits for room (honouring its context), since
	// there is no second writer to run it instead.
	commitQueueFactor = 4
)

// Savepoint statements, prepared with the others (stmts). One name serves
// every write: each savepoint is released before the next is opened.
const (
	savepointSQL  = `SAVEPOINT write`
	releaseSQL    = `RELEASE write`
	rollbackToSQL = `ROLLBACK TO write`
)

// committer runs every write of a Store, in batches.
type committer struct {
	s     *Store
	max   int
	queue *tiers.Queue[writeFunc, struct{}]

	// Counters, for tests: transactions run, and writes they committed.
	batches, committed atomic.Int64
}

// writeFunc is one caller's write: it runs on the committer's goroutine,
// under the batch's context, never the caller's.
type writeFunc func(t *txn) error

// writeReq is one caller's write, as the committer sees it; it is answered
// with the write's error, or the transaction's.
type writeReq = tiers.Call[writeFunc, struct{}]

// newCommitter returns a committer; start starts it. A caller that leaves
// once its write was taken returns at once (tiers.LeaveAtOnce): the write
// may still commit (txn.go's write says why that is safe).
func newCommitter(s *Store, maxBatch int) *committer {
	return &committer{s: s, max: maxBatch, queue: tiers.NewQueue[writeFunc, struct{}](commitQueueFactor*maxBatch, tiers.LeaveAtOnce)}
}

// start starts the committer goroutine. Writes enqueued before wait for it.
func (c *committer) start() { c.queue.Start(1, c.max, c.commit) }

// commit runs batch in one transaction and answers every caller in it.
//
// The transaction runs under no caller's context: the driver interrupts a
// statement whose context ends, and SQLite answers an interrupted write
// inside a transaction by rolling back the whole transaction — every other
// caller's write with it. A caller's context is therefore checked only
// before its write runs (tiers.Queue leaves out the callers gone before the
// batch, and each write is checked again before it starts); a caller that
// left by then is answered with its context's error and nothing is written
// for it. The only wait that is not bounded by the work itself, another
// process's lock on the file (claimd prune or migrate), is bounded by the
// busy timeout.
func (c *committer) commit(batch []*writeReq) {
	c.batches.Add(1)
	ctx := context.Background()
	tx, err := c.s.w.BeginTx(ctx, nil)
	if err != nil {
		for _, q := range batch {
			q.Answer(struct{}{}, err)
		}
		return
	}
	t := &txn{ctx: ctx, tx: tx, st: c.s.wst, step: c.s.step}
	var written []*writeReq // run in the transaction, to be answered at COMMIT
	for i, q := range batch {
		// Checked again: BEGIN IMMEDIATE may have waited for the lock,
		// and so may the writes before this one.
		if err := q.Context().Err(); err != nil {
			q.Answer(struct{}{}, err)
			continue
		}
		werr, err := c.write(t, q)
		switch {
		case err != nil:
			// The transaction is gone (SQLite rolls it back whole on
			// some errors: a full disk, an I/O error), so nothing of the
			// batch commits: every caller not yet answered hears why.
			tx.Rollback()
			for _, q := range append(written, batch[i:]...) {
				q.Answer(struct{}{}, err)
			}
			return
		case werr != nil:
			q.Answer(struct{}{}, werr) // its statements were rolled back; the others go on
		default:
			written = append(written, q)
		}
	}
	if len(written) == 0 {
		tx.Rollback() // every write was refused: nothing to fsync
		return
	}
	// A failed COMMIT may still have written the batch: the WAL frames
	// with their commit mark may have reached the file before the fsync
	// failed, and recovery after a restart would then replay them. Every
	// caller gets the error (the service fails closed, UNAVAILABLE), and
	// each stays correct either way: an ACQUIRED that committed unheard
	// holds the key under its lease (answered IN_PROGRESS, never
	// DUPLICATE, until it runs out), and a Transition repeated with the
	// same token changes nothing.
	err = tx.Commit()
	if err == nil {
		c.committed.Add(int64(len(written)))
	}
	for _, q := range written {
		q.Answer(struct{}{}, err)
	}
}

// write runs q's work in a savepoint of t. werr is the work's own error:
// its statements were rolled back, and the transaction goes on without
// them. err means the transaction itself cannot go on.
func (c *committer) write(t *txn, q *writeReq) (werr, err error) {
	if err := t.exec(t.st.savepoint); err != nil {
		return nil, err
	}
	if werr := q.Item(t); werr != nil {
		if err := t.exec(t.st.rollbackTo); err != nil {
			return nil, werr // the savepoint went with the transaction
		}
		return werr, t.exec(t.st.release)
	}
	return nil, t.exec(t.st.release)
}
