package reconcile

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/horizon"
)

const pagesFile = "testdata/stripe_events_pages.json"

// builtinKey is the KeyFunc of a built-in provider, from its rule as the
// registry (and so GetProvider) has it.
func builtinKey(t *testing.T, provider string) KeyFunc {
	t.Helper()
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := reg.Lookup(provider)
	if !ok {
		t.Fatalf("no built-in provider %s", provider)
	}
	k, err := KeyRule(p.Name, p.KeyRule)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestReadStripePages reads the fixture's three list pages: every event of
// every page, newest first as Stripe lists them, keyed by its evt_ id as a
// Claim of its delivery is, with its type and created time.
func TestReadStripePages(t *testing.T) {
	raw, err := os.ReadFile(pagesFile)
	if err != nil {
		t.Fatal(err)
	}
	events, err := ReadEvents(bytes.NewReader(raw), Limits{}, builtinKey(t, "stripe"))
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's pages, decoded independently of ReadEvents.
	var want []Event
	dec := json.NewDecoder(bytes.NewReader(raw))
	for dec.More() {
		var page struct {
			Data []struct {
				ID, Type string
				Created  int64
			}
		}
		if err := dec.Decode(&page); err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Data {
			want = append(want, Event{Index: len(want) + 1, ID: e.ID, Type: e.Type, Created: time.Unix(e.Created, 0).UTC(), Key: e.ID})
		}
	}
	if len(want) != 33 {
		t.Fatalf("fixture holds %d events, want 33", len(want))
	}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("ReadEvents(%s) (-want +got):\n%s", pagesFile, diff)
	}
	// The keys are the ones claimd derives from each event as a delivery.
	reg, _ := horizon.Default()
	stripe, _ := reg.Lookup("stripe")
	var first struct {
		Data []json.RawMessage
	}
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&first); err != nil {
		t.Fatal(err)
	}
	d, err := stripe.DeriveKey(horizon.NewDelivery(map[string]string{"Stripe-Signature": "t=1,v1=x"}, first.Data[0]))
	if err != nil || d.Key != events[0].Key {
		t.Errorf("claimd derives key %q (%v) from the first event, ReadEvents %q", d.Key, err, events[0].Key)
	}
}

