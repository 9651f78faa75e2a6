package reconcile

import (
	"fmt"
	"time"
)

// Kind is what reconciliation found for one event. The kinds that need a
// person are counted in claimd_reconciliation_mismatch_total{kind}.
type Kind string

// Kinds of findings. The first four need a person.
const (
	// NeverDelivered: the provider lists the event and claimd holds no
	// record of it, nor a deferral: no handler ever claimed it.
	NeverDelivered Kind = "never_delivered"
	// Stuck: claimed but not settled, and nobody is working on it: its
	// holder released it, or its lease ended, or it has been held longer
	// than Policy.StuckAfter.
	Stuck Kind = "stuck"
	// Failed: the handler moved it to FAILED.
	Failed Kind = "failed"
	// Deferred: deferred (it arrived before its entity's prerequisite) and
	// still not applied after half the provider's retry horizon.
	Deferred Kind = "deferred"

	// Settled: settled; nothing to do.
	Settled Kind = "settled"
	// InProgress: held under a live lease, younger than StuckAfter.
	InProgress Kind = "in_progress"
	// Waiting: deferred, within the first half of the retry horizon: the
	// provider's retries will apply it.
	Waiting Kind = "waiting"
	// Superseded: claimd answered SUPERSEDED (its entity had moved past
	// it); acknowledged on purpose.
	Superseded Kind = "superseded"
	// TooRecent: no record yet, but the event is younger than Policy.MinAge:
	// its first delivery may still be on its way.
	TooRecent Kind = "too_recent"
	// OutsideWindow: no record, and the event is older than the provider's
	// window (ttl): claimd prunes records after their window, so absence
	// says nothing.
	OutsideWindow Kind = "outside_window"
)

// Kinds lists every kind, those that need a person first.
var Kinds = []Kind{NeverDelivered, Stuck, Failed, Deferred, Settled, InProgress, Waiting, Superseded, TooRecent, OutsideWindow}

// NeedsPerson reports whether k is a mismatch someone must look at.
func (k Kind) NeedsPerson() bool {
	switch k {
	case NeverDelivered, Stuck, Failed, Deferred:
		return true
	}
	return false
}

// State is a record's state, as the API names it without its prefix
// (EVENT_STATE_PROCESSING is "PROCESSING").
type State string

// States of a record.
const (
	StateReceived   State = "RECEIVED"
	StateValidated  State = "VALIDATED"
	StateProcessing State = "PROCESSING"
	StateSettled    State = "SETTLED"
	StateFailed     State = "FAILED"
)

// Record is what claimd holds for an event's key (the API's Record).
type Record struct {
	State        State
	Holder       string
	Released     bool
	FirstSeen    time.Time
	LeaseExpires time.Time
}

// Deferral is claimd's deferral row for an event's key (the API's
// DeferredEvent): written when a claim was DEFERRED or SUPERSEDED, which
// write no record.
type Deferral struct {
	Superseded bool
	Applied    bool
	FirstSeen  time.Time
	Awaiting   []string
}

// Policy is what Classify judges against.
type Policy struct {
	// Now is the time of the reconciliation.
	Now time.Time
	// Horizon is the provider's retry horizon; Window its ttl (horizon plus
	// margin), after which claimd prunes records.
	Horizon, Window time.Duration
	// MinAge: an event without a record younger than this is TooRecent.
	MinAge time.Duration
	// StuckAfter: an unsettled record first seen longer ago than this is
	// Stuck even while its holder renews its lease.
	StuckAfter time.Duration
}

// Finding is the verdict on one event.
type Finding struct {
	Event
	Kind Kind
	// State is the record's state, or DEFERRED or SUPERSEDED for a
	// deferral, or "" when claimd holds nothing.
	State string
	// Holder is the record's holder text.
	Holder string
	// Age is how long ago the provider created the event (or, when the
	// event does not say, claimd first saw it); 0 when neither is known.
	Age time.Duration
	// Why says it in words.
	Why string
}

// Classify judges one event by the record and the deferral claimd holds for
// its key (nil when none).
func Classify(e Event, rec *Record, def *Deferral, p Policy) Finding {
	f := Finding{Event: e}
	switch {
	case !e.Created.IsZero():
		f.Age = p.Now.Sub(e.Created)
	case rec != nil:
		f.Age = p.Now.Sub(rec.FirstSeen)
	case def != nil:
		f.Age = p.Now.Sub(def.FirstSeen)
	}
	if rec != nil {
		f.State, f.Holder = string(rec.State), rec.Holder
		f.Kind, f.Why = classifyRecord(rec, p)
		return f
	}
	if def != nil {
		f.State = "DEFERRED"
		if def.Superseded {
			f.State = "SUPERSEDED"
		}
		f.Kind, f.Why = classifyDeferral(def, p)
		return f
	}
	switch {
	case !e.Created.IsZero() && f.Age > p.Window:
		f.Kind, f.Why = OutsideWindow, fmt.Sprintf("created %s ago, before the window of %s: a record would have been pruned", round(f.Age), round(p.Window))
	case !e.Created.IsZero() && f.Age < p.MinAge:
		f.Kind, f.Why = TooRecent, fmt.Sprintf("created %s ago, less than --min-age %s: its delivery may be on its way", round(f.Age), round(p.MinAge))
	default:
		f.Kind, f.Why = NeverDelivered, "no record and no deferral: no handler claimed it"
	}
	return f
}

func classifyRecord(rec *Record, p Policy) (Kind, string) {
	switch rec.State {
	case StateSettled:
		return Settled, "settled"
	case StateFailed:
		return Failed, "the handler moved it to FAILED"
	}
	switch {
	case rec.Released:
		return Stuck, fmt.Sprintf("%s, released by its holder and not claimed since", rec.State)
	case !rec.LeaseExpires.After(p.Now):
		return Stuck, fmt.Sprintf("%s, lease ended %s ago: nobody is working on it", rec.State, round(p.Now.Sub(rec.LeaseExpires)))
	case p.StuckAfter > 0 && p.Now.Sub(rec.FirstSeen) > p.StuckAfter:
		return Stuck, fmt.Sprintf("%s for %s, more than --stuck-after %s, its lease renewed", rec.State, round(p.Now.Sub(rec.FirstSeen)), round(p.StuckAfter))
	}
	return InProgress, fmt.Sprintf("%s under a live lease", rec.State)
}

func classifyDeferral(def *Deferral, p Policy) (Kind, string) {
	switch {
	case def.Superseded:
		return Superseded, "superseded: its entity had moved past it"
	case def.Applied:
		return Settled, "deferred, then applied"
	}
	age := p.Now.Sub(def.FirstSeen)
	if age >= p.Horizon/2 {
		return Deferred, fmt.Sprintf("deferred %s ago, past half the retry horizon (%s), awaiting %v", round(age), round(p.Horizon), def.Awaiting)
	}
	return Waiting, fmt.Sprintf("deferred %s ago, awaiting %v; the provider's retries will apply it", round(age), def.Awaiting)
}

// round shortens a duration for people: whole seconds.
func round(d time.Duration) time.Duration { return d.Round(time.Second) }

// Summary counts findings per kind.
type Summary map[Kind]int

// Summarize counts fs by kind.
func Summarize(fs []Finding) Summary {
	s := Summary{}
	for _, f := range fs {
		s[f.Kind]++
	}
	return s
}

// Mismatches is how many findings need a person.
func (s Summary) Mismatches() int {
	n := 0
	for k, c := range s {
		if k.NeedsPerson() {
			n += c
		}
	}
	return n
}
