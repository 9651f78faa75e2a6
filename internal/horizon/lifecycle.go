package horizon

import (
	"slices"
)

// Lifecycle is an entity's state machine as one provider's events drive it
// (a Stripe payment intent: created → processing → succeeded | …). It lets
// claimd order the events of one entity: an event that arrives before the
// entity can take it is deferred, one the entity can no longer take is
// superseded. A *Lifecycle from a Registry is shared and must not be
// modified.
type Lifecycle struct {
	Name string
	// EntityRule reads the entity id from a delivery and EventTypeRule its
	// event type, in the key-rule language (ParseRule), as written in the
	// file; entityRule and eventTypeRule are the parsed rules.
	EntityRule, EventTypeRule string
	entityRule, eventTypeRule Rule
	// States lists the entity's states in the file's order; States[0] is the
	// initial state, the state of an entity no event has reached yet.
	States []string
	// Events lists the lifecycle's event types in the file's order.
	Events []*LifecycleEvent
	Source string // where the provider documents the lifecycle
}

// LifecycleEvent is one event type's place in a lifecycle.
type LifecycleEvent struct {
	EventType string
	// From lists the states the event may arrive in; To is the state it
	// leads to when settled.
	From []string
	To   string
	// Wait lists the states, outside From, from which some state of From is
	// still reachable: an event arriving while the entity is in one of them
	// is deferred. In any other state the event is superseded. Computed by
	// the loader from the lifecycle's graph (waitStates).
	Wait []string
	// EntityRule, when set, reads this event's entity id instead of the
	// lifecycle's rule (a Stripe dispute names its charge in
	// data.object.charge); entityRule is it parsed, nil when unset.
	EntityRule string
	entityRule Rule
}

// Initial is the state of an entity that no event has reached yet.
func (l *Lifecycle) Initial() string { return l.States[0] }

// Placement is a delivery's place in a lifecycle: which entity it moves and
// by which event.
type Placement struct {
	Lifecycle *Lifecycle
	Event     *LifecycleEvent
	EntityID  string
}

// waitStates returns, for an event arriving in from, the states outside from
// from which a state of from is reachable along the lifecycle's events.
func waitStates(l *Lifecycle, from []string) []string {
	var wait []string
	for _, s := range l.States {
		if !slices.Contains(from, s) && reachesAny(l, s, from) {
			wait = append(wait, s)
		}
	}
	return wait
}

// reachesAny reports whether some state of targets is reachable from start
// by one or more events of l.
func reachesAny(l *Lifecycle, start string, targets []string) bool {
	seen := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, e := range l.Events {
			if !slices.Contains(e.From, s) || seen[e.To] {
				continue
			}
			if slices.Contains(targets, e.To) {
				return true
			}
			seen[e.To] = true
			queue = append(queue, e.To)
		}
	}
	return false
}

// Lifecycle returns p's lifecycle called name.
func (p *Provider) Lifecycle(name string) (*Lifecycle, bool) {
	for _, l := range p.Lifecycles {
		if l.Name == name {
			return l, true
		}
	}
	return nil, false
}

// PlaceEvent finds the lifecycle of p that declares eventType, for a caller
// that names the entity and the event type itself. ok is false when no
// lifecycle of p declares eventType: the claim is an ordinary one.
func (p *Provider) PlaceEvent(entityID, eventType string) (pl Placement, ok bool) {
	for _, l := range p.Lifecycles {
		for _, e := range l.Events {
			if e.EventType == eventType {
				return Placement{Lifecycle: l, Event: e, EntityID: entityID}, true
			}
		}
	}
	return Placement{}, false
}

// PlaceDelivery reads a raw delivery's event type and entity id by p's
// lifecycle rules. ok is false when the delivery belongs to no lifecycle of
// p: no lifecycle's event-type rule yields a type it declares, or the
// entity rule finds no id. Errors: a *KeyError when the delivery is
// malformed under a rule (the body is not JSON, an id is not a valid key).
func (p *Provider) PlaceDelivery(d *Delivery) (pl Placement, ok bool, err error) {
	for _, l := range p.Lifecycles {
		_, eventType, err := firstYield(l.eventTypeRule.Alternatives(), d)
		if err != nil {
			return Placement{}, false, err
		}
		e := l.event(eventType)
		if e == nil {
			continue
		}
		rule := l.entityRule
		if e.entityRule != nil {
			rule = e.entityRule
		}
		i, id, err := firstYield(rule.Alternatives(), d)
		if err != nil || i < 0 {
			return Placement{}, false, err
		}
		if reason := invalidKey(id); reason != "" {
			return Placement{}, false, malformed(rule.String(), "entity id: "+reason, nil)
		}
		return Placement{Lifecycle: l, Event: e, EntityID: id}, true, nil
	}
	return Placement{}, false, nil
}

// event returns l's event of type t, or nil.
func (l *Lifecycle) event(t string) *LifecycleEvent {
	if t == "" {
		return nil
	}
	for _, e := range l.Events {
		if e.EventType == t {
			return e
		}
	}
	return nil
}