// TestReadShapes: the shapes of an events file that ReadEvents accepts read
// alike, and an event listed twice is kept once.
func TestReadShapes(t *testing.T) {
	e1 := `{"id":"evt_1","object":"event","type":"charge.succeeded","created":1764720000,"data":{"object":{"id":"ch_1"}}}`
	e2 := `{"id":"evt_2","object":"event","type":"charge.refunded","created":1764720060,"data":{"object":{"id":"ch_1"}}}`
	page := func(has bool, es ...string) string {
		return `{"object":"list","url":"/v1/events","has_more":` + map[bool]string{true: "true", false: "false"}[has] + `,"data":[` + strings.Join(es, ",") + `]}`
	}
	want := []Event{
		{Index: 1, ID: "evt_1", Type: "charge.succeeded", Created: time.Unix(1764720000, 0).UTC(), Key: "evt_1"},
		{Index: 2, ID: "evt_2", Type: "charge.refunded", Created: time.Unix(1764720060, 0).UTC(), Key: "evt_2"},
	}
	for _, c := range []struct{ desc, file string }{
		{"one page", page(false, e1, e2)},
		{"pages one per line", page(true, e1) + "\n" + page(false, e2) + "\n"},
		{"pages concatenated", page(true, e1) + page(false, e2)},
		{"JSONL of events", e1 + "\n" + e2 + "\n"},
		{"JSONL with CRLF and a blank line", e1 + "\r\n\r\n" + e2},
		{"overlapping pages", page(true, e1) + "\n" + page(false, e1, e2)},
		{"pages and events mixed", page(true, e1) + "\n" + e2},
	} {
		got, err := ReadEvents(strings.NewReader(c.file), Limits{}, builtinKey(t, "stripe"))
		if err != nil {
			t.Errorf("%s: ReadEvents: %v", c.desc, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: ReadEvents (-want +got):\n%s", c.desc, diff)
		}
	}
}

// TestReadAdyen: Adyen documents no export format for its webhook event
// log (a Customer Area page), so its events come as JSONL: a notification
// as delivered, or its NotificationRequestItem on its own. Both are keyed
// as claimd keys the delivery (pspReference:eventCode:success), and named
// by pspReference and eventCode.
func TestReadAdyen(t *testing.T) {
	item := `{"amount":{"currency":"EUR","value":1000},"eventCode":"AUTHORISATION","eventDate":"2026-11-30T10:00:00+01:00","merchantAccountCode":"ShopNL","merchantReference":"order-1","pspReference":"QFQTPCQ8HXSKGK82","success":"true"}`
	notification := `{"live":"false","notificationItems":[{"NotificationRequestItem":` + strings.Replace(item, "AUTHORISATION", "CAPTURE", 1) + `}]}`
	got, err := ReadEvents(strings.NewReader(item+"\n"+notification+"\n"), Limits{}, builtinKey(t, "adyen"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	want := []Event{
		{Index: 1, ID: "QFQTPCQ8HXSKGK82", Type: "AUTHORISATION", Created: at, Key: "QFQTPCQ8HXSKGK82:AUTHORISATION:true"},
		{Index: 2, ID: "QFQTPCQ8HXSKGK82", Type: "CAPTURE", Created: at, Key: "QFQTPCQ8HXSKGK82:CAPTURE:true"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadEvents(Adyen JSONL) (-want +got):\n%s", diff)
	}
}

// TestReadRefuses: what is not an events file is refused with where and
// why, and the bounds hold.
func TestReadRefuses(t *testing.T) {
	e := `{"id":"evt_1","object":"event","type":"x","created":1}`
	for _, c := range []struct {
		desc, file string
		lim        Limits
		provider   string
		want       string
		is         error
	}{
		{"truncated", e + "\n" + `{"id":"evt_2",`, Limits{}, "stripe", "JSON value 2", nil},
		{"an array", `[` + e + `]`, Limits{}, "stripe", "not an array", nil},
		{"a page without data", `{"object":"list","has_more":false}`, Limits{}, "stripe", `without "data"`, nil},
		{"an event without id", `{"object":"list","data":[{"object":"event","type":"x"}]}`, Limits{}, "stripe", "data[0]", ErrNoKey},
		{"an event that is no object", `{"object":"list","data":[7]}`, Limits{}, "stripe", "must be a JSON object", nil},
		{"a header rule", e, Limits{}, "github", "X-GitHub-Delivery", ErrNoKey},
		{"too many events", e + e + e, Limits{MaxEvents: 2}, "stripe", "more than 2 events", ErrTooLarge},
		{"too many bytes", strings.Repeat(" ", 100) + e, Limits{MaxBytes: 64}, "stripe", "more than 64 bytes", ErrTooLarge},
	} {
		_, err := ReadEvents(strings.NewReader(c.file), c.lim, builtinKey(t, c.provider))
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: ReadEvents = %v, want an error containing %q (is %v)", c.desc, err, c.want, c.is)
		}
	}
}

// TestKeyRuleRefuses: a provider without a rule (a group of members that
// key differently) or with a rule that does not parse cannot be reconciled.
func TestKeyRuleRefuses(t *testing.T) {
	for _, rule := range []string{"", "header:Stripe-Signature", "json:"} {
		if _, err := KeyRule("p", rule); err == nil {
			t.Errorf("KeyRule(%q) = nil error, want one", rule)
		}
	}
}

// TestFilterTypes: exact types and prefixes with *, in any number.
func TestFilterTypes(t *testing.T) {
	events := []Event{{Key: "1", Type: "charge.succeeded"}, {Key: "2", Type: "charge.refund.updated"}, {Key: "3", Type: "payment_intent.succeeded"}, {Key: "4", Type: "customer.created"}}
	for _, c := range []struct {
		patterns []string
		want     string
	}{
		{nil, "1234"},
		{[]string{"*"}, "1234"},
		{[]string{"charge.*"}, "12"},
		{[]string{"charge.succeeded", "payment_intent.*"}, "13"},
		{[]string{"charge"}, ""},
		{[]string{"charge.refund.*", "customer.created"}, "24"},
	} {
		got := ""
		for _, e := range FilterTypes(events, c.patterns) {
			got += e.Key
		}
		if got != c.want {
			t.Errorf("FilterTypes(%q) kept %q, want %q", c.patterns, got, c.want)
		}
	}
}
