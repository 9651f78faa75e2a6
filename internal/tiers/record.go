// Package tiers states the storage contract of claimd: the record and its
// state machine, the Store that the service calls, and the Fast and Durable
// tiers that a Store is built from. Backends live in sub-packages (memory,
// sqlite, redis, postgres); their composition lives in tiers/twotier; the
// conformance suite every backend and pairing runs lives in tiers/tierstest.
//
// No store decides by a clock of its own: every operation carries the time
// it happens at (Now), taken from the one injected clock of the service, so
// that tests move time for every tier alike, and every comparison of a
// lease, a window or a marker is against the values given. Clocks are read
// only for housekeeping that decides no answer: Redis expires a key by its
// own clock (after the window the key was given), PostgreSQL stamps audit
// rows and creates the months' audit partitions by its own, and a waiting
// ClaimWait or a batch of group commit bounds how long it waits.
package tiers

import (
	"fmt"
	"time"
)

// Key identifies one record: (namespace, provider, key). Key.Key is the
// canonical key, scope included.
type Key struct {
	Namespace string
	Provider  string
	Key       string
}

// String renders k as "namespace:provider:key" (for logs and errors).
func (k Key) String() string { return k.Namespace + ":" + k.Provider + ":" + k.Key }

// State is the per-event state machine.
type State uint8

// States of an event. SETTLED and FAILED are terminal.
const (
	StateUnspecified State = iota
	StateReceived
	StateValidated
	StateProcessing
	StateSettled
	StateFailed
)

var stateNames = [...]string{"UNSPECIFIED", "RECEIVED", "VALIDATED", "PROCESSING", "SETTLED", "FAILED"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// ParseState is the inverse of State.String.
func ParseState(name string) (State, error) {
	for i, n := range stateNames {
		if n == name && i > 0 {
			return State(i), nil
		}
	}
	return StateUnspecified, fmt.Errorf("tiers: unknown state %q", name)
}

// Terminal reports whether s is SETTLED or FAILED: a terminal record never
// changes again within its window.
func (s State) Terminal() bool { return s == StateSettled || s == StateFailed }

// allowed lists the transitions of the state machine (DESIGN §2).
var allowed = map[State][]State{
	StateReceived:   {StateValidated, StateProcessing, StateFailed},
	StateValidated:  {StateProcessing, StateFailed},
	StateProcessing: {StateSettled, StateFailed},
}

// CanTransition reports whether from→to is an allowed transition.
func CanTransition(from, to State) bool {
	for _, s := range allowed[from] {
		if s == to {
			return true
		}
	}
	return false
}

// AllowedFrom returns the states from which to may be reached (the predecessor
// states a conditional UPDATE puts in its WHERE clause).
func AllowedFrom(to State) []State {
	var from []State
	for f, tos := range allowed {
		for _, t := range tos {
			if t == to {
				from = append(from, f)
			}
		}
	}
	// Deterministic order for SQL arguments and tests.
	for i := 1; i < len(from); i++ {
		for j := i; j > 0 && from[j] < from[j-1]; j-- {
			from[j], from[j-1] = from[j-1], from[j]
		}
	}
	return from
}

// Outcome is the answer of a Claim.
type Outcome uint8

// Outcomes of a Claim.
const (
	OutcomeUnspecified Outcome = iota
	OutcomeAcquired
	OutcomeDuplicate
	OutcomeInProgress
	OutcomePayloadMismatch
	// OutcomeDeferred and OutcomeSuperseded answer only claims that carry an
	// Entity (entity.go): the event came before its prerequisite, or after
	// its entity moved past it. Nothing is acquired.
	OutcomeDeferred
	OutcomeSuperseded
)

var outcomeNames = [...]string{"UNSPECIFIED", "ACQUIRED", "DUPLICATE", "IN_PROGRESS", "PAYLOAD_MISMATCH", "DEFERRED", "SUPERSEDED"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// Reason says why a Claim was ACQUIRED.
type Reason uint8

// Reasons of an ACQUIRED outcome.
const (
	ReasonUnspecified Reason = iota
	ReasonNew
	ReasonReleased
	ReasonLeaseExpired
	ReasonWindowExpired
)

var reasonNames = [...]string{"UNSPECIFIED", "NEW", "RELEASED", "LEASE_EXPIRED", "WINDOW_EXPIRED"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", r)
}

// ParseReason is the inverse of Reason.String.
func ParseReason(name string) (Reason, error) {
	for i, n := range reasonNames {
		if n == name {
			return Reason(i), nil
		}
	}
	return ReasonUnspecified, fmt.Errorf("tiers: unknown reason %q", name)
}

// Tier names the store that decided an answer.
type Tier uint8

// Tiers, from nearest to the caller to the source of truth.
const (
	TierUnspecified Tier = iota
	TierLocal
	TierFast
	TierDurable
)

var tierNames = [...]string{"UNSPECIFIED", "LOCAL", "FAST", "DURABLE"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("Tier(%d)", t)
}

// Record is what a store holds for one Key.
//
// Token is the fencing token: it grows by one each time ownership changes
// hands and never otherwise. It is a sequence number, not a secret. What
// proves ownership is SecretHash: the SHA-256 of the lease secret that only
// the owner's ACQUIRED answer carried. Salt is what that secret was derived
// with (see ClaimParams), kept so that a repeated claim of the same attempt
// can be answered with the same secret. Both are written only when ownership
// changes hands, like Holder and AttemptID, and never leave the server.
//
// Version grows by one on every durable write of the record (claim,
// takeover, transition, renew, release); the fast tier uses it to refuse a
// stale copy over a newer one.
type Record struct {
	Key         Key
	State       State
	Token       uint64
	Version     uint64
	Attempt     uint32
	Reason      Reason // why the current owner acquired the key
	Released    bool   // released by its owner; the next Claim acquires
	Holder      string
	AttemptID   string // the owner's attempt fingerprint (ClaimParams.AttemptID), or ""
	Salt        []byte // the owner's ClaimParams.Salt
	SecretHash  []byte // the owner's ClaimParams.SecretHash; nil on a row written before it existed
	PayloadHash []byte // sha256 of the payload of the claim that opened the window, or nil
	Result      []byte // stored at settle time, returned to duplicates
	// Lifecycle, EntityID and EventType are set on a record whose claim
	// carried an Entity (the durable tier's; a fast-tier copy may omit them):
	// settling it advances that entity.
	Lifecycle, EntityID, EventType string
	FirstSeenAt                    time.Time
	LeaseExpiresAt                 time.Time
	WindowExpiresAt                time.Time
	UpdatedAt                      time.Time
}

// LeaseLive reports whether the owner's lease is still running at now. A
// lease is live up to, not including, its expiry instant.
func (r *Record) LeaseLive(now time.Time) bool {
	return !r.Released && now.Before(r.LeaseExpiresAt)
}

// WindowOver reports whether the dedup window has ended at now. The window
// includes every instant before WindowExpiresAt.
func (r *Record) WindowOver(now time.Time) bool { return !now.Before(r.WindowExpiresAt) }

// NotOlderThan reports whether r is the same version of its key as o or a
// newer one, in the order of Fast.Put: by window end (a later window is
// newer whatever its version, because after a prune a key starts again at
// Version 1), then by Version.
func (r *Record) NotOlderThan(o *Record) bool {
	if !r.WindowExpiresAt.Equal(o.WindowExpiresAt) {
		return r.WindowExpiresAt.After(o.WindowExpiresAt)
	}
	return r.Version >= o.Version
}
