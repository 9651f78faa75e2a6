package twotier

import (
	"context"
	"sync"

	"github.com/claimd/claimd/internal/tiers"
)

// backlog holds the repairs of the fast tier that failed, the newest record
// of each key, and retries them until they land or their window ends.
//
// A repair that fails leaves whatever the fast tier held before: after a
// Transition to SETTLED, the owner's PROCESSING copy, which every replica
// that reads the fast tier answers IN_PROGRESS from until the lease ends,
// after callers of a replica reading the durable tier were told DUPLICATE.
// That happens when one replica's Redis client fails while another's works:
// after Redis restarts, go-redis refuses to dial for up to a second once as
// many dials as its pool size have failed, and Redis may come back holding
// older copies (persistence, a failover). Put is ordered by window and
// version, so a late retry never replaces a newer write; dropping one only
// leaves the stale copy answering IN_PROGRESS, retryable, until its lease
// ends.
//
// One goroutine retries, oldest key first, after RepairRetryMin and then
// twice as long after each round that failed (up to RepairRetryMax); a round
// stops at the first failure, so a fast tier that is down sees one Put per
// round, not the whole backlog. Waits are on the injected clock. The
// Observer hears of the backlog under its lock, so the sizes it is told
// come in the order they happened.
type backlog struct {
	fast tiers.Fast
	cfg  Config // Clock paces the retries

	mu     sync.Mutex
	recs   map[tiers.Key]tiers.Record
	order  []tiers.Key // oldest first, each key once
	bytes  int64
	closed bool

	wake chan struct{} // a record arrived; capacity 1
	stop chan struct{}
	done chan struct{}
}

func newBacklog(fast tiers.Fast, cfg Config) *backlog {
	b := &backlog{
		fast: fast, cfg: cfg, recs: make(map[tiers.Key]tiers.Record),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go b.run()
	return b
}

// add keeps rec for a retry, unless the backlog holds the same or a newer
// version of its key. Over its bounds it drops the oldest keys.
func (b *backlog) add(rec tiers.Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		b.cfg.Observer.FastRepairDropped()
		return
	}
	if old, ok := b.recs[rec.Key]; ok {
		if old.NotOlderThan(&rec) {
			return
		}
		b.bytes -= recordBytes(old)
	} else {
		b.order = append(b.order, rec.Key)
	}
	b.recs[rec.Key] = rec
	b.bytes += recordBytes(rec)
	for len(b.order) > 1 && (len(b.order) > b.cfg.BacklogEntries || b.bytes > b.cfg.BacklogBytes) {
		b.removeLocked(b.order[0])
		b.cfg.Observer.FastRepairDropped()
	}
	b.cfg.Observer.FastRepairsPending(len(b.order))
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// removeLocked forgets k. b.mu is held.
func (b *backlog) removeLocked(k tiers.Key) {
	rec, ok := b.recs[k]
	if !ok {
		return
	}
	delete(b.recs, k)
	b.bytes -= recordBytes(rec)
	if b.order[0] == k { // the usual case: drain goes oldest first
		b.order[0] = tiers.Key{}
		b.order = b.order[1:]
		return
	}
	for i, o := range b.order {
		if o == k {
			b.order = append(b.order[:i], b.order[i+1:]...)
			break
		}
	}
}

// forget drops rec once it reached the fast tier (or needs to no more),
// unless a newer record of its key arrived meanwhile, which still has to.
func (b *backlog) forget(rec tiers.Record) {
	b.mu.Lock()
	if cur, ok := b.recs[rec.Key]; ok && rec.NotOlderThan(&cur) {
		b.removeLocked(rec.Key)
		b.cfg.Observer.FastRepairsPending(len(b.order))
	}
	b.mu.Unlock()
}

// run waits for a failed repair, then retries the backlog, backing off,
// until it is empty; until close.
func (b *backlog) run() {
	defer close(b.done)
	for {
		select {
		case <-b.wake:
		case <-b.stop:
			return
		}
		for delay := b.cfg.RepairRetryMin; ; delay = min(2*delay, b.cfg.RepairRetryMax) {
			select {
			case <-b.cfg.Clock.After(delay):
			case <-b.stop:
				return
			}
			if b.drain() {
				break
			}
		}
	}
}

// drain retries the backlog, oldest first, until it is empty (true) or a
// Put fails (false).
func (b *backlog) drain() bool {
	for {
		b.mu.Lock()
		if len(b.order) == 0 {
			b.mu.Unlock()
			return true
		}
		rec := b.recs[b.order[0]]
		b.mu.Unlock()

		if rec.WindowOver(b.cfg.Clock.Now()) {
			// The fast tier has expired its copy by now: nothing is left
			// to repair.
			b.forget(rec)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.CleanupTimeout)
		err := b.fast.Put(ctx, rec)
		cancel()
		if err != nil {
			b.cfg.Observer.TierError(tiers.TierFast, "put", err)
			if retryable(err) {
				return false
			}
			b.cfg.Observer.FastRepairDropped()
		}
		b.forget(rec)
	}
}

// close stops the retries after one last round, so a replica that shuts
// down with the fast tier back leaves nothing behind; what still fails is
// dropped, and counted, as is whatever arrives after it.
func (b *backlog) close() {
	close(b.stop)
	<-b.done
	b.drain()
	b.mu.Lock()
	defer b.mu.Unlock()
	for range b.order {
		b.cfg.Observer.FastRepairDropped()
	}
	if len(b.order) > 0 {
		b.cfg.Observer.FastRepairsPending(0)
	}
	b.recs, b.order, b.bytes, b.closed = nil, nil, 0, true
}
