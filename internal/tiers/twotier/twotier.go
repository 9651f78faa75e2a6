// Package twotier composes a Fast tier in front of a Durable tier into one
// tiers.Store, exactly as DESIGN §3 describes: a process-local cache of
// terminal records, then one atomic fast-tier step, then the durable tier as
// the source of truth. It knows the tier interfaces, never a backend.
package twotier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
)

// Observer is told what the composition saw; metrics implement it.
type Observer interface {
	// FastFalseNegative: the fast tier had no record but the durable tier
	// did (a flush, an eviction, a failover) and decided from it.
	FastFalseNegative()
	// TierError: a tier failed an operation (the composition degraded or
	// failed closed).
	TierError(tier tiers.Tier, op string, err error)
	// FastRepairsPending: n durable writes have not reached the fast tier
	// yet and wait for a retry (see Config.RepairRetryMin).
	FastRepairsPending(n int)
	// FastRepairDropped: a durable write that had not reached the fast tier
	// was given up (the backlog was full, or the store closed).
	FastRepairDropped()
	// FastIntegrityFailure: the fast tier held a record that failed its
	// integrity check (tiers.FastResult.Unverified); it was treated as
	// absent, the durable tier decided, and its answer replaced it.
	FastIntegrityFailure()
}

type nopObserver struct{}

func (nopObserver) FastFalseNegative()                  {}
func (nopObserver) TierError(tiers.Tier, string, error) {}
func (nopObserver) FastRepairsPending(int)              {}
func (nopObserver) FastRepairDropped()                  {}
func (nopObserver) FastIntegrityFailure()               {}

// Config tunes the composition. Zero values mean the defaults.
type Config struct {
	// PendingTTL is the lifetime of the pending marker of a claim that
	// names no lease. A claim's marker otherwise lives as long as the lease
	// it asks for: an ACQUIRED/NEW leaves it standing in place of the new
	// record (see Store.Claim), and a claim whose process dies between the
	// fast and the durable step is then treated like one whose holder died
	// after committing. A marker never answers a claim: one that meets it
	// asks the durable tier. Default 5s.
	PendingTTL time.Duration
	// LocalEntries bounds the process-local cache of terminal records.
	// Default 10000; negative disables the cache.
	LocalEntries int
	// LocalBytes bounds the results held by the local cache. Default 64 MiB.
	LocalBytes int64
	// CleanupTimeout bounds each fast-tier step that follows a durable one:
	// the repair of the fast tier after a durable write, and the rollback
	// of a pending marker after a failed durable step. Both run on a
	// context of their own, even when the caller's is done. Default 1s.
	CleanupTimeout time.Duration
	// RepairRetryMin and RepairRetryMax pace the retries of repairs that
	// failed: the first after RepairRetryMin, each next one twice as long
	// after a failed round, up to RepairRetryMax. Defaults 100ms and 2s
	// (go-redis dials again once a second after its dials failed).
	RepairRetryMin, RepairRetryMax time.Duration
	// BacklogEntries and BacklogBytes bound the repairs waiting for a retry
	// (one record per key, results included); beyond them the oldest are
	// dropped. Defaults 10000 and 16 MiB.
	BacklogEntries int
	BacklogBytes   int64
	// Clock paces the retries; nil means the wall clock.
	Clock clock.Waiter
	// Observer receives events; nil means none.
	Observer Observer
}

func (c Config) withDefaults() Config {
	if c.PendingTTL <= 0 {
		c.PendingTTL = 5 * time.Second
	}
	if c.LocalEntries == 0 {
		c.LocalEntries = 10000
	}
	if c.LocalBytes <= 0 {
		c.LocalBytes = 64 << 20
	}
	if c.CleanupTimeout <= 0 {
		c.CleanupTimeout = time.Second
	}
	if c.RepairRetryMin <= 0 {
		c.RepairRetryMin = 100 * time.Millisecond
	}
	if c.RepairRetryMax < c.RepairRetryMin {
		c.RepairRetryMax = max(2*time.Second, c.RepairRetryMin)
	}
	if c.BacklogEntries <= 0 {
		c.BacklogEntries = 10000
	}
	if c.BacklogBytes <= 0 {
		c.BacklogBytes = 16 << 20
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return c
}

// Store is a Fast tier in front of a Durable one.
type Store struct {
	fast    tiers.Fast
	durable tiers.Durable
	local   *localCache // nil when disabled
	backlog *backlog
	cfg     Config

	noncePrefix string
	nonceSeq    atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

var _ tiers.Store = (*Store)(nil)

// New composes fast in front of durable. The Store owns both: Close closes
// them. It runs one goroutine, which retries failed repairs, until Close.
func New(fast tiers.Fast, durable tiers.Durable, cfg Config) *Store {
	cfg = cfg.withDefaults()
	s := &Store{fast: fast, durable: durable, cfg: cfg, noncePrefix: randomPrefix(), backlog: newBacklog(fast, cfg)}
	if cfg.LocalEntries > 0 {
		s.local = newLocalCache(cfg.LocalEntries, cfg.LocalBytes)
	}
	return s
}

func randomPrefix() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b) + "-"
}

