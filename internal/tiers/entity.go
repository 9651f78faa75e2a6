package tiers

import (
	"context"
	"slices"
	"time"
)

// EntityEvent places a claim in an entity lifecycle: the claim of event
// EventType of entity (Lifecycle, EntityID). The service resolves it from the
// provider's registry entry (horizon.Placement) before a store sees the
// claim; a store needs no registry. States are the lifecycle's state names.
//
// Order, decided by the durable tier atomically with the claim, after the
// key's own decision (only a claim that would acquire is ordered; DUPLICATE,
// IN_PROGRESS and PAYLOAD_MISMATCH answer as without an entity):
//   - the entity is in a From state (an entity never seen is in Initial) and
//     no other key holds it: ACQUIRED as usual, and the claim now holds the
//     entity until its record settles, fails, is released or its lease
//     ends;
//   - another key holds the entity with a live, unsettled claim, or the
//     entity is in a Wait state: OutcomeDeferred, nothing acquired;
//   - any other state: OutcomeSuperseded, nothing acquired.
//
// A hold is live while the holder's record still carries the token it
// acquired the entity with, is neither released nor terminal, and its lease
// runs. The first acquisition creates the entity (GetEntity finds it from
// then on, Version 0, BusyWith its key); an entity only ever deferred or
// superseded is ErrEntityNotFound.
//
// DEFERRED and SUPERSEDED write no claim record (ClaimResult.Record is the
// key's record unchanged, or only its Key when it has none); they upsert the
// event's deferral row (count of both answers, first and last seen, the
// states it awaits) that ListDeferred reads. Settling the holding record (Transition to SETTLED)
// moves the entity to To, appends an AppliedEvent and frees the entity, in
// the same transaction as the settle; FAILED and Release free it unchanged.
// A record that no longer holds its entity (its lease ended and another
// event acquired the entity) cannot settle: its Transition to SETTLED is
// ErrStaleToken and writes nothing, so that two events never both apply
// from one state.
type EntityEvent struct {
	Lifecycle string
	EntityID  string
	EventType string
	Initial   string
	From      []string
	Wait      []string
	To        string
}

// EntityKey names one entity.
type EntityKey struct {
	Namespace string
	Provider  string
	Lifecycle string
	EntityID  string
}

// EntityPosition is where the entity stood when a claim with an Entity was
// decided (ClaimResult.Entity).
type EntityPosition struct {
	State     string // the entity's state; Initial for an entity never seen
	BusyWith  string // DEFERRED because another key holds the entity: that key's event type
	Deferrals uint32 // for DEFERRED: how many times this event (key) was deferred or superseded, this one included; 0 otherwise
}

// AppliedEvent is one settled event that advanced an entity.
type AppliedEvent struct {
	EventType string
	Key       string
	From, To  string
	Token     uint64
	AppliedAt time.Time
}

// Entity is an entity's state and history.
type Entity struct {
	EntityKey
	State     string
	Version   uint64 // events applied
	UpdatedAt time.Time
	BusyWith  string // key of the claim holding the entity now, "" when free
	Applied   []AppliedEvent
}

// DeferredEvent is one event that was deferred or superseded.
type DeferredEvent struct {
	Lifecycle, EntityID, EventType, Key string
	Superseded                          bool // the last decision was SUPERSEDED
	Count                               uint32
	FirstSeen, LastSeen                 time.Time
	Awaiting                            []string // the event's From states
	EntityState                         string   // the entity's state now
	Applied                             bool     // a later delivery of the key settled
}

// ListDeferredParams selects deferred events: of (Namespace, Provider), of
// one entity when EntityID is set; a Page of them, newest LastSeen first
// (its cursor is EncodeDeferredCursor's).
type ListDeferredParams struct {
	Namespace, Provider, EntityID string
	Page
}

// Entities is implemented by the durable tiers (and by twotier, which asks
// its durable tier): the reads behind EntityService.
type Entities interface {
	// GetEntity reads an entity and its applied events, oldest first.
	// Errors: ErrEntityNotFound.
	GetEntity(ctx context.Context, k EntityKey) (Entity, error)
	// ListDeferred lists deferred and superseded events; next is the cursor
	// of the following page, "" on the last.
	ListDeferred(ctx context.Context, p ListDeferredParams) (events []DeferredEvent, next string, err error)
	// CountDeferred counts, in one read, the deferred events that are not
	// applied (the claimd_deferred_events gauge) of the providers in
	// cutoffs and, of them, those first seen before their provider's
	// Overdue and Lost cutoffs. Providers missing from the map are not
	// counted: the caller names every provider it serves.
	CountDeferred(ctx context.Context, cutoffs map[string]DeferredCutoffs) (DeferredCounts, error)
}

// DeferredCutoffs are one provider's cutoffs for CountDeferred: a deferral
// first seen before Overdue is overdue (the provider has used half its
// retry horizon), one first seen before Lost is lost (past the horizon: no
// retry will come).
type DeferredCutoffs struct {
	Overdue, Lost time.Time
}

// DeferredCounts is what CountDeferred counts: the deferred events not
// applied, and of them the overdue and the lost ones.
type DeferredCounts struct {
	Deferred, Overdue, Lost int
}

// Order decides an acquisition of e against its entity, in state (Initial
// for an entity never seen); busy is whether another claim holds the entity
// (HoldLive). Every durable tier orders by it, so they cannot drift apart.
func (e *EntityEvent) Order(state string, busy bool) Outcome {
	switch {
	case busy:
		return OutcomeDeferred
	case slices.Contains(e.From, state):
		return OutcomeAcquired
	case slices.Contains(e.Wait, state):
		return OutcomeDeferred
	default:
		return OutcomeSuperseded
	}
}

// Awaiting is e's From states as an event's deferral row keeps them
// (DeferredEvent.Awaiting): never nil, so that both stores write a list.
func (e *EntityEvent) Awaiting() []string {
	if e.From == nil {
		return []string{}
	}
	return e.From
}

// Refused is the answer to a claim of k that Order refused (outcome
// DEFERRED or SUPERSEDED), as every durable tier gives it: nothing is
// acquired, the answer carries the key's record unchanged (cur, or only its
// Key when it has none) and where the entity stood, in state, held by
// busyWith ("" when free). deferrals is the count of the key's deferral row,
// this refusal included; only a DEFERRED answer reports it.
func Refused(outcome Outcome, k Key, cur *Record, state, busyWith string, deferrals uint32) ClaimResult {
	rec := Record{Key: k}
	if cur != nil {
		rec = *cur
	}
	pos := &EntityPosition{State: state, BusyWith: busyWith}
	if outcome == OutcomeDeferred {
		pos.Deferrals = deferrals
	}
	return ClaimResult{Outcome: outcome, Record: rec, Entity: pos}
}

// HoldLive reports whether the claim that took an entity with token still
// holds it at now: its record h still carries that token, is neither
// released nor terminal, and its lease runs. A holder whose lease ran out
// holds the entity no more, whether or not its key was taken over since.
func HoldLive(h Record, token uint64, now time.Time) bool {
	return h.Token == token && !h.State.Terminal() && h.LeaseLive(now)
}
