package horizon_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
)

func builtin(t *testing.T, name string) *horizon.Provider {
	t.Helper()
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	return entry(t, reg, name)
}

// event returns the event of type eventType of p's lifecycles.
func event(t *testing.T, p *horizon.Provider, eventType string) *horizon.LifecycleEvent {
	t.Helper()
	pl, ok := p.PlaceEvent("x", eventType)
	if !ok {
		t.Fatalf("%s declares no event %s", p.Name, eventType)
	}
	return pl.Event
}

// order decides e against an entity in state, and no other event of it
// owned, by the one decision the durable tiers make
// (tiers.EntityEvent.Order) on e's graph: proceed, defer or supersede.
func order(e *horizon.LifecycleEvent, state string) string {
	switch (&tiers.EntityEvent{From: e.From, Wait: e.Wait}).Order(state, false) {
	case tiers.OutcomeAcquired:
		return "proceed"
	case tiers.OutcomeDeferred:
		return "defer"
	default:
		return "supersede"
	}
}

// TestShippedOrder: what the built-in graphs say of an event given its
// entity's state, the cases a ledger cares about.
func TestShippedOrder(t *testing.T) {
	tests := []struct {
		desc, provider, eventType, state string
		want                             string
	}{
		{"refund of a charge not seen yet waits for its success", "stripe", "charge.refunded", "new", "defer"},
		{"refund of a pending charge waits", "stripe", "charge.refunded", "pending", "defer"},
		{"refund after success proceeds", "stripe", "charge.refunded", "succeeded", "proceed"},
		{"refund of a failed charge is moot", "stripe", "charge.refunded", "failed", "supersede"},
		{"refund update after success proceeds", "stripe", "charge.refund.updated", "succeeded", "proceed"},
		{"dispute before the charge waits", "stripe", "charge.dispute.created", "new", "defer"},
		{"dispute closed after success proceeds, whatever came before", "stripe", "charge.dispute.closed", "succeeded", "proceed"},
		{"capture of an authorization not seen yet waits", "stripe", "charge.captured", "new", "defer"},
		{"charge succeeded after pending", "stripe", "charge.succeeded", "pending", "proceed"},
		{"pending after success is stale", "stripe", "charge.pending", "succeeded", "supersede"},
		{"failure after success is stale", "stripe", "charge.failed", "succeeded", "supersede"},
		{"processing after succeeded is stale", "stripe", "payment_intent.processing", "succeeded", "supersede"},
		{"processing after canceled is stale", "stripe", "payment_intent.processing", "canceled", "supersede"},
		{"payment_failed after succeeded is stale", "stripe", "payment_intent.payment_failed", "succeeded", "supersede"},
		{"succeeded after a failed attempt: the intent was paid again", "stripe", "payment_intent.succeeded", "payment_failed", "proceed"},
		{"processing of a new intent", "stripe", "payment_intent.processing", "new", "proceed"},
		{"a second processing waits for the first attempt's outcome", "stripe", "payment_intent.processing", "processing", "defer"},
		{"an older attempt's requires_action while processing waits", "stripe", "payment_intent.requires_action", "processing", "defer"},
		{"capturable after capture started waits for the outcome", "stripe", "payment_intent.amount_capturable_updated", "processing", "defer"},
		{"capturable after succeeded is stale", "stripe", "payment_intent.amount_capturable_updated", "succeeded", "supersede"},
		{"incremental authorization", "stripe", "payment_intent.amount_capturable_updated", "requires_capture", "proceed"},
		{"adyen refund before the authorisation waits", "adyen", "REFUND:true", "new", "defer"},
		{"adyen refund with automatic capture (no CAPTURE sent)", "adyen", "REFUND:true", "authorised", "proceed"},
		{"adyen capture before the authorisation waits", "adyen", "CAPTURE:true", "new", "defer"},
		{"adyen partial captures", "adyen", "CAPTURE:true", "captured", "proceed"},
		{"adyen capture of a refused payment is moot", "adyen", "CAPTURE:true", "refused", "supersede"},
		{"adyen cancellation after capture is moot", "adyen", "CANCELLATION:true", "captured", "supersede"},
		{"adyen chargeback after refunds", "adyen", "CHARGEBACK:true", "captured", "proceed"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e := event(t, builtin(t, tc.provider), tc.eventType)
			if got := order(e, tc.state); got != tc.want {
				t.Errorf("order(%s, %q) = %s, want %s (from %v, wait %v)", tc.eventType, tc.state, got, tc.want, e.From, e.Wait)
			}
		})
	}
}

