// Package memory is the embedded fast tier of claimd: a tiers.Fast held in
// the process, with the semantics of the Redis fast tier (one entry per
// record, expiring at the record's window end, pending markers for claims in
// flight, versions that never go backwards).
//
// It is a cache, not a store: entries are lost on restart and may be evicted
// when the map is full, and the durable tier behind it stays the source of
// truth. Losing an entry costs one trip to the durable tier, never a wrong
// answer. No goroutine runs in the background: expired entries are dropped
// when they are next touched, and Sweep (called by the janitor) drops the
// rest.
package memory

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// Defaults of Config.
const (
	DefaultShards     = 64
	DefaultMaxEntries = 1 << 18
	DefaultMaxBytes   = 256 << 20
)

// entryOverhead approximates what an entry costs beyond its variable-length
// fields: the map slot, the record's fixed fields, the times and the string
// and slice headers. It keeps MaxBytes honest for records with tiny keys.
const entryOverhead = 320

// evictionSample is how many entries of a full shard are looked at to choose
// one to evict (the one expiring soonest). Like Redis's sampled eviction it
// costs O(1) per insert and approximates "evict what expires first".
const evictionSample = 5

// Config configures a Store; zero values mean the defaults.
type Config struct {
	// Shards is the number of independently locked parts of the map (at
	// most MaxEntries).
	Shards int
	// MaxEntries bounds the entries held (records and pending markers),
	// split exactly across the shards. Inserting into a full shard evicts
	// another entry of it: this is a cache, and a lost entry only sends the
	// next claim of its key to the durable tier.
	MaxEntries int
	// MaxBytes bounds the bytes the entries hold (keys, holders, attempt
	// fingerprints, hashes and results, plus a fixed overhead per entry),
	// split across the shards like MaxEntries. Results may be 64 KiB each,
	// so a bound by entries alone would let 2^18 large results hold 16 GiB.
	MaxBytes int64
}

// Store is the in-process fast tier. It is safe for concurrent use.
type Store struct {
	seed   maphash.Seed
	shards []shard
	closed atomic.Bool
}

var _ tiers.Fast = (*Store)(nil)

type shard struct {
	mu       sync.Mutex
	m        map[tiers.Key]entry
	max      int
	maxBytes int64
	bytes    int64 // the sum of size() over m
}

// entry is a cached record or a pending marker. The marker stands for a claim
// in flight: it has no record yet, only the nonce of the claim that wrote it
// and the instant it lapses (so a crashed claimant blocks others only until
// then).
type entry struct {
	rec     tiers.Record // unset for a marker
	pending bool
	nonce   string
	expires time.Time // the window end of a record, the lapse of a marker
}

// holdsAtLeast reports whether e holds rec or a newer record (see Put).
func (e *entry) holdsAtLeast(rec tiers.Record) bool {
	if e.pending {
		return false
	}
	return e.rec.NotOlderThan(&rec)
}

// size is what e counts against MaxBytes.
func (e *entry) size() int64 {
	r := &e.rec
	n := entryOverhead + len(r.Key.Namespace) + len(r.Key.Provider) + len(r.Key.Key) +
		len(r.Holder) + len(r.AttemptID) + len(r.PayloadHash) + len(r.Result) +
		len(r.Salt) + len(r.SecretHash) + len(e.nonce)
	return int64(n)
}

// expiredAt reports whether e no longer exists at now: an entry lives up to,
// not including, its expiry instant, like a record's window.
func (e *entry) expiredAt(now time.Time) bool { return !now.Before(e.expires) }

// New returns an empty Store.
func New(cfg Config) *Store {
	if cfg.Shards <= 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	// Split MaxEntries exactly: the shard capacities add up to it.
	n := min(cfg.Shards, cfg.MaxEntries)
	s := &Store{seed: maphash.MakeSeed(), shards: make([]shard, n)}
	for i := range s.shards {
		s.shards[i].max = cfg.MaxEntries / n
		if i < cfg.MaxEntries%n {
			s.shards[i].max++
		}
		s.shards[i].maxBytes = cfg.MaxBytes / int64(n)
		s.shards[i].m = make(map[tiers.Key]entry)
	}
	return s
}

func (s *Store) shard(k tiers.Key) *shard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(k.Namespace)
	h.WriteByte(0)
	h.WriteString(k.Provider)
	h.WriteByte(0)
	h.WriteString(k.Key)
	return &s.shards[h.Sum64()%uint64(len(s.shards))]
}

var errClosed = errors.New("memory: store is closed")

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return tiers.Unavailable("memory", errClosed)
	}
	return nil
}