// nonce identifies one claim call's pending marker: unique across replicas
// (random prefix) and within this one (sequence).
func (s *Store) nonce() string {
	return s.noncePrefix + strconv.FormatUint(s.nonceSeq.Add(1), 36)
}

// AnswerLocally implements tiers.LocalAnswerer: a claim of a terminal record
// in the local cache, within its window, is answered what Decide answers
// from it when that writes nothing (DUPLICATE, or PAYLOAD_MISMATCH).
func (s *Store) AnswerLocally(p tiers.ClaimParams) (tiers.ClaimResult, bool) {
	if s.local == nil {
		return tiers.ClaimResult{}, false
	}
	rec, ok := s.local.get(p.Key, p.Now)
	if !ok {
		return tiers.ClaimResult{}, false
	}
	res, _, write := tiers.Decide(&rec, p)
	if write || (res.Outcome != tiers.OutcomeDuplicate && res.Outcome != tiers.OutcomePayloadMismatch) {
		return tiers.ClaimResult{}, false
	}
	res.ServedBy = tiers.TierLocal
	return res, true
}

// Claim follows DESIGN §3.
func (s *Store) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	// 1. A terminal record within its window never changes: answer locally
	// what Decide answers from it (DUPLICATE, or PAYLOAD_MISMATCH), which
	// never writes. Should Decide want to write after all, only the tiers
	// may: go on to them.
	if res, ok := s.AnswerLocally(p); ok {
		return res, nil
	}

	// 2. One atomic fast-tier step.
	nonce := s.nonce()
	markerTTL := p.Lease
	if markerTTL <= 0 {
		markerTTL = s.cfg.PendingTTL
	}
	fr, err := s.fast.Reserve(ctx, tiers.ReserveParams{
		Key: p.Key, Now: p.Now, Nonce: nonce, PendingTTL: markerTTL,
		PayloadHash: p.PayloadHash, AttemptID: p.AttemptID,
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return tiers.ClaimResult{}, ctxErr
		}
		// 5. Fast tier unreachable: degraded, still correct.
		s.cfg.Observer.TierError(tiers.TierFast, "reserve", err)
		return s.claimDurable(ctx, p, false, "")
	}
	if fr.Unverified {
		s.cfg.Observer.FastIntegrityFailure()
	}
	switch fr.Verdict {
	case tiers.FastDecided:
		if p.Entity != nil && fr.Outcome == tiers.OutcomeAcquired {
			// The same attempt again, answered from a copy: it holds
			// the entity already, but only the durable tier says where
			// the entity stands, and only it may admit a lifecycle
			// event. DUPLICATE and IN_PROGRESS admit nothing and stand.
			return s.claimDurable(ctx, p, true, "")
		}
		if fr.ResultInDurable {
			return s.withDurableResult(ctx, p)
		}
		res := tiers.ClaimResult{Outcome: fr.Outcome, Reason: fr.Reason, Record: fr.Record, ServedBy: tiers.TierFast}
		if !fr.Record.State.Terminal() {
			return s.confirm(ctx, p, res)
		}
		s.remember(fr.Record)
		return res, nil
	case tiers.FastTakeover:
		if fr.Unverified {
			return s.replaceUnverified(ctx, p)
		}
		return s.claimDurable(ctx, p, true, "")
	case tiers.FastAskDurable:
		return s.claimDurable(ctx, p, true, fr.Marker)
	}

	// 3. Reserved: the durable tier decides; 4. if it cannot, roll back our
	// own marker: it would stand for a claim that was not made.
	res, err := s.durable.Claim(ctx, p)
	if err != nil {
		s.abort(ctx, p.Key, nonce)
		return res, err
	}
	if durableHadRecord(res) {
		s.cfg.Observer.FastFalseNegative()
	}
	switch {
	case createdWithMarker(res, p.Now.Add(markerTTL)):
		// Our marker stays, for the new record's lease: until the
		// owner's next write puts the record over it, it sends the
		// key's claims (the owner's retry among them) to the durable
		// tier, the first of which fills the record in its place; it
		// lapses when the lease would have, so the next claim takes
		// over. Not copying the new record saves a fast-tier round trip
		// on every first delivery, the common case by far, and costs a
		// durable read only to a key claimed again while in progress.
	case cacheable(res):
		if err := s.repair(ctx, res.Record); err != nil {
			// The record did not replace our marker. Withdrawn, it
			// leaves the key to the next claim's own marker, which
			// the durable tier's answer then replaces.
			s.abort(ctx, p.Key, nonce)
		}
	case fillable(res):
		// Only read: copied where our marker still stands (Fill), so the
		// next claims are answered here instead of each asking the
		// durable tier.
		s.fill(ctx, res.Record, nonce)
	default:
		// Withdraw our marker: the next claim asks the durable tier.
		s.abort(ctx, p.Key, nonce)
	}
	if res.Outcome == tiers.OutcomeDuplicate {
		s.remember(res.Record)
	}
	return res, nil
}