// TestShippedInvariants: every built-in lifecycle is closed (its events
// name its states only), Wait and From are apart, and no event that moves
// money is ever superseded once its entity reached a state it may arrive
// in: it loops on that state.
func TestShippedInvariants(t *testing.T) {
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	moneyMovers := []string{"charge.refunded", "charge.refund.updated", "charge.dispute.created", "charge.dispute.funds_withdrawn",
		"charge.dispute.funds_reinstated", "charge.dispute.closed", "REFUND:true", "CHARGEBACK:true", "CAPTURE:true"}
	lifecycles := 0
	for _, p := range reg.List() {
		if p.IsGroup() && len(p.Lifecycles) > 0 {
			t.Errorf("group %s has lifecycles", p.Name)
		}
		for _, l := range p.Lifecycles {
			lifecycles++
			if l.Source == "" || l.EntityRule == "" || l.EventTypeRule == "" {
				t.Errorf("%s/%s: source %q, entity %q, event_type %q; want all set", p.Name, l.Name, l.Source, l.EntityRule, l.EventTypeRule)
			}
			for _, e := range l.Events {
				for _, s := range slices.Concat(e.From, e.Wait, []string{e.To}) {
					if !slices.Contains(l.States, s) {
						t.Errorf("%s/%s %s names state %q outside %v", p.Name, l.Name, e.EventType, s, l.States)
					}
				}
				for _, s := range e.Wait {
					if slices.Contains(e.From, s) {
						t.Errorf("%s/%s %s: %s is in both From and Wait", p.Name, l.Name, e.EventType, s)
					}
				}
				if slices.Contains(moneyMovers, e.EventType) && !slices.Contains(e.From, e.To) {
					t.Errorf("%s/%s %s moves money but leads out of its from states (%v → %s): a second one could be superseded",
						p.Name, l.Name, e.EventType, e.From, e.To)
				}
			}
		}
	}
	if lifecycles < 3 {
		t.Errorf("the built-in registry declares %d lifecycles, want at least Stripe's payment_intent and charge and Adyen's payment", lifecycles)
	}
}

func TestShippedWait(t *testing.T) {
	tests := []struct {
		provider, eventType string
		want                []string
	}{
		{"stripe", "charge.refunded", []string{"new", "pending"}},
		{"stripe", "charge.pending", nil},
		{"stripe", "payment_intent.succeeded", nil},
		{"stripe", "payment_intent.processing", []string{"processing"}},
		{"adyen", "REFUND:true", []string{"new"}},
	}
	for _, tc := range tests {
		e := event(t, builtin(t, tc.provider), tc.eventType)
		if diff := cmp.Diff(tc.want, e.Wait, cmpEmpty); diff != "" {
			t.Errorf("%s Wait (-want +got):\n%s", tc.eventType, diff)
		}
	}
}

// cmpEmpty compares a nil and an empty list as equal.
var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })

// TestPlaceDeliveryReal: real deliveries of Stripe (zulip's fixtures and
// the corpus) and Adyen (its SDKs' fixtures) are placed at their entity and
// event type by the built-in rules; deliveries of types no lifecycle
// declares are ordinary claims.
func TestPlaceDeliveryReal(t *testing.T) {
	tests := []struct {
		provider, file string
		// lifecycle, entity and event type; lifecycle "" when the delivery
		// belongs to no lifecycle.
		lifecycle, entity, eventType string
	}{
		{"stripe", "lifecycles/stripe/zulip/charge_succeeded__card.json", "charge", "ch_000000000000000000000000", "charge.succeeded"},
		{"stripe", "lifecycles/stripe/zulip/refund_event.json", "charge", "ch_1Gib61HLwdCOCoR71rnkccye", "charge.refund.updated"},
		{"stripe", "lifecycles/stripe/zulip/charge_dispute_created_with_pi.json", "charge", "ch_3TbG44JEe0yY0QKr0aPnlMSQ", "charge.dispute.created"},
		{"stripe", "lifecycles/stripe/zulip/charge_dispute_closed_with_pi.json", "charge", "ch_3TbG44JEe0yY0QKr0aPnlMSQ", "charge.dispute.closed"},
		{"stripe", "deliveries/stripe_payment_intent_succeeded.json", "payment_intent", "pi_3QbR7sKq2Lp9XvYz1HjKlMnO", "payment_intent.succeeded"},
		{"stripe", "deliveries/stripe/fixtures3_event.json", "", "", ""},       // plan.created
		{"stripe", "deliveries/stripe/test_webhook_dummy_v2.json", "", "", ""}, // a thin event
		{"stripe", "deliveries/stripe/test_webhook_dummy_v1.json", "", "", ""}, // no type
		{"adyen", "deliveries/adyen/java_authorisation-true.json", "payment", "123456789", "AUTHORISATION:true"},
		{"adyen", "deliveries/adyen/java_capture-true.json", "payment", "ORIGINAL_PSP", "CAPTURE:true"},
		{"adyen", "deliveries/adyen/java_refund-true.json", "payment", "ORIGINAL_PSP", "REFUND:true"},
		{"adyen", "deliveries/adyen/java_chargeback.json", "payment", "9913333333333333", "CHARGEBACK:true"},
		{"adyen", "deliveries/adyen/java_cancellation-true.json", "payment", "8313547924770610", "CANCELLATION:true"},
		{"adyen", "deliveries/adyen/node_captureFalse.json", "", "", ""},     // a failed capture moves nothing
		{"adyen", "deliveries/adyen/java_dispute-created.json", "", "", ""},  // Balance Platform
		{"adyen", "deliveries/adyen/java_transfer-updated.json", "", "", ""}, // Balance Platform
		{"paypal", "deliveries/paypal_capture_completed.json", "", "", ""},   // no lifecycles
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			pl, ok, err := builtin(t, tc.provider).PlaceDelivery(horizon.NewDelivery(nil, body))
			if err != nil {
				t.Fatalf("PlaceDelivery() error = %v", err)
			}
			if tc.lifecycle == "" {
				if ok {
					t.Errorf("PlaceDelivery() = %s %s %s, want no placement", pl.Lifecycle.Name, pl.EntityID, pl.Event.EventType)
				}
				return
			}
			if !ok {
				t.Fatalf("PlaceDelivery() = not placed, want %s %s %s", tc.lifecycle, tc.entity, tc.eventType)
			}
			got := []string{pl.Lifecycle.Name, pl.EntityID, pl.Event.EventType}
			if want := []string{tc.lifecycle, tc.entity, tc.eventType}; !slices.Equal(got, want) {
				t.Errorf("PlaceDelivery() = %v, want %v", got, want)
			}
		})
	}
}

