package tiers

import (
	"context"
	"time"
)

// ClaimParams is one claim of a key at a point in time. The service has
// validated and bounded every field before a store sees it.
//
// AttemptID, Salt and SecretHash carry ownership, and a store treats them as
// opaque: it compares AttemptID for equality and copies all three into the
// record when the claim acquires it (new record or takeover), never
// otherwise. The service derives them (service/owner.go): AttemptID is a
// fingerprint of the caller's principal, holder and attempt_id ("" without
// an attempt_id), so a repeated attempt is recognised only from the same
// caller; SecretHash is the SHA-256 of the lease secret it will answer, and
// Salt what that secret is derived with.
type ClaimParams struct {
	Key         Key
	Now         time.Time     // the service clock's reading for this call
	Lease       time.Duration // lease granted on acquisition, > 0
	TTL         time.Duration // dedup window opened by a new acquisition, > 0
	PayloadHash []byte        // 32 bytes or nil
	Holder      string
	AttemptID   string
	Salt        []byte // SaltBytes, fresh for every call
	SecretHash  []byte // SecretHashBytes
	// Entity, when set, orders the claim within an entity lifecycle
	// (entity.go); only durable tiers decide it.
	Entity *EntityEvent
	// Start: an acquisition records the claim in PROCESSING instead of
	// RECEIVED (one RPC for a handler that starts its side effect at once).
	Start bool
	// Actor is who asked, for the audit row (see Actor).
	Actor Actor
}

// Actor is who asked for a write, as its audit row names it. It decides
// nothing: a durable tier copies it into the audit row of every claim it
// answers and of every transition, renew and release that changed a record
// (a repeat writes no row); a fast tier ignores it.
type Actor struct {
	// Principal is the authenticated caller's name (auth.Principal.Name),
	// "" for the anonymous caller of a server without authentication.
	Principal string
	// Transport is how the call arrived (auth.Transport: "grpc",
	// "http-rest", "connect", "grpc-web", or "http" for an HTTP call whose
	// protocol was not named), "" when no service call made the
	// write (a tool or a test calling the tier directly). Audit rows
	// written before the tier recorded actors read "" too.
	Transport string
}

// Sizes of the ownership fields of ClaimParams and Record.
const (
	SaltBytes       = 16
	SecretHashBytes = 32 // a SHA-256 digest
)

// ClaimResult is the decision on a claim. For ACQUIRED, Record is the record
// the caller now owns; for every other outcome it is the record that decided
// it (the holder's, the settled one). Record.Key is always set.
type ClaimResult struct {
	Outcome  Outcome
	Reason   Reason // set for ACQUIRED only
	Record   Record
	ServedBy Tier
	// Entity is set when the claim carried an Entity and the durable tier
	// ordered it: where the entity stood.
	Entity *EntityPosition
}

// TransitionParams moves a record to To, fenced by Token and SecretHash.
type TransitionParams struct {
	Key        Key
	Now        time.Time
	Token      uint64
	SecretHash []byte // SHA-256 of the lease secret presented
	To         State
	Result     []byte        // stored only with a terminal To
	Lease      time.Duration // when > 0 (non-terminal To only): lease = Now + Lease
	// EffectRecovered says the caller's result came from an effect fence
	// that an earlier holder committed in the handler's database before it
	// vanished (GUARD.md, Exactly-once effects); the service admits it with
	// To = SETTLED only. It decides nothing: a durable tier writes it to the
	// audit row of a transition that changed the record (a repeat writes no
	// row), and a fast tier ignores it.
	EffectRecovered bool
	// Actor is who asked, for the audit row (see Actor).
	Actor Actor
}

// RenewParams extends the lease of the holder of Token to Now + Lease.
type RenewParams struct {
	Key        Key
	Now        time.Time
	Token      uint64
	SecretHash []byte // SHA-256 of the lease secret presented
	Lease      time.Duration
	Actor      Actor // who asked, for the audit row (see Actor)
}

// ReleaseParams gives the key back on behalf of the holder of Token.
type ReleaseParams struct {
	Key        Key
	Now        time.Time
	Token      uint64
	SecretHash []byte // SHA-256 of the lease secret presented
	Actor      Actor  // who asked, for the audit row (see Actor)
}