// cacheable reports whether a durable claim answer may be copied into the
// fast tier. An acquisition is this call's own write, the newest version
// until its owner moves on (and the owner's later writes repair after it);
// a terminal record never changes within its window. Anything else
// (IN_PROGRESS, or PAYLOAD_MISMATCH on a live record) was only read: by
// the time its copy lands, the owner may have settled and its repair been
// erased by a flush or a failover, and the stale copy would then answer
// IN_PROGRESS for an event other callers were told is DUPLICATE, until the
// lease ends (found by make chaos under FLUSHALL). Such answers are copied
// only in place of the pending marker seen before the read (fillable,
// tiers.Fast.Fill), which rules that out.
//
// DEFERRED and SUPERSEDED are never cached either: they acquired nothing,
// and the record they carry (if the key had one) was only read. A copy of
// them could only answer the next delivery of the event from a fast tier
// that cannot know whether its entity has moved since, which is the durable
// tier's decision alone (tiers.EntityEvent).
func cacheable(res tiers.ClaimResult) bool {
	switch res.Outcome {
	case tiers.OutcomeDeferred, tiers.OutcomeSuperseded:
		return false
	}
	return res.Outcome == tiers.OutcomeAcquired || res.Record.State.Terminal()
}

// createdWithMarker reports whether res is the record a claim created
// (ACQUIRED/NEW) with a lease that ends when its pending marker lapses, at
// until (to the microsecond a durable tier keeps): the marker then stands
// for the record. A retry of an earlier claim's attempt is answered
// ACQUIRED/NEW too, with the earlier lease.
func createdWithMarker(res tiers.ClaimResult, until time.Time) bool {
	early := until.Sub(res.Record.LeaseExpiresAt)
	return res.Outcome == tiers.OutcomeAcquired && res.Reason == tiers.ReasonNew && early >= 0 && early < time.Microsecond
}

// fillable reports whether a durable claim answer that is not cacheable
// may still be copied into the fast tier in place of the pending marker
// seen before it was read (tiers.Fast.Fill): an IN_PROGRESS or a
// PAYLOAD_MISMATCH of a stored record. DEFERRED and SUPERSEDED never are
// (see cacheable).
func fillable(res tiers.ClaimResult) bool {
	switch res.Outcome {
	case tiers.OutcomeInProgress, tiers.OutcomePayloadMismatch:
		return res.Record.Version != 0
	}
	return false
}

// durableHadRecord reports whether the durable tier decided res from a
// record the fast tier should have held: a false negative of the fast tier
// (a flush, an eviction, a failover). The fast tier holds every record from
// its second version on, since each write after a first claim puts it
// there; a first claim's record (version 1) it holds only as the claim's
// pending marker, which lapses with the lease and which a claim racing
// this one may have beaten to the durable tier, neither of them a loss. A
// takeover decided from the record before it, one version older. A
// DEFERRED or SUPERSEDED claim of a key without a record carries a record
// with only its key.
func durableHadRecord(res tiers.ClaimResult) bool {
	from := res.Record.Version
	if res.Outcome == tiers.OutcomeAcquired {
		if res.Reason == tiers.ReasonNew {
			return false
		}
		from--
	}
	return from > 1
}