// Reserve decides p from the cached entry with tiers.DecideFast and, when it
// says so, writes our pending marker {p.Nonce, p.Now + p.PendingTTL} in its
// place. A record whose window is over at p.Now is dropped on the way (its
// FastTakeover sends the claim to the durable tier): it will never answer
// again. This is also what the Redis tier answers when its own clock has not
// yet expired the key.
func (s *Store) Reserve(ctx context.Context, p tiers.ReserveParams) (tiers.FastResult, error) {
	if err := s.check(ctx); err != nil {
		return tiers.FastResult{}, err
	}
	sh := s.shard(p.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()

	var (
		rec    *tiers.Record
		marker *tiers.Pending
	)
	if e, ok := sh.m[p.Key]; ok {
		if e.pending {
			marker = &tiers.Pending{Nonce: e.nonce, Until: e.expires}
		} else {
			rec = &e.rec
		}
	}
	res, mark := tiers.DecideFast(rec, marker, p)
	switch {
	case mark:
		sh.insert(p.Key, entry{pending: true, nonce: p.Nonce, expires: p.Now.Add(p.PendingTTL)})
	case res.Verdict == tiers.FastDecided:
		res.Record = clone(res.Record)
	case rec != nil && rec.WindowOver(p.Now):
		sh.remove(p.Key)
	}
	return res, nil
}

// Put caches rec until rec.WindowExpiresAt unless the entry there holds rec
// or a newer record: records are ordered by window, then Version (a later
// window is newer whatever its version, since after a prune a key claimed
// anew starts again at version 1), and a pending marker is older than any
// record. This is the order put.lua keeps in the Redis tier.
func (s *Store) Put(ctx context.Context, rec tiers.Record) error {
	return s.write(ctx, rec, func(e entry, ok bool) bool { return !ok || !e.holdsAtLeast(rec) })
}

// Fill caches rec where the entry under rec.Key is the pending marker
// carrying nonce, and nowhere else (see tiers.Fast.Fill).
func (s *Store) Fill(ctx context.Context, rec tiers.Record, nonce string) error {
	return s.write(ctx, rec, func(e entry, ok bool) bool { return ok && e.pending && e.nonce == nonce })
}

// write caches rec until its window ends where replace, given the entry
// under rec.Key (ok false when there is none), says it may go.
func (s *Store) write(ctx context.Context, rec tiers.Record, replace func(e entry, ok bool) bool) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	sh := s.shard(rec.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()

	if e, ok := sh.m[rec.Key]; !replace(e, ok) {
		return nil
	}
	if !rec.WindowExpiresAt.After(rec.UpdatedAt) {
		// Over when it was written: nothing to cache, but what it
		// replaces is stale.
		sh.remove(rec.Key)
		return nil
	}
	sh.insert(rec.Key, entry{rec: clone(rec), expires: rec.WindowExpiresAt})
	return nil
}

// Abort deletes k's pending marker if it carries nonce.
func (s *Store) Abort(ctx context.Context, k tiers.Key, nonce string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[k]; ok && e.pending && e.nonce == nonce {
		sh.remove(k)
	}
	return nil
}

// insert stores e under k, first evicting other entries while the shard
// would hold more than its entries or bytes. An entry larger than the whole
// shard's budget is not cached at all (the durable tier still answers for
// it). Callers hold sh.mu.
func (sh *shard) insert(k tiers.Key, e entry) {
	sh.remove(k)
	size := e.size()
	if size > sh.maxBytes {
		return
	}
	for len(sh.m) > 0 && (len(sh.m) >= sh.max || sh.bytes+size > sh.maxBytes) {
		sh.evictOne()
	}
	sh.m[k] = e
	sh.bytes += size
}

// remove deletes k's entry, if any, and its bytes. Callers hold sh.mu.
func (sh *shard) remove(k tiers.Key) {
	if e, ok := sh.m[k]; ok {
		sh.bytes -= e.size()
		delete(sh.m, k)
	}
}

// evictOne deletes the entry expiring soonest among a few: expired entries
// go first, then pending markers and records near their window's end. Map
// iteration starts at a random position, so the sample differs each time.
func (sh *shard) evictOne() {
	var (
		victim tiers.Key
		soon   time.Time
		seen   int
	)
	for k, e := range sh.m {
		if seen == 0 || e.expires.Before(soon) {
			victim, soon = k, e.expires
		}
		if seen++; seen == evictionSample {
			break
		}
	}
	if seen > 0 {
		sh.remove(victim)
	}
}

// Sweep drops every entry expired at now and returns how many it dropped.
// It locks one shard at a time, so claims of other shards go on meanwhile.
func (s *Store) Sweep(now time.Time) int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expiredAt(now) {
				sh.remove(k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of entries held, expired ones not yet dropped
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Bytes returns the bytes the entries count against Config.MaxBytes.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Ping reports whether the store is open.
func (s *Store) Ping(ctx context.Context) error { return s.check(ctx) }

// Close drops every entry; later calls fail with tiers.ErrUnavailable.
func (s *Store) Close() error {
	s.closed.Store(true)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.bytes = 0
		sh.mu.Unlock()
	}
	return nil
}

// clone copies rec's byte slices so that neither the caller nor the cache
// can change the other's copy.
func clone(rec tiers.Record) tiers.Record {
	rec.Salt = cloneBytes(rec.Salt)
	rec.SecretHash = cloneBytes(rec.SecretHash)
	rec.PayloadHash = cloneBytes(rec.PayloadHash)
	rec.Result = cloneBytes(rec.Result)
	return rec
}

// cloneBytes copies b; an empty slice becomes nil, as the durable tiers read
// it back.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}
