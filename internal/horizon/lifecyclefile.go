package horizon

import (
	"net/url"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"
)

// The lifecycles of a provider entry, validated against every rule that
// Load lists. A provider's entry reads:
//
//	lifecycles:
//	  charge:                                  # the lifecycle's name
//	    entity: json:data.object.id            # reads the entity id
//	    event_type: json:type                  # reads the event type
//	    states: [new, pending, succeeded, failed]   # the first is the initial state
//	    events:
//	      charge.succeeded: {from: [new, pending], to: succeeded}
//	      charge.dispute.created: {from: [succeeded], to: succeeded, entity: json:data.object.charge}
//	    source: https://docs.stripe.com/api/events/types
//
// An event type the file does not declare is an ordinary claim.

// Bounds of a lifecycle. They keep `claimd providers` readable, the graph
// search of waitStates small (states × events per state), and every name a
// bounded storage key and metric label.
const (
	maxLifecycles   = 16
	maxStates       = 64
	maxEvents       = 256
	maxEventTypeLen = 255
)

// eventTypeSyntax is the shape of a declared event type: the names providers
// use (charge.dispute.created, PAYMENT.CAPTURE.COMPLETED) and the values a
// joined rule yields (CAPTURE:true). An event type is a metric label and a
// storage key, so spaces and control characters are out.
const eventTypeSyntax = `[A-Za-z0-9][A-Za-z0-9_.:/-]*`

var eventTypePattern = regexp.MustCompile(`^` + eventTypeSyntax + `$`)

var (
	lifecycleFields = []string{"entity", "event_type", "states", "events", "source"}
	eventFields     = []string{"from", "to", "entity"}
)

// lifecycles returns the lifecycles of n, the value of a provider's
// lifecycles field, recording every rule they break.
func (l *loader) lifecycles(n *yaml.Node, provider string) []*Lifecycle {
	if !l.entries(n, provider, "lifecycles", "lifecycle name to its entity, event_type, states, events and source", "lifecycles", maxLifecycles) {
		return nil
	}
	var out []*Lifecycle
	// declared maps each event type to the line that declares it: a
	// delivery is placed by its event type, so a type in two lifecycles of
	// a provider would be placed in whichever comes first.
	declared := make(map[string]int)
	for _, f := range l.Fields(n, provider, nil) {
		if lc := l.lifecycle(provider, f.Key, f.Value, declared); lc != nil {
			out = append(out, lc)
		}
	}
	return out
}

// lifecycle validates one lifecycle entry; it returns nil if any rule is
// broken.
func (l *loader) lifecycle(provider string, key, n *yaml.Node, declared map[string]int) *Lifecycle {
	before := l.Count()
	name := key.Value
	subject := provider + " lifecycle " + clipRule(name)
	if !namePattern.MatchString(name) {
		l.Errorf(key, subject, "lifecycle name must match %s", nameSyntax)
	}
	if n.Kind != yaml.MappingNode {
		l.Errorf(n, subject, "must be a mapping of entity, event_type, states, events and source")
		return nil
	}
	vals := l.Record(key, n, subject, lifecycleFields, "", "entity", "event_type", "states", "events", "source")
	lc := &Lifecycle{Name: name}
	if v := vals["entity"]; v != nil {
		lc.EntityRule, lc.entityRule = l.lifecycleRule(v, subject, "entity")
	}
	if v := vals["event_type"]; v != nil {
		lc.EventTypeRule, lc.eventTypeRule = l.lifecycleRule(v, subject, "event_type")
	}
	if v := vals["source"]; v != nil && l.scalar(v, subject, "source") {
		u, err := url.Parse(v.Value)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			l.Errorf(v, subject, "source %q must be an http(s) URL of the page that documents the lifecycle", clipRule(v.Value))
		}
		lc.Source = v.Value
	}
	var stateNodes map[string]*yaml.Node
	if v := vals["states"]; v != nil {
		lc.States, stateNodes = l.states(v, subject)
	}
	if v := vals["events"]; v != nil {
		lc.Events = l.events(v, subject, lc.States, declared)
	}
	if l.Count() > before {
		return nil
	}
	l.reachable(lc, subject, stateNodes)
	if l.Count() > before {
		return nil
	}
	for _, e := range lc.Events {
		e.Wait = waitStates(lc, e.From)
	}
	return lc
}

// lifecycleRule parses the rule n holds. A rule here reads a name, not a
// key: sha256 would make every delivery its own entity (or event type), so
// it is refused, alone or as an alternative.
func (l *loader) lifecycleRule(n *yaml.Node, subject, fieldName string) (string, Rule) {
	if !l.scalar(n, subject, fieldName) {
		return "", nil
	}
	r, err := ParseRule(n.Value)
	if err != nil {
		l.Errorf(n, subject, "%s: %v", fieldName, err)
		return n.Value, nil
	}
	for _, a := range r.Alternatives() {
		if a.Source() == KeySourceBodyHash {
			l.Errorf(n, subject, "%s rule %q hashes the body: it must read a value the provider names (header:<Name> or json:<path>)", fieldName, clipRule(n.Value))
			return n.Value, nil
		}
	}
	return n.Value, r
}