// claimDurable asks the durable tier and, when the fast tier answers,
// caches the decision there; what was only read is copied in place of the
// pending marker the fast tier answered with (marker, when it named one).
func (s *Store) claimDurable(ctx context.Context, p tiers.ClaimParams, fastUp bool, marker string) (tiers.ClaimResult, error) {
	res, err := s.durable.Claim(ctx, p)
	if err != nil {
		return res, err
	}
	switch {
	case !fastUp:
	case cacheable(res):
		s.repair(ctx, res.Record)
	case marker != "" && fillable(res):
		s.fill(ctx, res.Record, marker)
	}
	if res.Outcome == tiers.OutcomeDuplicate {
		s.remember(res.Record)
	}
	return res, nil
}

// replaceUnverified answers a claim whose key held a record that failed its
// integrity check (the fast tier withdrew it) from the durable tier, and
// puts the durable tier's record in its place: an acquisition or a
// terminal record as claimDurable always does, and here a record only read
// (IN_PROGRESS, PAYLOAD_MISMATCH) too, so the key is answered from a sealed
// copy again at once. A read copy is safe to put: if it lands after a newer
// record was put and erased, the copy is older than the row, and every
// answer from a copy in progress is confirmed against the row (confirm).
func (s *Store) replaceUnverified(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	res, err := s.claimDurable(ctx, p, true, "")
	if err == nil && fillable(res) {
		s.repair(ctx, res.Record)
	}
	return res, err
}

// confirm answers a claim that the fast tier decided from a record that is
// not terminal (fast: IN_PROGRESS, the same ACQUIRED for a repeated
// attempt_id, or PAYLOAD_MISMATCH of a record in progress) from the durable
// tier's record, read without a write. Only a terminal record never changes
// within its window; a copy of any other may be older than the row, and
// answering from it tells the caller a state older than one the durable
// tier already answered:
//   - a write that committed but failed (its caller's deadline passed after
//     the commit) refreshed no copy: under 0.2–5ms deadlines make chaos saw
//     IN_PROGRESS with state RECEIVED after others were told PROCESSING;
//   - a replica that committed while it could not reach Redis and another
//     replica could (its repair waits in its backlog) left every claim
//     there IN_PROGRESS for an event settled or released (make chaos,
//     redis-kill).
//
// So the durable record decides: the same version confirms the copy (served
// FAST); a newer one answers as the durable tier would, with its state,
// token and holder, and repairs the copy from it (Put never replaces a newer
// version); one that may change hands (released, lease over, window over)
// goes on to the durable claim. A durable tier that cannot be read fails
// the claim, as it fails every claim it cannot decide: a copy that cannot
// be confirmed may be older than the row, and is not answered.
//
// Putting a record that was only read is safe here, unlike in claimDurable
// (see cacheable): should it land over a newer record that a flush then
// erased, the copy is older than the row, and this confirmation, which every
// answer from a copy in progress gets, catches it.
func (s *Store) confirm(ctx context.Context, p tiers.ClaimParams, fast tiers.ClaimResult) (tiers.ClaimResult, error) {
	cur, found, err := s.readDurable(ctx, p, "confirm")
	switch {
	case err != nil:
		return tiers.ClaimResult{}, err
	case !found:
		return s.claimDurable(ctx, p, true, "")
	case fast.Record.NotOlderThan(&cur):
		return fast, nil
	}
	res, _, write := tiers.Decide(&cur, p)
	if write || res.Outcome == tiers.OutcomeAcquired {
		return s.claimDurable(ctx, p, true, "")
	}
	res.ServedBy = tiers.TierDurable
	s.repair(ctx, res.Record)
	s.remember(res.Record)
	return res, nil
}

// withDurableResult answers a claim that the fast tier decided from a
// terminal record whose result it does not keep (tiers.FastResult.
// ResultInDurable: a result too long to be worth Redis's memory for a whole
// window): from the durable tier's record, read without a write, which
// holds the result. Within its window a terminal record never changes, so
// the durable record is the one the fast tier copied and decides the same
// (DUPLICATE or PAYLOAD_MISMATCH), now with its result; should it decide
// otherwise (no record there: restored from an older backup, say), the
// durable tier decides anew. A durable tier that cannot be read fails the
// claim (UNAVAILABLE, as confirm does): a DUPLICATE without the result the
// handler stored would be a wrong answer, not a degraded one.
func (s *Store) withDurableResult(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	cur, found, err := s.readDurable(ctx, p, "result")
	switch {
	case err != nil:
		return tiers.ClaimResult{}, err
	case !found:
		return s.claimDurable(ctx, p, true, "")
	}
	res, _, write := tiers.Decide(&cur, p)
	if write || !cur.State.Terminal() {
		return s.claimDurable(ctx, p, true, "")
	}
	res.ServedBy = tiers.TierDurable
	s.remember(res.Record)
	return res, nil
}

