package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// Group commit of claims.
//
// With synchronous commit a claim costs a WAL flush, and a flush per claim
// caps a server at a few thousand claims a second however many connections
// wait on it. The batcher therefore coalesces the claims that arrive while
// a statement is in flight into the next one: the flusher takes whatever is
// queued (up to MaxBatch) the moment it is free, runs claim_batch.sql once,
// and hands every caller its own answer. No timer holds a claim back: a
// lone claim goes out at once, and batches grow only with the load, which
// is the natural group commit of a database log.
//
// The batch decides absent keys only (one INSERT … ON CONFLICT DO NOTHING
// for all of them, with their audit rows). The keys it did not insert are
// read back by one more statement (claim_batch_seen.sql) and answered from
// their rows, as claim.sql's second half would; any other claim (a
// takeover, a row gone meanwhile, a second claim of a key already in the
// batch) continues with claim.sql in its own round, so every decision stays
// the one tiers.Decide makes. A claim alone in its batch runs claim.sql
// instead (on the flusher, so that the batches still form behind it): on a
// quiet server a batch of one would only add the lookup statement for a
// stored key.

var (
	claimBatchSQL     = loadQuery("claim_batch")
	claimBatchSeenSQL = loadQuery("claim_batch_seen")
)

// Defaults of the batcher.
const (
	defaultMaxBatch      = 64
	defaultBatchFlushers = 1
	// batchQueueFactor sizes the queue as a multiple of MaxBatch per
	// flusher; a claim that finds it full runs claim.sql on its own.
	batchQueueFactor = 4
	// batchTimeout bounds a statement when no caller in the batch has a
	// deadline.
	batchTimeout = 30 * time.Second
)

// batcher coalesces concurrent claims into one statement per round trip.
type batcher struct {
	s     *Store
	max   int
	queue *tiers.Queue[tiers.ClaimParams, batchAnswer]

	// Counters, for tests and metrics: claim_batch statements run, and
	// claims they decided (inserted, or answered from a stored row).
	statements, decided atomic.Int64
}

// queuedClaim is one caller's claim, as the flusher sees it.
type queuedClaim = tiers.Call[tiers.ClaimParams, batchAnswer]

// batchAnswer is what the batch decided for one claim. It is small (what
// the common answer, an insert, needs) because every caller waits for one:
// a record rides along by pointer only for the rarer answers. The
// statement's error (every caller of the batch gets it) is the call's.
type batchAnswer struct {
	inserted bool          // ACQUIRED/NEW: the record is insertedRecord's
	seen     *tiers.Record // the key was stored before the statement: its row

	// single is set for a claim that was alone in its batch: the flusher
	// ran claimRound for it, whose answer is single, done and the call's
	// error.
	single *tiers.ClaimResult
	done   bool
}

// newBatcher returns a batcher whose queue fits flushers; start starts them.
// A caller that leaves after its claim was taken returns at once: the claim
// may still be inserted, and like any claim that committed unheard it then
// holds the key under a lease, answered IN_PROGRESS, never DUPLICATE.
func newBatcher(s *Store, maxBatch, flushers int) *batcher {
	return &batcher{s: s, max: maxBatch, queue: tiers.NewQueue[tiers.ClaimParams, batchAnswer](batchQueueFactor*maxBatch*flushers, tiers.LeaveAtOnce)}
}

// start starts the flushers. Claims enqueued before wait for it.
func (b *batcher) start(flushers int) { b.queue.Start(flushers, b.max, b.flush) }

// keyOrder is the one order in which every batch, of claims or of writes,
// locks its keys: two batches that share keys (two replicas given one burst
// of retries) then never wait on each other in a cycle. Before the claim
// batch sorted its keys, PostgreSQL found such a deadlock now and then under
// make chaos's load (a claim batch inserting a before b, another b before
// a), waited deadlock_timeout (1 s) to see it, and failed one of the two
// statements whole: every claim in it answered UNAVAILABLE.
func keyOrder(a, b tiers.Key) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Key, b.Key))
}

