package tiers

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"time"
)

// The functions in this file are the state machine itself, free of storage.
// The Go backends (memory, sqlite) and the local cache of tiers/twotier run
// them inside their own atomic step; the Redis scripts and PostgreSQL
// statements encode the same rules, and the conformance suite compares
// every backend's answers with these functions over generated tables of
// records and requests.

// PayloadsDiffer reports whether two payload hashes are both known and
// different. An unknown hash (nil) matches anything.
func PayloadsDiffer(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && !bytes.Equal(a, b)
}

// Decide applies claim p to the current record cur (nil when absent). When
// write is true, next must be stored atomically with the decision.
func Decide(cur *Record, p ClaimParams) (res ClaimResult, next Record, write bool) {
	if cur == nil {
		next = NewRecord(p)
		return ClaimResult{Outcome: OutcomeAcquired, Reason: ReasonNew, Record: next}, next, true
	}
	switch {
	case cur.WindowOver(p.Now):
		next = Takeover(*cur, p, ReasonWindowExpired)
	case PayloadsDiffer(cur.PayloadHash, p.PayloadHash):
		return ClaimResult{Outcome: OutcomePayloadMismatch, Record: *cur}, Record{}, false
	case cur.State.Terminal():
		return ClaimResult{Outcome: OutcomeDuplicate, Record: *cur}, Record{}, false
	case p.AttemptID != "" && p.AttemptID == cur.AttemptID && cur.LeaseLive(p.Now):
		// The caller retrying its own call: the same ACQUIRED, the same token.
		return ClaimResult{Outcome: OutcomeAcquired, Reason: cur.Reason, Record: *cur}, Record{}, false
	case cur.Released:
		next = Takeover(*cur, p, ReasonReleased)
	case cur.LeaseLive(p.Now):
		return ClaimResult{Outcome: OutcomeInProgress, Record: *cur}, Record{}, false
	default:
		next = Takeover(*cur, p, ReasonLeaseExpired)
	}
	return ClaimResult{Outcome: OutcomeAcquired, Reason: next.Reason, Record: next}, next, true
}

// Pending is a pending marker: what a fast tier holds for a claim from its
// Reserve on, until a Put, Fill or Abort replaces it or it lapses. A claim
// the durable tier answered ACQUIRED/NEW leaves its marker standing for the
// new record's lease (tiers/twotier), which the owner's next write replaces
// with the record.
type Pending struct {
	Nonce string    // the claim call's ReserveParams.Nonce
	Until time.Time // the marker lapses at this instant
}

// DecideFast is the fast tier's half of Decide: what Reserve answers for p
// when the fast tier holds rec (a cached record), marker (a claim in
// flight), or neither (both nil; never both set). When mark is true, the
// pending marker {p.Nonce, p.Now+p.PendingTTL} must be written atomically
// with the answer, replacing whatever marker stands there.
//
//   - No record, and no marker, one that lapsed by p.Now, or our own (the
//     same nonce: a retried Reserve) → FastReserved, and mark.
//   - Another claim's live marker → FastAskDurable, naming the marker: the
//     claim it stands for may be in flight, committed or dead, and only the
//     durable tier knows which (a marker never answers a claim itself, so
//     every IN_PROGRESS names its holder).
//   - A record → Decide's answer when Decide would not write; when it would
//     (window over, released, lease over), the record may change hands and
//     only the durable tier may hand it over: FastTakeover.
//
// Only a FastDecided answer carries Outcome, Reason and Record.
func DecideFast(rec *Record, marker *Pending, p ReserveParams) (res FastResult, mark bool) {
	if rec == nil {
		if marker == nil || !p.Now.Before(marker.Until) || marker.Nonce == p.Nonce {
			return FastResult{Verdict: FastReserved}, true
		}
		return FastResult{Verdict: FastAskDurable, Marker: marker.Nonce}, false
	}
	d, _, write := Decide(rec, ClaimParams{Key: p.Key, Now: p.Now, PayloadHash: p.PayloadHash, AttemptID: p.AttemptID})
	if write {
		return FastResult{Verdict: FastTakeover}, false
	}
	return FastResult{Verdict: FastDecided, Outcome: d.Outcome, Reason: d.Reason, Record: d.Record}, false
}

// NewRecord is the record a first claim creates: token 1, RECEIVED (PROCESSING
// with p.Start), a window of p.TTL and a lease of p.Lease from p.Now.
func NewRecord(p ClaimParams) Record {
	return Record{
		Key:             p.Key,
		State:           startState(StateReceived, p.Start),
		Token:           1,
		Version:         1,
		Attempt:         1,
		Reason:          ReasonNew,
		Holder:          p.Holder,
		AttemptID:       p.AttemptID,
		Salt:            p.Salt,
		SecretHash:      p.SecretHash,
		PayloadHash:     p.PayloadHash,
		FirstSeenAt:     p.Now,
		LeaseExpiresAt:  p.Now.Add(p.Lease),
		WindowExpiresAt: p.Now.Add(p.TTL),
		UpdatedAt:       p.Now,
	}
}

