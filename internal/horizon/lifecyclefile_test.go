package horizon_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/horizon"
)

// lifecycleLines follow stripeLines (lines 1-10): a valid lifecycle, one
// line per element, so that line n of the file is known.
var lifecycleLines = []string{
	"    lifecycles:",                                                   // 11
	"      charge:",                                                     // 12
	"        entity: json:data.object.id",                               // 13
	"        event_type: json:type",                                     // 14
	"        states: [new, pending, succeeded, failed]",                 // 15
	"        events:",                                                   // 16
	"          charge.pending: {from: [new], to: pending}",              // 17
	"          charge.succeeded: {from: [new, pending], to: succeeded}", // 18
	"          charge.failed: {from: [new, pending], to: failed}",       // 19
	"          charge.refunded: {from: [succeeded], to: succeeded}",     // 20
	"          charge.dispute.created: {from: [succeeded], to: succeeded, entity: json:data.object.charge}", // 21
	"        source: https://docs.stripe.com/api/events/types",                                              // 22
}

// withLifecycle returns the stripe file with lifecycleLines, line n
// replaced by repl[n] (n counted in the whole file), then extra lines.
func withLifecycle(repl map[int]string, extra ...string) []byte {
	ls := slices.Concat(stripeLines, lifecycleLines)
	for n, s := range repl {
		ls[n-1] = s
	}
	return []byte(strings.Join(append(ls, extra...), "\n") + "\n")
}

func TestLoadLifecycle(t *testing.T) {
	reg, err := horizon.Load("test.yaml", withLifecycle(nil))
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	p := entry(t, reg, "stripe")
	if len(p.Lifecycles) != 1 {
		t.Fatalf("stripe has %d lifecycles, want 1", len(p.Lifecycles))
	}
	l := p.Lifecycles[0]
	if l.Name != "charge" || l.EntityRule != "json:data.object.id" || l.EventTypeRule != "json:type" ||
		!slices.Equal(l.States, []string{"new", "pending", "succeeded", "failed"}) || l.Source != "https://docs.stripe.com/api/events/types" {
		t.Errorf("lifecycle = %+v", l)
	}
	var types []string
	for _, e := range l.Events {
		types = append(types, e.EventType)
	}
	if want := []string{"charge.pending", "charge.succeeded", "charge.failed", "charge.refunded", "charge.dispute.created"}; !slices.Equal(types, want) {
		t.Errorf("events = %v, want %v in the file's order", types, want)
	}
	d := l.Events[4]
	if d.EntityRule != "json:data.object.charge" || !slices.Equal(d.Wait, []string{"new", "pending"}) {
		t.Errorf("charge.dispute.created = entity %q, wait %v; want json:data.object.charge, [new pending]", d.EntityRule, d.Wait)
	}
	pl, ok, err := p.PlaceDelivery(horizon.NewDelivery(nil, []byte(`{"type":"charge.dispute.created","data":{"object":{"id":"du_1","charge":"ch_1"}}}`)))
	if err != nil || !ok || pl.EntityID != "ch_1" {
		t.Errorf("PlaceDelivery(dispute) = %+v, %v, %v; want entity ch_1 read by the event's own rule", pl, ok, err)
	}
}

