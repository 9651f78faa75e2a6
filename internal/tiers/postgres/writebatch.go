package postgres

import (
	"context"
	"errors"
	"slices"
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
// from the current row, as before). Nothing is decided across callers. A
// batch of Transitions only, of distinct keys (the common case: handlers
// settling their own deliveries), goes as one statement instead,
// transition_batch.sql, whose row i is call i's transition.sql: PostgreSQL
// then executes one statement for the batch instead of one per call, about a
// third of the CPU per transition (BENCHMARKS.md). When
// the transaction fails, none of it committed (or, if the connection broke
// at the commit, maybe all of it did), and every caller runs its statement
// again alone: one caller's failure is not the others', and a fenced update
// repeated after a commit nobody heard is answered as the repeat it is.
type writeBatcher struct {
	s     *Store
	max   int
	queue *tiers.Queue[queuedWrite, *writeAnswer]

	// batches counts the batches of two or more statements sent, and
	// transitionBatches those sent as one transition_batch.sql, for tests.
	batches, transitionBatches atomic.Int64
}

// queuedWrite is one fenced UPDATE: its statement and arguments.
type queuedWrite struct {
	key        tiers.Key
	sql        string
	args       []any          // sql's arguments; for a transition, made only when it runs alone (statementArgs)
	transition *transitionRow // set when the statement is transition.sql without the entity lock
}

// writeCall is one caller's write, as the flusher sees it.
type writeCall = tiers.Call[queuedWrite, *writeAnswer]

// transitionRow is one Transition's arguments: transition.sql's, or a row of
// transition_batch.sql's arrays.
type transitionRow struct {
	key        tiers.Key
	now        time.Time
	to         tiers.State
	result     []byte
	lease      *time.Time // the new lease end; nil keeps it
	token      int64
	from       []tiers.State // tiers.AllowedFrom(to)
	secretHash []byte
	// effectRecovered and actor go to the audit row only
	// (tiers.TransitionParams).
	effectRecovered bool
	actor           tiers.Actor
}

// statementArgs are q.sql's arguments. A transition's are made the first
// time they are needed: in a batch of transitions only, the common case,
// transition_batch.sql takes its columns instead and they never are.
func (q *queuedWrite) statementArgs() []any {
	if q.args == nil && q.transition != nil {
		q.args = q.transition.args(false)
	}
	return q.args
}

// args are transition.sql's arguments; entityLocked says the caller holds
// the lock of the record's entity.
func (r *transitionRow) args(entityLocked bool) []any {
	from := make([]int16, len(r.from))
	for i, f := range r.from {
		from[i] = int16(f)
	}
	return []any{r.key.Namespace, r.key.Provider, r.key.Key, r.now, int16(r.to),
		r.to.Terminal(), r.result, r.lease, r.token, from, r.secretHash, entityLocked, r.effectRecovered,
		r.actor.Principal, r.actor.Transport}
}

// fromMask is r.from as transition_batch.sql's bit mask.
func (r *transitionRow) fromMask() int32 {
	var m int32
	for _, f := range r.from {
		m |= 1 << f
	}
	return m
}

// transitionBatchPlan is sent before transition_batch.sql, in its
// transaction: the plans PostgreSQL makes for it (and caches, per
// connection) then join the batch's rows to claims row by row through its
// primary key, whatever its statistics say. claimd's sessions already have
// sequential scans off (poolConfig); without these settings too, the
// generic plan cached on a table analyzed at a few hundred rows is a merge
// join over all of claims, read in key order, for every batch long after
// the table has filled (TestTransitionBatchPlan). Before the session
// setting, a hash join over a scan of the table took a lifecycle run on a
// new database from about 1 900 to 550 events/s with PostgreSQL's CPU
// tripled. The settings end with the transaction.
const transitionBatchPlan = `SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`

// writeAnswer is what the batch did with one statement. A caller gets it
// by pointer, into the batch's answers: a record is too large to copy into
// every caller's channel.
type writeAnswer struct {
	rec   tiers.Record
	ok    bool // the UPDATE matched: rec is the record it wrote
	alone bool // its transaction failed: the caller runs it itself
}

// runAlone is the answer that hands a statement back to its caller. It is
// shared: callers only read answers.
var runAlone = &writeAnswer{alone: true}

// newWriteBatcher returns a batcher; start starts its flusher. Statements
// enqueued before wait for it. A caller that leaves once its write was
// taken into a batch waits for the batch's answer (tiers.AwaitAnswer): the
// statement may commit all the same, and only its answer can then bring the
// fast tier up to date (tiers/twotier repairs from what a write returns).
// Returning at once left a committed Release unrepaired, the fast tier
// answering IN_PROGRESS by the released holder for the rest of its lease
// (make chaos, lost-replies).
func newWriteBatcher(s *Store, maxBatch int) *writeBatcher {
	return &writeBatcher{s: s, max: maxBatch, queue: tiers.NewQueue[queuedWrite, *writeAnswer](batchQueueFactor*maxBatch, tiers.AwaitAnswer)}
}

func (w *writeBatcher) start() { w.queue.Start(1, w.max, w.flush) }

// flush runs batch's statements in one pipeline and answers each caller.
// A caller that already left is not in it (tiers.Queue): it reports its
// context's error, so the write must not happen behind its back.
func (w *writeBatcher) flush(batch []*writeCall) {
	ctx, cancel := tiers.BatchContext(batch, batchTimeout)
	defer cancel()
	if len(batch) == 1 {
		// Alone: the flusher runs it itself, so that the statements
		// arriving meanwhile wait and form the next batch.
		q := &batch[0].Item
		rec, ok, err := updateRowOn(ctx, w.s.pool, q.key, q.sql, q.statementArgs()...) // ctx outlives the caller already
		batch[0].Answer(&writeAnswer{rec: rec, ok: ok}, err)
		return
	}
	// One lock order for every batch: rows are locked in key order.
	slices.SortStableFunc(batch, func(a, b *writeCall) int { return keyOrder(a.Item.key, b.Item.key) })
	w.batches.Add(1)
	var answers []writeAnswer
	var failed bool
	if transitionsOnly(batch) {
		w.transitionBatches.Add(1)
		answers, failed = w.s.transitionBatch(ctx, batch)
	} else {
		answers, failed = w.s.pipeline(ctx, batch)
	}
	for i, c := range batch {
		if failed {
			c.Answer(runAlone, nil)
			continue
		}
		c.Answer(&answers[i], nil)
	}
}

// pipeline runs each statement of batch, in one pipeline and one
// transaction. failed means the transaction did not commit (as far as
// anyone knows).
func (s *Store) pipeline(ctx context.Context, batch []*writeCall) (answers []writeAnswer, failed bool) {
	var b pgx.Batch
	for _, c := range batch {
		b.Queue(c.Item.sql, c.Item.statementArgs()...)
	}
	answers = make([]writeAnswer, len(batch))
	br := s.pool.SendBatch(ctx, &b)
	for i, c := range batch {
		rec, err := scanRecord(br.QueryRow(), c.Item.key)
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
	return answers, failed
}

// transitionsOnly reports whether batch is Transitions of distinct keys
// only (sorted by key, so a repeated key is next to itself): one
// transition_batch.sql can run it. Two transitions of one key must run one
// after the other, as their callers sent them.
func transitionsOnly(batch []*writeCall) bool {
	for i, c := range batch {
		if c.Item.transition == nil || (i > 0 && batch[i-1].Item.key == c.Item.key) {
			return false
		}
	}
	return true
}

// transitionBatch runs batch, Transitions of distinct keys sorted by key,
// as one transition_batch.sql.
func (s *Store) transitionBatch(ctx context.Context, batch []*writeCall) (answers []writeAnswer, failed bool) {
	n := len(batch)
	var (
		namespaces, providers, keys = make([]string, n), make([]string, n), make([]string, n)
		nows                        = make([]time.Time, n)
		tos                         = make([]int16, n)
		terminal                    = make([]bool, n)
		results, secretHashes       = make([][]byte, n), make([][]byte, n)
		leases                      = make([]*time.Time, n)
		tokens                      = make([]int64, n)
		froms                       = make([]int32, n)
		recovered                   = make([]bool, n)
		principals, transports      = make([]string, n), make([]string, n)
	)
	for i, c := range batch {
		r := c.Item.transition
		namespaces[i], providers[i], keys[i] = r.key.Namespace, r.key.Provider, r.key.Key
		nows[i], tos[i], terminal[i], results[i], leases[i] = r.now, int16(r.to), r.to.Terminal(), r.result, r.lease
		tokens[i], froms[i], secretHashes[i], recovered[i] = r.token, r.fromMask(), r.secretHash, r.effectRecovered
		principals[i], transports[i] = r.actor.Principal, r.actor.Transport
	}
	var b pgx.Batch
	b.Queue(transitionBatchPlan)
	b.Queue(transitionBatchSQL, namespaces, providers, keys, nows, tos, terminal, results, leases, tokens, froms, secretHashes, recovered, principals, transports)
	br := s.pool.SendBatch(ctx, &b)
	answers = make([]writeAnswer, n) // a row not answered matched nothing
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, true
	}
	rows, err := br.Query()
	if err == nil {
		for rows.Next() {
			var ord int64
			rec, err := scanRecord(rows, tiers.Key{}, &ord)
			if err != nil || ord < 1 || ord > int64(n) {
				failed = true
				break
			}
			rec.Key = batch[ord-1].Item.key
			answers[ord-1] = writeAnswer{rec: rec, ok: true}
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		failed = true
	}
	if err := br.Close(); err != nil {
		failed = true
	}
	return answers, failed
}

// updateRow runs a fenced UPDATE … RETURNING statement: ok is false when it
// matched no row. With batching on it joins the next group commit.
func (s *Store) updateRow(ctx context.Context, k tiers.Key, sql string, args ...any) (tiers.Record, bool, error) {
	return s.enqueueWrite(ctx, queuedWrite{key: k, sql: sql, args: args})
}

// updateTransition is updateRow of transition.sql for r, without the
// entity's lock; in a batch of such transitions only, it is one row of
// transition_batch.sql.
func (s *Store) updateTransition(ctx context.Context, r transitionRow) (tiers.Record, bool, error) {
	return s.enqueueWrite(ctx, queuedWrite{key: r.key, sql: transitionSQL, transition: &r})
}

// enqueueWrite queues q for the next group commit, or runs it alone when
// batching is off, the queue is full, or its batch's transaction failed.
func (s *Store) enqueueWrite(ctx context.Context, q queuedWrite) (tiers.Record, bool, error) {
	if s.writes == nil {
		return s.updateRowNow(ctx, q.key, q.sql, q.statementArgs()...)
	}
	a, err := s.writes.queue.TrySubmit(ctx, q)
	switch {
	case errors.Is(err, tiers.ErrNotQueued):
		return s.updateRowNow(ctx, q.key, q.sql, q.statementArgs()...)
	case err != nil && a == nil:
		return tiers.Record{}, false, err // the caller left before its write was sent
	case a.alone:
		// updateRowNow answers a caller that left meanwhile with its
		// context's error, and sends nothing.
		return s.updateRowNow(ctx, q.key, q.sql, q.statementArgs()...)
	}
	return a.rec, a.ok, err
}

// updateRowNow runs the statement on its own. Once sent, it runs to its
// end even if the caller leaves meanwhile (sending), for the same reason
// enqueueWrite waits for its batch.
func (s *Store) updateRowNow(ctx context.Context, k tiers.Key, sql string, args ...any) (tiers.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return tiers.Record{}, false, err
	}
	ctx, cancel := sending(ctx)
	defer cancel()
	return updateRowOn(ctx, s.pool, k, sql, args...)
}

// sending is the context of a write its caller is sending: ctx's values
// and deadline without its cancellation. A write cancelled while it runs
// may have committed all the same, with no answer to say so; the fast tier
// in front (tiers/twotier) learns of a write only from its answer, so a
// write, once sent, finishes and answers, as the batch statements do.
func sending(ctx context.Context) (context.Context, context.CancelFunc) {
	detached := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(detached, d)
	}
	return context.WithTimeout(detached, batchTimeout)
}