// Store is what the service calls: one atomic, durable decision per method.
// Implementations: a Durable tier alone, or a Fast tier composed in front of a
// Durable one (tiers/twotier). Every implementation passes tierstest.Run.
//
// Errors are the sentinels of this package (errors.Is), a *TransitionError
// (errors.As), or an error wrapping ErrUnavailable when the durable tier
// cannot be reached; context errors pass through unwrapped.
type Store interface {
	// Claim decides a claim atomically: of any number of concurrent Claims of
	// one key that may acquire it, exactly one does. Decision order (Decide):
	// absent → ACQUIRED/NEW with token 1; window over → ACQUIRED/WINDOW_EXPIRED
	// with token+1 and a new window; payloads differ → PAYLOAD_MISMATCH;
	// terminal → DUPLICATE; same AttemptID with a live lease → the same
	// ACQUIRED and token again, with the stored Salt and SecretHash (not the
	// claim's); released → ACQUIRED/RELEASED with token+1;
	// live lease → IN_PROGRESS; lease over → ACQUIRED/LEASE_EXPIRED with
	// token+1 and the state the previous holder reached. Every acquisition
	// stores the claim's Holder, AttemptID, Salt and SecretHash.
	// On error nothing was acquired: a retry of the same claim is never
	// answered DUPLICATE because of a failed call.
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)

	// Transition applies p.To when p.Token is the current token, p.SecretHash
	// its owner's, and the transition is allowed from the current state.
	// Repeating a transition that already happened, with the same token and
	// secret (and, to SETTLED or FAILED, the same result), returns
	// changed=false and writes nothing. Errors: ErrNotFound, ErrStaleToken
	// (another holder took over, or the key was released), ErrNotOwner (the
	// current token with another secret hash), *TransitionError (not allowed
	// from the current state), *ResultMismatchError (a terminal state
	// repeated with another result; nothing written). The token is checked
	// first, then the secret, then the state.
	Transition(ctx context.Context, p TransitionParams) (rec Record, changed bool, err error)

	// Renew sets the lease of the current, unreleased holder to Now+Lease.
	// Errors: ErrNotFound, ErrStaleToken, ErrNotOwner, *TransitionError on a
	// terminal record.
	Renew(ctx context.Context, p RenewParams) (Record, error)

	// Release marks a non-terminal record released so that the next Claim
	// acquires it with token+1. Releasing an already released record with its
	// token and secret again succeeds and changes nothing. Errors:
	// ErrNotFound, ErrStaleToken, ErrNotOwner, *TransitionError on a terminal
	// record.
	Release(ctx context.Context, p ReleaseParams) (Record, error)

	// Get reads the record of k from the source of truth. Errors: ErrNotFound.
	Get(ctx context.Context, k Key) (Record, error)

	// Ping reports whether the store can serve (its durable tier answers).
	Ping(ctx context.Context) error

	// Close releases the store's resources.
	Close() error
}

// LocalAnswerer is a Store that can answer some claims from its process's
// memory: a duplicate of a settled key (tiers/twotier's cache of terminal
// records). The service asks it before it derives a claim's ownership, which
// only an acquisition stores.
type LocalAnswerer interface {
	// AnswerLocally returns what Claim answers p, with no I/O, when that
	// answer is DUPLICATE or PAYLOAD_MISMATCH from a record held in memory;
	// ok=false otherwise. Such an answer writes nothing and reads none of
	// p's ownership (AttemptID, Salt and SecretHash), which may be unset.
	AnswerLocally(p ClaimParams) (res ClaimResult, ok bool)
}

// Durable is the source of truth. It is a Store on its own (ServedBy is
// TierDurable); a Fast tier may be composed in front of it.
//
// Durable implementations decide every method in one atomic step against the
// times given in the params; a record within its window is never deleted.
type Durable interface {
	Store
	// Prune deletes up to limit records whose window ended before cutoff and
	// returns how many it deleted.
	Prune(ctx context.Context, cutoff time.Time, limit int) (int, error)
}

// FastVerdict is what the fast tier concluded about a claim.
type FastVerdict uint8

const (
	// FastReserved: the key was absent; a pending marker carrying the
	// caller's nonce now stands in its place, and the caller must ask the
	// durable tier, then Put its answer or Abort the marker.
	FastReserved FastVerdict = iota + 1
	// FastDecided: the fast tier answered (DUPLICATE, PAYLOAD_MISMATCH,
	// IN_PROGRESS, or the same ACQUIRED again for a repeated AttemptID).
	FastDecided
	// FastTakeover: the record may change hands (lease over, released,
	// window over); only the durable tier may decide.
	FastTakeover
	// FastAskDurable: the claim met a live pending marker it did not
	// place. The claim that placed it may be in flight, may have committed
	// (a first claim leaves its marker standing for the new record's
	// lease, and a repair may have failed), or may have died; only the
	// durable tier knows, and the fast tier must not answer the owner's own
	// retry IN_PROGRESS by a marker: the durable tier decides. No marker
	// was placed; FastResult.Marker names the one met, and the caller Puts
	// the durable answer, or Fills what it only read in place of that
	// marker, so the key's next claims are answered by the fast tier.
	FastAskDurable
)