// readDurable reads p's key from the durable tier, for a claim a fast-tier
// copy could not answer alone (confirm, withDurableResult). found is false
// when no durable record stands behind the copy (the durable tier was
// restored from an older backup, say): the caller then lets the source of
// truth decide anew. A read that fails is counted under op and fails the
// claim, as every claim the durable tier cannot decide fails.
func (s *Store) readDurable(ctx context.Context, p tiers.ClaimParams, op string) (cur tiers.Record, found bool, err error) {
	cur, err = s.durable.Get(ctx, p.Key)
	switch {
	case errors.Is(err, tiers.ErrNotFound):
		return cur, false, nil
	case err != nil:
		if ctxErr := ctx.Err(); ctxErr != nil {
			return cur, false, ctxErr
		}
		s.cfg.Observer.TierError(tiers.TierDurable, op, err)
		return cur, false, err
	}
	return cur, true, nil
}

// cleanup is the context of a fast-tier step that follows a durable one: it
// keeps ctx's values (the trace) but not its cancellation, and is bounded by
// CleanupTimeout. The durable write has happened whether or not the caller
// is still there to hear of it, so the fast tier must learn of it too.
func (s *Store) cleanup(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CleanupTimeout)
}

// repair copies a durable record into the fast tier, whether it is new or a
// repeat (Put is ordered by window and version, so an older copy never
// replaces a newer one). It must reach the fast tier even when the caller
// has gone: a fast tier left holding PROCESSING answers IN_PROGRESS for an
// event that others were told is DUPLICATE, until the lease ends. When it
// fails, the record waits in the backlog, which retries it until it lands
// (or its window ends); meanwhile the fast tier only ever answers
// IN_PROGRESS (retryable) or defers to the durable tier: it cannot invent a
// DUPLICATE, because it holds a terminal record only after the durable tier
// committed it.
func (s *Store) repair(ctx context.Context, rec tiers.Record) error {
	ctx, cancel := s.cleanup(ctx)
	defer cancel()
	err := s.fast.Put(ctx, rec)
	if err != nil {
		s.cfg.Observer.TierError(tiers.TierFast, "put", err)
		if retryable(err) {
			s.backlog.add(rec)
		}
	}
	return err
}

// fill copies a record the durable tier was only read for in place of the
// pending marker carrying nonce (tiers.Fast.Fill), on a context of its own
// like repair. A failed fill is not retried: the marker it would have
// replaced keeps sending the key's claims to the durable tier, the next of
// which fills it.
func (s *Store) fill(ctx context.Context, rec tiers.Record, nonce string) {
	ctx, cancel := s.cleanup(ctx)
	defer cancel()
	if err := s.fast.Fill(ctx, rec, nonce); err != nil {
		s.cfg.Observer.TierError(tiers.TierFast, "fill", err)
	}
}