// TestPlaceDeliveryCorpus: no real delivery of the corpus is malformed
// under the lifecycle rules of its provider.
func TestPlaceDeliveryCorpus(t *testing.T) {
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(corpusDir, "manifest.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m corpusManifest
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	placed := 0
	for _, d := range m.Deliveries {
		body, err := os.ReadFile(filepath.Join(corpusDir, d.File))
		if err != nil {
			t.Fatal(err)
		}
		pl, ok, err := entry(t, reg, d.Provider).PlaceDelivery(horizon.NewDelivery(d.Headers, body))
		if err != nil {
			t.Errorf("%s: PlaceDelivery() error = %v", d.File, err)
		}
		if ok {
			placed++
			if pl.EntityID == "" {
				t.Errorf("%s: placed at an empty entity id", d.File)
			}
		}
	}
	if placed == 0 {
		t.Error("PlaceDelivery placed no delivery of the corpus")
	}
}

func TestPlaceDeliveryMalformed(t *testing.T) {
	stripe := builtin(t, "stripe")
	tests := []struct {
		desc string
		body string
		// malformed: an error wrapping ErrMalformedBody; otherwise not placed.
		malformed bool
	}{
		{desc: "body not JSON", body: `{"type":"charge.refunded",`, malformed: true},
		{desc: "empty body", body: ``, malformed: true},
		{desc: "declared type without an entity id", body: `{"type":"charge.refunded","data":{"object":{}}}`},
		{desc: "declared type with a null entity id", body: `{"type":"charge.refunded","data":{"object":{"id":null}}}`},
		{desc: "dispute without its charge", body: `{"type":"charge.dispute.created","data":{"object":{"id":"du_1"}}}`},
		{desc: "entity id with a control character", body: `{"type":"charge.refunded","data":{"object":{"id":"ch_\u0007"}}}`, malformed: true},
		{desc: "entity id too long", body: `{"type":"charge.refunded","data":{"object":{"id":"` + strings.Repeat("c", horizon.MaxKeyLen+1) + `"}}}`, malformed: true},
		{desc: "entity id an object", body: `{"type":"charge.refunded","data":{"object":{"id":{"x":1}}}}`, malformed: true},
		{desc: "type an object", body: `{"type":{"x":1},"data":{"object":{"id":"ch_1"}}}`, malformed: true},
		{desc: "type not declared", body: `{"type":"charge.updated","data":{"object":{"id":"ch_1"}}}`},
		{desc: "type missing", body: `{"data":{"object":{"id":"ch_1"}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			pl, ok, err := stripe.PlaceDelivery(horizon.NewDelivery(nil, []byte(tc.body)))
			switch {
			case tc.malformed && !errors.Is(err, horizon.ErrMalformedBody):
				t.Errorf("PlaceDelivery() error = %v, want one wrapping ErrMalformedBody", err)
			case !tc.malformed && err != nil:
				t.Errorf("PlaceDelivery() error = %v, want nil", err)
			}
			if ok {
				t.Errorf("PlaceDelivery() = placed at %q, want no placement", pl.EntityID)
			}
			var ke *horizon.KeyError
			if errors.As(err, &ke) && len(ke.Error()) > 400 {
				t.Errorf("PlaceDelivery() error is %d bytes long: it must not echo the delivery", len(ke.Error()))
			}
		})
	}
}

func TestPlaceEvent(t *testing.T) {
	stripe := builtin(t, "stripe")
	pl, ok := stripe.PlaceEvent("ch_1", "charge.dispute.created")
	if !ok || pl.Lifecycle.Name != "charge" || pl.EntityID != "ch_1" || pl.Event.To != "succeeded" {
		t.Errorf("PlaceEvent(ch_1, charge.dispute.created) = %+v, %v; want charge ch_1", pl, ok)
	}
	if pl, ok := stripe.PlaceEvent("ch_1", "charge.updated"); ok {
		t.Errorf("PlaceEvent(ch_1, charge.updated) = %+v, want an ordinary claim", pl)
	}
	if l, ok := stripe.Lifecycle("payment_intent"); !ok || l.Initial() != "new" {
		t.Errorf("Lifecycle(payment_intent) = %v, %v; want the lifecycle, initial state new", l, ok)
	}
	if _, ok := builtin(t, "billing").PlaceEvent("ch_1", "charge.refunded"); ok {
		t.Error("the group billing placed an event: a group has no lifecycles")
	}
}

// outOfOrder is testdata/lifecycles/stripe/out_of_order/sequence.yaml.
type outOfOrder struct {
	Provider   string `yaml:"provider"`
	Deliveries []struct {
		File      string `yaml:"file"`
		Lifecycle string `yaml:"lifecycle"`
		Entity    string `yaml:"entity"`
		EventType string `yaml:"event_type"`
		State     string `yaml:"state"`
		Order     string `yaml:"order"`
		To        string `yaml:"to"`
	} `yaml:"deliveries"`
	Final []struct {
		Lifecycle string   `yaml:"lifecycle"`
		Entity    string   `yaml:"entity"`
		State     string   `yaml:"state"`
		Applied   []string `yaml:"applied"`
	} `yaml:"final"`
	Ledger map[string]int64 `yaml:"ledger"`
}

// TestOutOfOrderSequence replays the Stripe sequence of the fixture set in
// its arrival order against the built-in graphs, with entity states kept
// in a map as a durable tier keeps them, and a ledger booked only by the
// events that proceed: it ends with every event applied once, in
// lifecycle order. The same files drive the examples and the tier tests.
func TestOutOfOrderSequence(t *testing.T) {
	dir := "testdata/lifecycles/stripe/out_of_order"
	data, err := os.ReadFile(filepath.Join(dir, "sequence.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var seq outOfOrder
	if err := yaml.Unmarshal(data, &seq); err != nil {
		t.Fatal(err)
	}
	p := builtin(t, seq.Provider)
	states := map[string]string{}    // lifecycle/entity → state
	applied := map[string][]string{} // lifecycle/entity → event types
	ledger := map[string]int64{}
	for i, d := range seq.Deliveries {
		body, err := os.ReadFile(filepath.Join(dir, d.File))
		if err != nil {
			t.Fatal(err)
		}
		pl, ok, err := p.PlaceDelivery(horizon.NewDelivery(nil, body))
		if err != nil || !ok {
			t.Fatalf("delivery %d (%s): PlaceDelivery() = %v, %v", i+1, d.File, ok, err)
		}
		if got, want := []string{pl.Lifecycle.Name, pl.EntityID, pl.Event.EventType}, []string{d.Lifecycle, d.Entity, d.EventType}; !slices.Equal(got, want) {
			t.Fatalf("delivery %d (%s): placed at %v, want %v", i+1, d.File, got, want)
		}
		id := pl.Lifecycle.Name + "/" + pl.EntityID
		state, seen := states[id]
		if !seen {
			state = pl.Lifecycle.Initial()
		}
		if state != d.State {
			t.Fatalf("delivery %d (%s): entity in %s, the file says %s", i+1, d.File, state, d.State)
		}
		decided := order(pl.Event, state)
		if decided != d.Order {
			t.Fatalf("delivery %d (%s): order(%s) = %s, want %s", i+1, d.File, state, decided, d.Order)
		}
		if decided != "proceed" {
			continue
		}
		if pl.Event.To != d.To {
			t.Errorf("delivery %d (%s): leads to %s, the file says %s", i+1, d.File, pl.Event.To, d.To)
		}
		states[id] = pl.Event.To
		applied[id] = append(applied[id], pl.Event.EventType)
		book(t, ledger, body)
	}
	for _, f := range seq.Final {
		id := f.Lifecycle + "/" + f.Entity
		if states[id] != f.State || !slices.Equal(applied[id], f.Applied) {
			t.Errorf("%s ends in %s after %v, want %s after %v", id, states[id], applied[id], f.State, f.Applied)
		}
	}
	if diff := cmp.Diff(seq.Ledger, ledger); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
}

// book books a Stripe event on the ledger of its order (metadata.order_id):
// a charge's success adds its amount, a refund takes off what it refunded.
func book(t *testing.T, ledger map[string]int64, body []byte) {
	t.Helper()
	var e struct {
		Type string `json:"type"`
		Data struct {
			Object struct {
				Amount         int64             `json:"amount"`
				AmountRefunded int64             `json:"amount_refunded"`
				Metadata       map[string]string `json:"metadata"`
			} `json:"object"`
			Previous struct {
				AmountRefunded int64 `json:"amount_refunded"`
			} `json:"previous_attributes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	order := e.Data.Object.Metadata["order_id"]
	switch e.Type {
	case "charge.succeeded":
		ledger[order] += e.Data.Object.Amount
	case "charge.refunded":
		ledger[order] -= e.Data.Object.AmountRefunded - e.Data.Previous.AmountRefunded
	}
}