// flush runs one statement for batch and answers every caller in it. A
// caller that already left is not in it (tiers.Queue): nobody would learn
// of the acquisition, and the key would answer IN_PROGRESS until the lease
// ran out.
func (b *batcher) flush(batch []*queuedClaim) {
	// The statement inserts its rows in the order of its arrays: keyOrder.
	// Stable, so that a key's first claim stays the one the statement makes.
	slices.SortStableFunc(batch, func(x, y *queuedClaim) int { return keyOrder(x.Item.Key, y.Item.Key) })
	args := newBatchArgs(len(batch))
	first := make(map[tiers.Key]*queuedClaim, len(batch))
	var later []*queuedClaim // second claims of a key in this batch
	for _, c := range batch {
		if _, dup := first[c.Item.Key]; dup {
			later = append(later, c)
			continue
		}
		first[c.Item.Key] = c
		args.add(c.Item)
	}
	// The callers' second claims of a key run claim.sql after this
	// statement has committed the first, so they see its row.
	defer func() {
		for _, c := range later {
			c.Answer(batchAnswer{}, nil)
		}
	}()
	// The statement outlives any one caller: a caller that gives up must
	// not fail the claims of the others. It is bounded by the latest
	// deadline among them.
	ctx, cancel := tiers.BatchContext(batch, batchTimeout)
	defer cancel()
	if len(first) == 1 && len(later) == 0 {
		// A claim alone gains nothing from a batch, and claim.sql decides
		// a stored key in the same statement where the batch would need a
		// lookup after its insert. The flusher runs it itself, so that the
		// claims arriving meanwhile wait and form the next batch, as they
		// would behind a batch statement.
		c := batch[0]
		res, done, err := b.s.claimRound(ctx, c.Item)
		c.Answer(batchAnswer{single: &res, done: done}, err)
		return
	}
	b.statements.Add(1)
	answers, err := b.s.claimBatch(ctx, args)
	if err == nil {
		b.decided.Add(int64(len(answers)))
	}
	for k, c := range first {
		c.Answer(answers[k], err) // the zero answer: not decided here
	}
}

// batchArgs are the columns of claim_batch.sql's arrays.
type batchArgs struct {
	namespaces, providers, keys, holders, attemptIDs []string
	principals, transports                           []string // tiers.Actor, for the audit rows
	nows, leases, windows                            []time.Time
	payloads, salts, secretHashes                    [][]byte
	starts                                           []bool
}

// newBatchArgs returns columns with room for n claims, so that adding them
// allocates each column once.
func newBatchArgs(n int) *batchArgs {
	return &batchArgs{
		namespaces: make([]string, 0, n), providers: make([]string, 0, n), keys: make([]string, 0, n),
		holders: make([]string, 0, n), attemptIDs: make([]string, 0, n),
		principals: make([]string, 0, n), transports: make([]string, 0, n),
		nows: make([]time.Time, 0, n), leases: make([]time.Time, 0, n), windows: make([]time.Time, 0, n),
		payloads: make([][]byte, 0, n), salts: make([][]byte, 0, n), secretHashes: make([][]byte, 0, n),
		starts: make([]bool, 0, n),
	}
}

func (a *batchArgs) add(p tiers.ClaimParams) {
	a.namespaces = append(a.namespaces, p.Key.Namespace)
	a.providers = append(a.providers, p.Key.Provider)
	a.keys = append(a.keys, p.Key.Key)
	a.nows = append(a.nows, p.Now)
	a.leases = append(a.leases, p.Now.Add(p.Lease))
	a.windows = append(a.windows, p.Now.Add(p.TTL))
	a.payloads = append(a.payloads, p.PayloadHash)
	a.holders = append(a.holders, p.Holder)
	a.attemptIDs = append(a.attemptIDs, p.AttemptID)
	a.salts = append(a.salts, p.Salt)
	a.secretHashes = append(a.secretHashes, p.SecretHash)
	a.starts = append(a.starts, p.Start)
	a.principals = append(a.principals, p.Actor.Principal)
	a.transports = append(a.transports, p.Actor.Transport)
}