func TestLoadLifecycleRefuses(t *testing.T) {
	long := strings.Repeat("a", 256)
	var manyStates []string
	for i := range 65 {
		manyStates = append(manyStates, fmt.Sprintf("s%d", i))
	}
	tests := []struct {
		desc string
		data []byte
		want []string
	}{
		{
			desc: "unknown lifecycle field",
			data: withLifecycle(map[int]string{22: "        sauce: https://x.example"}),
			want: []string{
				"test.yaml:12: stripe lifecycle charge: source is required",
				`test.yaml:22: stripe lifecycle charge: unknown field "sauce"`,
			},
		},
		{
			desc: "unknown event field",
			data: withLifecycle(map[int]string{17: "          charge.pending: {from: [new], to: pending, when: now}"}),
			want: []string{`test.yaml:17: stripe lifecycle charge: event charge.pending: unknown field "when"`},
		},
		{
			desc: "lifecycles not a mapping",
			data: file(nil, "    lifecycles: [charge]"),
			want: []string{"test.yaml:11: stripe: lifecycles must be a mapping"},
		},
		{
			desc: "lifecycle name not matching the pattern",
			data: withLifecycle(map[int]string{12: "      Charge:"}),
			want: []string{"test.yaml:12: stripe lifecycle Charge: lifecycle name must match"},
		},
		{
			desc: "empty states",
			data: withLifecycle(map[int]string{15: "        states: []"}),
			want: []string{"test.yaml:15: stripe lifecycle charge: states must be a list of at least one state"},
		},
		{
			desc: "state listed twice",
			data: withLifecycle(map[int]string{15: "        states: [new, pending, succeeded, failed, pending]"}),
			want: []string{`test.yaml:15: stripe lifecycle charge: state "pending" is listed twice`},
		},
		{
			desc: "state not a name",
			data: withLifecycle(map[int]string{15: "        states: [new, pending, succeeded, failed, Refunded Fully]"}),
			want: []string{`test.yaml:15: stripe lifecycle charge: state "Refunded Fully" must match`},
		},
		{
			desc: "too many states",
			data: withLifecycle(map[int]string{15: "        states: [" + strings.Join(manyStates, ", ") + "]"}),
			want: []string{"test.yaml:15: stripe lifecycle charge: states lists 65 states, more than 64"},
		},
		{
			desc: "from names an unknown state",
			data: withLifecycle(map[int]string{20: "          charge.refunded: {from: [captured], to: succeeded}"}),
			want: []string{`test.yaml:20: stripe lifecycle charge: event charge.refunded: from names "captured", which is not one of the lifecycle's states`},
		},
		{
			desc: "to names an unknown state",
			data: withLifecycle(map[int]string{20: "          charge.refunded: {from: [succeeded], to: refunded}"}),
			want: []string{`test.yaml:20: stripe lifecycle charge: event charge.refunded: to names "refunded", which is not one of the lifecycle's states`},
		},
		{
			desc: "event without to leads nowhere",
			data: withLifecycle(map[int]string{20: "          charge.refunded: {from: [succeeded]}"}),
			want: []string{"test.yaml:20: stripe lifecycle charge: event charge.refunded: to is required"},
		},
		{
			desc: "event without from",
			data: withLifecycle(map[int]string{20: "          charge.refunded: {to: succeeded}"}),
			want: []string{"test.yaml:20: stripe lifecycle charge: event charge.refunded: from is required"},
		},
		{
			desc: "event with an empty from",
			data: withLifecycle(map[int]string{20: "          charge.refunded: {from: [], to: succeeded}"}),
			want: []string{"test.yaml:20: stripe lifecycle charge: event charge.refunded: from must be a list of at least one state"},
		},
		{
			desc: "from lists a state twice",
			data: withLifecycle(map[int]string{18: "          charge.succeeded: {from: [new, pending, new], to: succeeded}"}),
			want: []string{`test.yaml:18: stripe lifecycle charge: event charge.succeeded: from lists "new" twice`},
		},
		{
			desc: "event not a mapping",
			data: withLifecycle(map[int]string{20: "          charge.refunded: succeeded"}),
			want: []string{"test.yaml:20: stripe lifecycle charge: event charge.refunded: must be a mapping"},
		},
		{
			desc: "unreachable state",
			data: withLifecycle(map[int]string{15: "        states: [new, pending, succeeded, failed,", 16: "          refunded]", 17: "        events:"}),
			// charge.pending (line 17) gave way to events: so pending is unreachable too.
			want: []string{
				"test.yaml:15: stripe lifecycle charge: state pending is unreachable: no sequence of events leads to it from the initial state new",
				"test.yaml:16: stripe lifecycle charge: state refunded is unreachable",
			},
		},
		{
			desc: "state reachable only from an unreachable one",
			data: withLifecycle(map[int]string{19: "          charge.failed: {from: [pending], to: failed}", 17: "          charge.pending: {from: [failed], to: pending}"}),
			want: []string{
				"test.yaml:15: stripe lifecycle charge: state pending is unreachable",
				"test.yaml:15: stripe lifecycle charge: state failed is unreachable",
			},
		},
		{
			desc: "event type declared twice in one lifecycle",
			data: withLifecycle(map[int]string{21: "          charge.refunded: {from: [succeeded], to: failed}"}),
			want: []string{`test.yaml:21: stripe lifecycle charge: "charge.refunded" is given twice`},
		},
		{
			desc: "event type declared by two lifecycles of a provider",
			data: withLifecycle(nil,
				"      payment_intent:",
				"        entity: json:data.object.id",
				"        event_type: json:type",
				"        states: [new, succeeded]",
				"        events:",
				"          charge.succeeded: {from: [new], to: succeeded}",
				"        source: https://docs.stripe.com/api/events/types"),
			want: []string{"test.yaml:28: stripe lifecycle payment_intent: event type charge.succeeded is already declared at line 18"},
		},
		{
			desc: "event type with a space",
			data: withLifecycle(map[int]string{20: `          "charge refunded": {from: [succeeded], to: succeeded}`}),
			want: []string{`test.yaml:20: stripe lifecycle charge: event type "charge refunded" must match`},
		},
		{
			desc: "event type too long",
			data: withLifecycle(map[int]string{20: "          " + long + ": {from: [succeeded], to: succeeded}"}),
			want: []string{"test.yaml:20: stripe lifecycle charge: event type \"" + long[:120] + "… (256 bytes)\" is 256 bytes long, more than 255"},
		},
		{
			desc: "entity rule that does not parse",
			data: withLifecycle(map[int]string{13: "        entity: json:data..id"}),
			want: []string{"test.yaml:13: stripe lifecycle charge: entity: key rule"},
		},
		{
			desc: "event entity rule reading a signature",
			data: withLifecycle(map[int]string{21: "          charge.dispute.created: {from: [succeeded], to: succeeded, entity: header:Stripe-Signature}"}),
			want: []string{"test.yaml:21: stripe lifecycle charge: event charge.dispute.created: entity: key rule"},
		},
		{
			desc: "event_type rule hashing the body",
			data: withLifecycle(map[int]string{14: "        event_type: json:type | sha256"}),
			want: []string{`test.yaml:14: stripe lifecycle charge: event_type rule "json:type | sha256" hashes the body`},
		},
		{
			desc: "source not a URL",
			data: withLifecycle(map[int]string{22: "        source: the docs"}),
			want: []string{`test.yaml:22: stripe lifecycle charge: source "the docs" must be an http(s) URL`},
		},
		{
			desc: "required fields missing",
			data: withLifecycle(map[int]string{13: "", 14: ""}),
			want: []string{
				"test.yaml:12: stripe lifecycle charge: entity is required",
				"test.yaml:12: stripe lifecycle charge: event_type is required",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) { wantLoadErrors(t, "test.yaml", tc.data, tc.want) })
	}
}

