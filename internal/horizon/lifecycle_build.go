package horizon

import (
	"fmt"
)

// NewLifecycle builds a Lifecycle from Go values, for programs and tests
// that declare one without a providers file: it parses the rules and
// computes each event's Wait states as the loader does. It checks only what
// it needs to build a usable lifecycle (rules that parse, at least one
// state, events whose states are declared); the file loader's validation
// (unreachable states, names, sources) is stricter. The events are the
// caller's and are modified (their Wait and parsed rule are set).
func NewLifecycle(name, entityRule, eventTypeRule string, states []string, events ...*LifecycleEvent) (*Lifecycle, error) {
	l := &Lifecycle{Name: name, EntityRule: entityRule, EventTypeRule: eventTypeRule, States: states, Events: events}
	if len(states) == 0 {
		return nil, fmt.Errorf("lifecycle %s: no states", name)
	}
	var err error
	if l.entityRule, err = ParseRule(entityRule); err != nil {
		return nil, fmt.Errorf("lifecycle %s: entity rule: %w", name, err)
	}
	if l.eventTypeRule, err = ParseRule(eventTypeRule); err != nil {
		return nil, fmt.Errorf("lifecycle %s: event type rule: %w", name, err)
	}
	known := map[string]bool{}
	for _, s := range states {
		known[s] = true
	}
	for _, e := range events {
		for _, s := range append(append([]string{}, e.From...), e.To) {
			if !known[s] {
				return nil, fmt.Errorf("lifecycle %s: event %s names unknown state %q", name, e.EventType, s)
			}
		}
		if e.EntityRule != "" {
			if e.entityRule, err = ParseRule(e.EntityRule); err != nil {
				return nil, fmt.Errorf("lifecycle %s: event %s: entity rule: %w", name, e.EventType, err)
			}
		}
	}
	for _, e := range events {
		e.Wait = waitStates(l, e.From)
	}
	return l, nil
}

// NewRegistry returns a registry of the given providers, for programs and
// tests that build providers in Go. The providers are shared from then on
// and must not be modified.
func NewRegistry(providers ...*Provider) *Registry {
	return newRegistry(1, providers)
}