// retryable reports whether a failed fast-tier write may succeed later: the
// tier was unavailable or too slow. Anything else is a record the tier
// refuses (a bug), which no retry will change.
func retryable(err error) bool {
	return errors.Is(err, tiers.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// abort deletes our pending marker after a failed durable step or a failed
// repair. It runs on a context of its own: the caller's may already be done.
// A marker left behind answers nothing (it sends every claim of the key to
// the durable tier until it lapses, a lease later), but it would stand for
// a claim that was not made.
//
// The durable step may have committed before failing (a timeout after the
// statement was sent). Then the row exists without a fast-tier copy: the
// retry reaches the durable tier, finds a live lease (IN_PROGRESS, retryable;
// the same ACQUIRED for the same attempt_id) and, once it ends, takes over
// (ACQUIRED/LEASE_EXPIRED). Never a DUPLICATE.
func (s *Store) abort(ctx context.Context, k tiers.Key, nonce string) {
	ctx, cancel := s.cleanup(ctx)
	defer cancel()
	if err := s.fast.Abort(ctx, k, nonce); err != nil {
		s.cfg.Observer.TierError(tiers.TierFast, "abort", err)
	}
}

func (s *Store) remember(rec tiers.Record) {
	if s.local != nil && rec.State.Terminal() {
		s.local.add(rec)
	}
}

// Transition commits to the durable tier, then refreshes the fast tier. A
// repeat (changed=false) refreshes it too: the handler repeats a call whose
// reply it lost, and the first call's refresh may have been lost with it.
func (s *Store) Transition(ctx context.Context, p tiers.TransitionParams) (tiers.Record, bool, error) {
	rec, changed, err := s.durable.Transition(ctx, p)
	if err != nil {
		s.refresh(ctx, p.Key, err)
		return rec, changed, err
	}
	s.repair(ctx, rec)
	s.remember(rec)
	return rec, changed, nil
}

// Renew commits to the durable tier, then refreshes the fast tier.
func (s *Store) Renew(ctx context.Context, p tiers.RenewParams) (tiers.Record, error) {
	rec, err := s.durable.Renew(ctx, p)
	if err != nil {
		s.refresh(ctx, p.Key, err)
		return rec, err
	}
	s.repair(ctx, rec)
	return rec, nil
}

// Release commits to the durable tier, then refreshes the fast tier so the
// next claim there is sent to the durable tier to take over (a repeated
// release refreshes it as well).
func (s *Store) Release(ctx context.Context, p tiers.ReleaseParams) (tiers.Record, error) {
	rec, err := s.durable.Release(ctx, p)
	if err != nil {
		s.refresh(ctx, p.Key, err)
		return rec, err
	}
	s.repair(ctx, rec)
	return rec, nil
}

// refresh copies k's durable record into the fast tier after a write that
// failed in a way that may have committed (the caller's deadline passed, or
// the durable tier stopped answering, after the statement was sent): the
// write's own repair never ran. It is best effort: the write may still
// commit after the read, and the read may fail; either way the copy is at
// worst older than the row, which every answer from a copy in progress is
// confirmed against (Store.confirm). A refusal (stale token, not the owner,
// a transition not allowed) wrote nothing and refreshes nothing.
func (s *Store) refresh(ctx context.Context, k tiers.Key, err error) {
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, tiers.ErrUnavailable) {
		return
	}
	ctx, cancel := s.cleanup(ctx)
	defer cancel()
	rec, err := s.durable.Get(ctx, k)
	if err != nil {
		return
	}
	s.repair(ctx, rec)
	s.remember(rec)
}

// Get reads the source of truth.
func (s *Store) Get(ctx context.Context, k tiers.Key) (tiers.Record, error) {
	return s.durable.Get(ctx, k)
}

// Prune deletes expired records from the durable tier (the fast tier expires
// its own at the window end).
func (s *Store) Prune(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	return s.durable.Prune(ctx, cutoff, limit)
}

var _ tiers.Entities = (*Store)(nil)

// errNoEntities answers the entity reads over a durable tier that keeps no
// entities.
var errNoEntities = errors.New("twotier: the durable tier keeps no entities")

// entities is the durable tier's tiers.Entities: entities live there only,
// never in the fast tier.
func (s *Store) entities() (tiers.Entities, error) {
	en, ok := s.durable.(tiers.Entities)
	if !ok {
		return nil, errNoEntities
	}
	return en, nil
}

// GetEntity reads the entity from the durable tier.
func (s *Store) GetEntity(ctx context.Context, k tiers.EntityKey) (tiers.Entity, error) {
	en, err := s.entities()
	if err != nil {
		return tiers.Entity{}, err
	}
	return en.GetEntity(ctx, k)
}

// ListDeferred lists the durable tier's deferred and superseded events.
func (s *Store) ListDeferred(ctx context.Context, p tiers.ListDeferredParams) ([]tiers.DeferredEvent, string, error) {
	en, err := s.entities()
	if err != nil {
		return nil, "", err
	}
	return en.ListDeferred(ctx, p)
}

// CountDeferred counts the durable tier's open and lost deferrals.
func (s *Store) CountDeferred(ctx context.Context, cutoffs map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error) {
	en, err := s.entities()
	if err != nil {
		return tiers.DeferredCounts{}, err
	}
	return en.CountDeferred(ctx, cutoffs)
}

// Ping reports the durable tier's health: without it nothing can be decided,
// without the fast tier everything still can.
func (s *Store) Ping(ctx context.Context) error { return s.durable.Ping(ctx) }

// Close stops the retries of failed repairs (after one last round), then
// closes both tiers. Later calls return what the first returned.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.backlog.close()
		s.closeErr = errors.Join(s.fast.Close(), s.durable.Close())
	})
	return s.closeErr
}