func TestLoadLifecycleTooManyEvents(t *testing.T) {
	var events []string
	for i := range 257 {
		events = append(events, fmt.Sprintf("          e%d: {from: [new], to: new}", i))
	}
	data := withLifecycle(map[int]string{17: "", 18: "", 19: "", 20: "", 21: "", 22: "        source: https://x.example"}, events...)
	// events: moves after source (line 22), to line 23, and the events
	// follow it.
	data = []byte(strings.Replace(string(data), "        events:\n", "", 1))
	data = []byte(strings.Replace(string(data), "        source: https://x.example\n", "        source: https://x.example\n        events:\n", 1))
	_, err := horizon.Load("test.yaml", data)
	if err == nil || !strings.Contains(err.Error(), "test.yaml:23: stripe lifecycle charge: events declares 257 event types, more than 256") {
		t.Errorf("Load() error = %v, want the bound on events named at its line", err)
	}
}

// TestExtendsLifecycles: a provider of an extending file replaces the
// built-in one whole, lifecycles included; providers it does not name keep
// theirs.
func TestExtendsLifecycles(t *testing.T) {
	head := []string{"version: 1", "extends: builtin", "providers:"}
	stripeNoLifecycles := []string{
		"  stripe:",
		"    retry_horizon: 72h",
		"    margin: 24h",
		"    lease: 60s",
		"    key: json:id",
		"    source: https://docs.stripe.com/webhooks#retries",
		"    reviewed_on: 2026-11-01",
	}
	reg := mustLoad(t, lines(head, stripeNoLifecycles))
	if n := len(entry(t, reg, "stripe").Lifecycles); n != 0 {
		t.Errorf("stripe restated without lifecycles has %d, want 0: the entry replaces the built-in one whole", n)
	}
	if n := len(entry(t, reg, "adyen").Lifecycles); n != 1 {
		t.Errorf("adyen, not restated, has %d lifecycles, want its built-in 1", n)
	}

	reg = mustLoad(t, lines(head, stripeNoLifecycles, []string{
		"    lifecycles:",
		"      refund:",
		"        entity: json:data.object.id",
		"        event_type: json:type",
		"        states: [new, succeeded]",
		"        events:",
		"          refund.updated: {from: [new, succeeded], to: succeeded}",
		"        source: https://docs.stripe.com/api/events/types",
	}, acme))
	s := entry(t, reg, "stripe")
	if len(s.Lifecycles) != 1 || s.Lifecycles[0].Name != "refund" {
		t.Errorf("stripe lifecycles = %v, want only the file's refund", s.Lifecycles)
	}
	if _, ok := s.PlaceEvent("ch_1", "charge.refunded"); ok {
		t.Error("charge.refunded is still placed: the built-in charge lifecycle survived the file's stripe")
	}
	if n := len(entry(t, reg, "acme").Lifecycles); n != 0 {
		t.Errorf("acme has %d lifecycles, want 0", n)
	}
}