// ReserveParams is a claim as the fast tier sees it.
type ReserveParams struct {
	Key         Key
	Now         time.Time
	Nonce       string        // unique per claim call; identifies our pending marker
	PendingTTL  time.Duration // lifetime of the pending marker (twotier: the claim's lease)
	PayloadHash []byte
	AttemptID   string
}

// FastResult is the fast tier's answer, as DecideFast decides it. For
// FastDecided, Outcome, Reason and Record say what to answer; with any other
// verdict they mean nothing. Marker is the nonce of the marker a
// FastAskDurable met, for Fill.
type FastResult struct {
	Verdict FastVerdict
	Outcome Outcome
	Reason  Reason
	Record  Record
	Marker  string
	// Unverified: the tier held a record under p.Key that failed its
	// integrity check (a shared tier seals what it stores, and anyone who
	// can write it could have written this one). The record was treated
	// as absent and withdrawn; the verdict is FastTakeover, so the durable
	// tier decides and its answer takes the record's place. The caller
	// counts it (claimd_fast_tier_integrity_failures_total).
	Unverified bool
	// ResultInDurable: FastDecided from a terminal record whose result the
	// fast tier does not keep (too large to be worth its memory for a whole
	// window): Record.Result is nil, and the caller reads the result from
	// the durable tier, which always holds it, before it answers.
	ResultInDurable bool
}

// TerminalCopy is what a fast tier must keep of a terminal record: all of
// it but what only a live owner needs. A terminal record only ever answers
// DUPLICATE or PAYLOAD_MISMATCH until its window ends (Decide), neither of
// which hands over a lease, so a tier short of memory may drop the owner's
// attempt id, salt and secret hash (what a retry of the same attempt is
// recognised and answered its lease secret by) and the time of the last
// write. The entity fields are never kept (only the durable tier decides
// by them). Any other record is kept whole.
func TerminalCopy(r Record) Record {
	r.Lifecycle, r.EntityID, r.EventType = "", "", ""
	if r.State.Terminal() {
		r.AttemptID, r.Salt, r.SecretHash, r.UpdatedAt = "", nil, nil, time.Time{}
	}
	return r
}

// Fast is a cache of records in front of a Durable tier. It may lose any
// entry at any time (flush, eviction, failover); it must never hold a record
// beyond its window or prefer an older version of a record over a newer one.
type Fast interface {
	// Reserve decides atomically from what the tier holds under p.Key, as
	// DecideFast does, and writes the pending marker when it says so. A
	// tier that others can write (Redis) decides only from a record whose
	// integrity it verified; any other record it treats as absent and
	// withdraws, answering FastTakeover with Unverified set.
	Reserve(ctx context.Context, p ReserveParams) (FastResult, error)
	// Put caches rec until rec.WindowExpiresAt, replacing a pending marker or
	// an older record, never a newer one. Records are ordered by window
	// (a later window is newer: after a prune a key starts again at Version
	// 1), then by Version.
	Put(ctx context.Context, rec Record) error
	// Fill caches rec in place of the pending marker carrying nonce, and
	// only there: an absent key, another marker or any record (older ones
	// too) is left alone. It copies a record the durable tier was only
	// read for (an IN_PROGRESS, a PAYLOAD_MISMATCH): while the marker seen
	// before the read still stands, nothing was written to the key since,
	// so the copy is at least as new as any the fast tier held, and a write
	// that commits after the read Puts its own, newer version over it. A
	// read copied where the marker had gone could land after a newer
	// record was put and then erased (a flush), and answer IN_PROGRESS for
	// an event settled since.
	Fill(ctx context.Context, rec Record, nonce string) error
	// Abort deletes k's pending marker if it still carries nonce; anything
	// else under k is left alone.
	Abort(ctx context.Context, k Key, nonce string) error
	// Ping reports whether the fast tier answers.
	Ping(ctx context.Context) error
	// Close releases the tier's resources.
	Close() error
}