// states returns the list of states n names, and the node of each.
func (l *loader) states(n *yaml.Node, subject string) ([]string, map[string]*yaml.Node) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.Errorf(n, subject, "states must be a list of at least one state, the initial one first, as in [new, succeeded]")
		return nil, nil
	}
	if len(n.Content) > maxStates {
		l.Errorf(n, subject, "states lists %d states, more than %d", len(n.Content), maxStates)
		return nil, nil
	}
	var out []string
	nodes := make(map[string]*yaml.Node, len(n.Content))
	for _, s := range n.Content {
		switch {
		case s.Kind != yaml.ScalarNode:
			l.Errorf(s, subject, "a state must be a name")
		case !namePattern.MatchString(s.Value):
			l.Errorf(s, subject, "state %q must match %s", clipRule(s.Value), nameSyntax)
		case nodes[s.Value] != nil:
			l.Errorf(s, subject, "state %q is listed twice", s.Value)
		default:
			nodes[s.Value] = s
			out = append(out, s.Value)
		}
	}
	return out, nodes
}

// events returns the events of n, checking their states against states
// (nil when the states are broken: their errors are recorded already) and
// their types against the other lifecycles of the provider (declared).
func (l *loader) events(n *yaml.Node, subject string, states []string, declared map[string]int) []*LifecycleEvent {
	if !l.entries(n, subject, "events", "event type to its from and to states", "event types", maxEvents) {
		return nil
	}
	var out []*LifecycleEvent
	for _, f := range l.Fields(n, subject, nil) {
		t := f.Key.Value
		switch {
		case len(t) > maxEventTypeLen:
			l.Errorf(f.Key, subject, "event type %q is %d bytes long, more than %d", clipRule(t), len(t), maxEventTypeLen)
			continue
		case !eventTypePattern.MatchString(t):
			l.Errorf(f.Key, subject, "event type %q must match %s", clipRule(t), eventTypeSyntax)
			continue
		case declared[t] > 0:
			l.Errorf(f.Key, subject, "event type %s is already declared at line %d: a provider places each event type in one lifecycle", t, declared[t])
			continue
		}
		declared[t] = f.Key.Line
		if e := l.event(t, f.Key, f.Value, subject, states); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// event validates one event entry.
func (l *loader) event(eventType string, key, n *yaml.Node, subject string, states []string) *LifecycleEvent {
	subject += ": event " + eventType
	if n.Kind != yaml.MappingNode {
		l.Errorf(n, subject, "must be a mapping of from, to and (optionally) entity, as in {from: [new], to: succeeded}")
		return nil
	}
	before := l.Count()
	vals := l.Record(key, n, subject, eventFields, ": an event must say which states it may arrive in and which state it leads to", "from", "to")
	e := &LifecycleEvent{EventType: eventType}
	if v := vals["from"]; v != nil {
		e.From = l.eventFrom(v, subject, states)
	}
	if v := vals["to"]; v != nil && l.scalar(v, subject, "to") {
		if states != nil && !slices.Contains(states, v.Value) {
			l.Errorf(v, subject, "to names %q, which is not one of the lifecycle's states", clipRule(v.Value))
		}
		e.To = v.Value
	}
	if v := vals["entity"]; v != nil {
		e.EntityRule, e.entityRule = l.lifecycleRule(v, subject, "entity")
	}
	if l.Count() > before {
		return nil
	}
	return e
}

// eventFrom returns the states of an event's from list.
func (l *loader) eventFrom(n *yaml.Node, subject string, states []string) []string {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.Errorf(n, subject, "from must be a list of at least one state, as in [new, pending]")
		return nil
	}
	var out []string
	for _, s := range n.Content {
		switch {
		case s.Kind != yaml.ScalarNode:
			l.Errorf(s, subject, "from must list state names")
		case states != nil && !slices.Contains(states, s.Value):
			l.Errorf(s, subject, "from names %q, which is not one of the lifecycle's states", clipRule(s.Value))
		case slices.Contains(out, s.Value):
			l.Errorf(s, subject, "from lists %q twice", s.Value)
		default:
			out = append(out, s.Value)
		}
	}
	return out
}

// reachable records an error for each state of lc that no sequence of
// events leads to from the initial state: an entity can never be in it,
// so the file says something about the provider that cannot be.
func (l *loader) reachable(lc *Lifecycle, subject string, nodes map[string]*yaml.Node) {
	if len(lc.States) == 0 {
		return
	}
	initial := lc.Initial()
	for _, s := range lc.States[1:] {
		if !reachesAny(lc, initial, []string{s}) {
			l.Errorf(nodes[s], subject, "state %s is unreachable: no sequence of events leads to it from the initial state %s", s, initial)
		}
	}
}