// claimBatch runs claim_batch.sql and, for the keys it did not insert,
// claim_batch_seen.sql, and returns the answer for each key it inserted or
// found stored. Its error is the insert's raw database error; a failed
// lookup only leaves the keys it was for undecided (their callers then run
// claim.sql, which reports the database's state itself).
func (s *Store) claimBatch(ctx context.Context, a *batchArgs) (map[tiers.Key]batchAnswer, error) {
	rows, err := s.pool.Query(ctx, claimBatchSQL,
		a.namespaces, a.providers, a.keys, a.nows, a.leases, a.windows, a.payloads, a.holders, a.attemptIDs,
		a.salts, a.secretHashes, a.starts, a.principals, a.transports)
	if err != nil {
		return nil, err
	}
	answers := make(map[tiers.Key]batchAnswer, len(a.keys))
	if err := scanInserted(rows, answers); err != nil {
		return nil, err
	}
	if len(answers) == len(a.keys) {
		return answers, nil
	}
	var seen batchArgs
	for i, k := range a.keys {
		key := tiers.Key{Namespace: a.namespaces[i], Provider: a.providers[i], Key: k}
		if _, ok := answers[key]; !ok {
			seen.namespaces = append(seen.namespaces, key.Namespace)
			seen.providers = append(seen.providers, key.Provider)
			seen.keys = append(seen.keys, key.Key)
		}
	}
	s.readSeen(ctx, &seen, answers) // an error leaves the rest undecided
	return answers, nil
}

// readSeen runs claim_batch_seen.sql for the keys of a and adds the rows it
// finds to answers (seen). Keys without a row are left out.
func (s *Store) readSeen(ctx context.Context, a *batchArgs, answers map[tiers.Key]batchAnswer) error {
	rows, err := s.pool.Query(ctx, claimBatchSeenSQL, pgx.QueryExecModeCacheDescribe, a.namespaces, a.providers, a.keys)
	if err != nil {
		return err
	}
	return scanSeen(rows, answers)
}

// scanInserted reads the keys claim_batch.sql inserted into answers, and
// closes rows. Their records are the claims' own tiers.NewRecord
// (claimBatched makes it).
func scanInserted(rows pgx.Rows, answers map[tiers.Key]batchAnswer) error {
	defer rows.Close()
	for rows.Next() {
		var k tiers.Key
		if err := rows.Scan(&k.Namespace, &k.Provider, &k.Key); err != nil {
			return err
		}
		answers[k] = batchAnswer{inserted: true}
	}
	return rows.Err()
}

// scanSeen reads rows of (namespace, provider, key, recordColumns), keys
// stored before the batch, into answers, and closes rows.
func scanSeen(rows pgx.Rows, answers map[tiers.Key]batchAnswer) error {
	defer rows.Close()
	for rows.Next() {
		var k tiers.Key
		rec, err := scanRecord(rows, tiers.Key{}, &k.Namespace, &k.Provider, &k.Key)
		if err != nil {
			return err
		}
		rec.Key = k
		answers[k] = batchAnswer{seen: &rec}
	}
	return rows.Err()
}

// insertedRecord is the record claim_batch.sql inserts for p: the one
// tiers.NewRecord makes, its times as PostgreSQL stores them (pgx sends a
// timestamptz truncated to the microsecond).
func insertedRecord(p tiers.ClaimParams) tiers.Record {
	rec := tiers.NewRecord(p)
	for _, t := range []*time.Time{&rec.FirstSeenAt, &rec.LeaseExpiresAt, &rec.WindowExpiresAt, &rec.UpdatedAt} {
		*t = t.Truncate(time.Microsecond)
	}
	return rec
}

// claimBatched is the first round of a Claim when batching is on: it joins
// the next group commit and answers from it. done is false when the batch
// did not decide p (queue full, a takeover, a row committed meanwhile, a
// second claim of one key): the caller then runs claimRound.
func (s *Store) claimBatched(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, bool, error) {
	a, err := s.batch.queue.TrySubmit(ctx, p)
	switch {
	case errors.Is(err, tiers.ErrNotQueued):
		return tiers.ClaimResult{}, false, nil
	case a.single != nil:
		return *a.single, a.done, err
	case err != nil:
		return tiers.ClaimResult{}, false, err
	case a.inserted:
		return tiers.ClaimResult{Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonNew, Record: insertedRecord(p)}, true, nil
	case a.seen != nil:
		rec := *a.seen
		rec.Key = p.Key
		return decideExisting(ctx, s.pool, p, rec)
	}
	return tiers.ClaimResult{}, false, nil
}