// Takeover hands cur to the claimant of p for the given reason: token+1,
// attempt+1, a fresh lease. After a release or a new window the state starts
// again at RECEIVED; after an expired lease it stays where the vanished
// holder left it, so the new holder knows how far it got. With p.Start a
// state machine that starts again (a release, a new window) starts in
// PROCESSING; a lease-expired takeover keeps the reached state even then,
// since that state is the only trace of how far the vanished holder got (the
// new holder moves it to PROCESSING itself when it goes on).
func Takeover(cur Record, p ClaimParams, reason Reason) Record {
	next := cur
	next.Token++
	next.Version++
	next.Attempt++
	next.Reason = reason
	next.Released = false
	next.Holder = p.Holder
	next.AttemptID = p.AttemptID
	next.Salt = p.Salt
	next.SecretHash = p.SecretHash
	next.LeaseExpiresAt = p.Now.Add(p.Lease)
	next.UpdatedAt = p.Now
	switch reason {
	case ReasonWindowExpired:
		next.State = StateReceived
		next.Result = nil
		next.PayloadHash = p.PayloadHash
		next.FirstSeenAt = p.Now
		next.WindowExpiresAt = p.Now.Add(p.TTL)
	case ReasonReleased:
		next.State = StateReceived
		next.Result = nil
	}
	if len(next.PayloadHash) == 0 {
		next.PayloadHash = p.PayloadHash
	}
	if reason != ReasonLeaseExpired {
		next.State = startState(next.State, p.Start)
	}
	return next
}

// startState is the state an acquisition records: s, or PROCESSING when the
// claim starts the work and s is short of it (RECEIVED, VALIDATED).
func startState(s State, start bool) State {
	if start && (s == StateReceived || s == StateValidated) {
		return StateProcessing
	}
	return s
}

// checkToken fences an operation by token, then by secret: only the current
// owner may act. The token is checked first so that a holder that was taken
// over learns it is stale (its secret is no longer the record's either).
// A record without a secret hash (written before there was one) has no owner
// that can prove itself. The comparison runs in constant time so that its
// duration tells nothing about the stored hash.
func checkToken(cur Record, token uint64, secretHash []byte) error {
	switch {
	case token < cur.Token:
		return fmt.Errorf("%w: token %d, current %d", ErrStaleToken, token, cur.Token)
	case token > cur.Token:
		return fmt.Errorf("%w: token %d was never issued (current %d)", ErrStaleToken, token, cur.Token)
	case len(cur.SecretHash) != SecretHashBytes || subtle.ConstantTimeCompare(cur.SecretHash, secretHash) != 1:
		return fmt.Errorf("%w: token %d", ErrNotOwner, token)
	}
	return nil
}

// ApplyTransition applies p to cur. changed is false for a repeat of a
// transition that already happened (same token, same target state, and for a
// terminal target the same result); a terminal target repeated with another
// result is a *ResultMismatchError.
func ApplyTransition(cur Record, p TransitionParams) (next Record, changed bool, err error) {
	if err := checkToken(cur, p.Token, p.SecretHash); err != nil {
		return cur, false, err
	}
	if cur.Released {
		return cur, false, fmt.Errorf("%w: token %d was released", ErrStaleToken, p.Token)
	}
	if cur.State == p.To {
		if p.To.Terminal() && !bytes.Equal(cur.Result, p.Result) {
			return cur, false, &ResultMismatchError{Current: cur.State}
		}
		return cur, false, nil
	}
	if !CanTransition(cur.State, p.To) {
		return cur, false, &TransitionError{Current: cur.State, To: p.To, Op: "transition"}
	}
	next = cur
	next.State = p.To
	next.Version++
	next.UpdatedAt = p.Now
	if p.To.Terminal() {
		next.Result = p.Result
	} else if p.Lease > 0 {
		next.LeaseExpiresAt = p.Now.Add(p.Lease)
	}
	return next, true, nil
}

// ApplyRenew extends the current holder's lease to p.Now+p.Lease.
func ApplyRenew(cur Record, p RenewParams) (Record, error) {
	if err := checkToken(cur, p.Token, p.SecretHash); err != nil {
		return cur, err
	}
	if cur.Released {
		return cur, fmt.Errorf("%w: token %d was released", ErrStaleToken, p.Token)
	}
	if cur.State.Terminal() {
		return cur, &TransitionError{Current: cur.State, Op: "renew"}
	}
	next := cur
	next.LeaseExpiresAt = p.Now.Add(p.Lease)
	next.Version++
	next.UpdatedAt = p.Now
	return next, nil
}

// ApplyRelease releases cur on behalf of the holder of p.Token. changed is
// false when it was already released with that token.
func ApplyRelease(cur Record, p ReleaseParams) (next Record, changed bool, err error) {
	if err := checkToken(cur, p.Token, p.SecretHash); err != nil {
		return cur, false, err
	}
	if cur.State.Terminal() {
		return cur, false, &TransitionError{Current: cur.State, Op: "release"}
	}
	if cur.Released {
		return cur, false, nil
	}
	next = cur
	next.Released = true
	next.LeaseExpiresAt = p.Now
	next.Version++
	next.UpdatedAt = p.Now
	return next, true, nil
}
