package horizon

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets run their seed corpus (testdata/fuzz/<FuzzName>/ and the
// f.Add calls) as ordinary tests in `go test`; `go test -fuzz FuzzParseRule`
// explores further.

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"json:id", "header:X-GitHub-Delivery", "sha256", "json:a[0].b+json:c",
		"json:[0]", "header:Stripe-Signature", "json:a..b", "json:a[01]", "+", "json:é.ü",
		"header:X-Shopify-Webhook-Id | header:Shopify-Webhook-Id", "json:a+json:b|json:c|sha256",
		"json:a|", "sha256|json:a", "json:a | json:a", "header:A|B",
	} {
		f.Add(s)
	}
	deliveries := []struct {
		headers map[string]string
		body    []byte
	}{
		{nil, nil},
		{map[string]string{"x-github-delivery": "d1", "A": "1"}, []byte(`{"id":"evt_1","a":[{"b":2}],"c":"x"}`)},
		{map[string]string{"X-Id": "\x00"}, []byte(`[{"id":null},{"id":true}]`)},
		{nil, []byte(`{"id":`)},
		{map[string]string{"Shopify-Webhook-Id": "w1", "B": "2"}, []byte(`{"type":"t","eventId":"e","data":{"id":"d","sequenceNumber":3},"a":"s"}`)},
		{map[string]string{"A": "1"}, []byte(`{"a":{"b":1},"c":[],"b":"x"}`)},
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if r != nil {
				t.Fatalf("ParseRule(%q) = %v, %v; want a nil rule with the error", s, r, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRule(%q).String() = %q, want the input", s, r.String())
		}
		alts := r.Alternatives()
		if len(alts) == 0 || len(alts) > maxAlternatives {
			t.Fatalf("ParseRule(%q) has %d alternatives, want 1 to %d", s, len(alts), maxAlternatives)
		}
		if len(alts) == 1 && alts[0] != r {
			t.Fatalf("ParseRule(%q) without | is not its own alternative", s)
		}
		texts := make([]string, 0, len(alts))
		for i, a := range alts {
			if src := a.Source(); src < KeySourceHeader || src > KeySourceBodyHash {
				t.Fatalf("ParseRule(%q) alternative %q Source() = %v, want HEADER, BODY_FIELD or BODY_HASH", s, a, src)
			}
			if a.String() == "sha256" && i != len(alts)-1 {
				t.Fatalf("ParseRule(%q) accepted alternatives after sha256", s)
			}
			texts = append(texts, a.String())
		}
		if len(alts) > 1 {
			if got := strings.Split(s, "|"); len(got) != len(alts) {
				t.Fatalf("ParseRule(%q) has %d alternatives, the text %d", s, len(alts), len(got))
			}
		}
		for _, part := range strings.Split(strings.Join(texts, "+"), "+") {
			if name, ok := strings.CutPrefix(part, "header:"); ok {
				lower := strings.ToLower(name)
				if _, volatile := volatileHeaders[lower]; volatile || strings.Contains(lower, "signature") || strings.Contains(lower, "timestamp") {
					t.Fatalf("ParseRule(%q) accepted a rule reading the per-delivery header %s", s, name)
				}
			}
			if path, ok := strings.CutPrefix(part, "json:"); ok {
				steps, err := parsePath(path)
				if err != nil {
					t.Fatalf("ParseRule(%q) accepted path %q that parsePath refuses: %v", s, path, err)
				}
				if got := formatPath(steps); got != path {
					t.Fatalf("formatPath(parsePath(%q)) = %q, want the path back", path, got)
				}
			}
		}
		for _, d := range deliveries {
			got, err := deriveKey(r, NewDelivery(d.headers, d.body))
			switch {
			case err != nil:
				if !errors.Is(err, ErrMalformedBody) {
					t.Fatalf("deriveKey(%q) error = %v, want one wrapping ErrMalformedBody", s, err)
				}
			case got.Key == "" || invalidKey(got.Key) != "":
				t.Fatalf("deriveKey(%q) = %+v: not a valid key", s, got)
			case got.Fallback != (got.Rule == ""):
				t.Fatalf("deriveKey(%q) = %+v: a key falls back exactly when no alternative yields", s, got)
			case got.Fallback && (got.Source != KeySourceBodyHash || got.Key != bodyHashKey(d.body)):
				t.Fatalf("deriveKey(%q) = %+v: a fallback key is the body hash", s, got)
			case !got.Fallback && !slices.Contains(texts, got.Rule):
				t.Fatalf("deriveKey(%q) = %+v: Rule is not one of the alternatives %q", s, got, texts)
			}
			if err != nil || len(alts) == 1 {
				continue
			}
			// The first alternative that yields wins: each one before the
			// winner, tried alone, yields nothing.
			for _, a := range alts {
				if a.String() == got.Rule {
					break
				}
				alone, err := deriveKey(a, NewDelivery(d.headers, d.body))
				if err == nil && !alone.Fallback {
					t.Fatalf("deriveKey(%q) = %+v, but the earlier alternative %q yields %+v", s, got, a, alone)
				}
			}
		}
	})
}

func FuzzJSONPath(f *testing.F) {
	f.Add("id", []byte(`{"id":"evt_1"}`))
	f.Add("a.b[1]", []byte(`{"a":{"b":[0, 1.50e3, 2]}}`))
	f.Add("a", []byte(`{"a":1,"a":2}`))
	f.Add("[0].id", []byte(`[{"id":"x"}]`))
	f.Add("x", []byte(`{"x":"\u00e9\ud800"}`))
	f.Add("x", []byte(`{"x":"\ud800\u0041"}`))
	f.Add("x", []byte(`{"x":"\ud83d\ude00\\ud800"}`))
	f.Add("x", []byte("{\"x\":\"A\xff\"}"))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		steps, err := parsePath(path)
		if err != nil {
			return
		}
		r := &jsonRule{text: "json:" + path, steps: steps}
		value, found, err := r.eval(NewDelivery(nil, body))
		if !json.Valid(body) {
			if !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("eval(%q, %q) = %q, %v, %v; want ErrMalformedBody for invalid JSON", path, body, value, found, err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("eval(%q, %q) error = %v, want one wrapping ErrMalformedBody", path, body, err)
			}
			return
		}
		// A reference reading of the same path: decode everything, then
		// walk. Where the walker answers, there is no duplicate member on the
		// path, so the reference's last-wins maps agree with it.
		want, wantFound := referenceLookup(t, body, steps)
		if found != wantFound || value != want {
			t.Fatalf("eval(%q, %q) = %q, %v; the reference reads %q, %v", path, body, value, found, want, wantFound)
		}
	})
}

func referenceLookup(t *testing.T, body []byte, steps []pathStep) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("reference decode of valid JSON %q: %v", body, err)
	}
	for _, st := range steps {
		switch c := v.(type) {
		case map[string]any:
			if st.isIndex {
				t.Fatalf("walker accepted an object where %v indexes an array", st)
			}
			v = c[st.key]
		case []any:
			if !st.isIndex {
				t.Fatalf("walker accepted an array where %q names a member", st.key)
			}
			if st.index >= len(c) {
				return "", false
			}
			v = c[st.index]
		case nil:
			return "", false
		default:
			t.Fatalf("walker accepted a %T on the path", v)
		}
	}
	switch x := v.(type) {
	case string:
		return x, x != ""
	case json.Number:
		return string(x), true
	case nil:
		return "", false
	}
	t.Fatalf("walker accepted a %T as the value", v)
	return "", false
}

// FuzzLoad: any file an operator hands to `claimd providers --check` yields
// a registry or errors that name the file, never a panic; a registry it
// yields keeps the window invariants.
func FuzzLoad(f *testing.F) {
	f.Add(defaultYAML)
	f.Add([]byte("version: 1\nproviders:\n  a: {retry_horizon: 1h, margin: 1h, lease: 1s, source: 'https://x', reviewed_on: 2026-01-01}\ngroups:\n  g: [a]\n"))
	f.Add([]byte("# only a comment\n"))
	f.Add([]byte("version: 1\nproviders:\n  a: &x {}\n  b: *x\n"))
	f.Add([]byte("providers: [\n"))
	f.Add([]byte("version: 1\nproviders:\n  a:\n    retry_horizon: 1h\n    margin: 1h\n    lease: 1s\n    source: 'https://x'\n    reviewed_on: 2026-01-01\n" +
		"    lifecycles:\n      l:\n        entity: json:id\n        event_type: json:type\n        states: [a, b, c]\n" +
		"        events:\n          x: {from: [a], to: b}\n          y: {from: [b, c], to: c, entity: header:X-E}\n        source: 'https://x'\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Load("f.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("Load() error = %q, want it to name the file", err)
			}
			return
		}
		for _, p := range r.List() {
			if p.TTL <= p.RetryHorizon || p.Lease <= 0 || p.Lease > p.MaxLease || p.MaxLease > p.TTL {
				t.Fatalf("Load() accepted %s with horizon %v, ttl %v, lease %v, max_lease %v", p.Name, p.RetryHorizon, p.TTL, p.Lease, p.MaxLease)
			}
			checkLifecycles(t, p)
		}
	})
}

// checkLifecycles fails t unless every lifecycle of p is one Load may
// accept: rules parsed, states present and reachable, every event's states
// among them and its Wait apart from its From, each event type once.
func checkLifecycles(t *testing.T, p *Provider) {
	t.Helper()
	types := make(map[string]bool)
	for _, l := range p.Lifecycles {
		if l.entityRule == nil || l.eventTypeRule == nil || len(l.States) == 0 || len(l.Events) == 0 {
			t.Fatalf("Load() accepted %s lifecycle %s with rules %v, %v, states %v, %d events", p.Name, l.Name, l.entityRule, l.eventTypeRule, l.States, len(l.Events))
		}
		for _, s := range l.States[1:] {
			if !reachesAny(l, l.Initial(), []string{s}) {
				t.Fatalf("Load() accepted %s lifecycle %s with state %s unreachable", p.Name, l.Name, s)
			}
		}
		for _, e := range l.Events {
			if types[e.EventType] || (e.EntityRule != "") != (e.entityRule != nil) || len(e.From) == 0 {
				t.Fatalf("Load() accepted %s event %+v", p.Name, e)
			}
			types[e.EventType] = true
			for _, s := range slices.Concat(e.From, e.Wait, []string{e.To}) {
				if !slices.Contains(l.States, s) {
					t.Fatalf("Load() accepted %s event %s naming state %q outside %v", p.Name, e.EventType, s, l.States)
				}
			}
			for _, s := range e.Wait {
				if slices.Contains(e.From, s) {
					t.Fatalf("Load() accepted %s event %s with %s in From and Wait", p.Name, e.EventType, s)
				}
			}
		}
	}
}

// FuzzDeriveKey: the shipped rules of alternatives (Adyen's families,
// Shopify's two headers) on any body and header: never a panic, errors only
// ErrMalformedBody, and the key is that of the first alternative that yields
// alone, or the body hash when none does. The shipped lifecycle rules
// (Stripe's, Adyen's) on the same bodies: never a panic, errors only
// ErrMalformedBody, and a placement only at a valid entity id.
func FuzzDeriveKey(f *testing.F) {
	reg, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range []string{
		"adyen/java_capture-false.json", "adyen/java_transfer-updated.json", "adyen/java_tokenization-webhook-recurring-token-created.json",
		"adyen/java_configuration-accountHolder-created.json", "adyen/java_dispute-created.json", "shopify/process_test_body.events_second_subscription.json",
		"adyen/java_event-notification.json", "adyen/java_display-notification.json", "adyen/java_hmac-validation-webhook.json",
	} {
		body, err := os.ReadFile("testdata/deliveries/" + file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add("w1", body)
	}
	f.Add("", []byte(`{"type":"t","eventId":{"x":1},"data":{"id":"d","sequenceNumber":"2"}}`))
	f.Add("", []byte(`{"type":"charge.dispute.created","data":{"object":{"id":"du_1","charge":"ch_1"}}}`))
	f.Add("", []byte(`{"type":"charge.refunded","data":{"object":{"id":"ch_\u0000"}}}`))
	f.Add("w2", []byte(`{"notificationItems":[{"NotificationRequestItem":{"pspReference":"p","eventCode":"CAPTURE","success":true}}],"type":"t","data":{"id":"d"},"createdAt":"c"}`))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		for _, name := range []string{"adyen", "stripe"} {
			p, _ := reg.Lookup(name)
			pl, ok, err := p.PlaceDelivery(NewDelivery(nil, body))
			switch {
			case err != nil && !errors.Is(err, ErrMalformedBody):
				t.Fatalf("%s: PlaceDelivery(%q) error = %v, want one wrapping ErrMalformedBody", name, body, err)
			case err != nil && ok:
				t.Fatalf("%s: PlaceDelivery(%q) = placed and error %v", name, body, err)
			case ok && (invalidKey(pl.EntityID) != "" || pl.EntityID == "" || pl.Lifecycle.event(pl.Event.EventType) != pl.Event):
				t.Fatalf("%s: PlaceDelivery(%q) = %+v: not a valid placement", name, body, pl)
			}
		}
		for _, name := range []string{"adyen", "shopify"} {
			p, _ := reg.Lookup(name)
			headers := map[string]string{"shopify-webhook-id": header}
			got, err := p.DeriveKey(NewDelivery(headers, body))
			if err != nil {
				if !errors.Is(err, ErrMalformedBody) {
					t.Fatalf("%s: DeriveKey(%q) error = %v, want one wrapping ErrMalformedBody", name, body, err)
				}
				continue
			}
			if invalidKey(got.Key) != "" {
				t.Fatalf("%s: DeriveKey(%q) = %+v: not a valid key", name, body, got)
			}
			if got.Fallback {
				if got.Key != bodyHashKey(body) || got.Source != KeySourceBodyHash || got.Rule != "" {
					t.Fatalf("%s: DeriveKey(%q) = %+v: a fallback is the body hash", name, body, got)
				}
			}
			for _, a := range p.Rule.Alternatives() {
				alone, err := deriveKey(a, NewDelivery(headers, body))
				if a.String() == got.Rule {
					if err != nil || alone.Key != got.Key || alone.Source != got.Source {
						t.Fatalf("%s: DeriveKey(%q) = %+v, but its alternative %q alone = %+v, %v", name, body, got, a, alone, err)
					}
					break
				}
				if err == nil && !alone.Fallback {
					t.Fatalf("%s: DeriveKey(%q) = %+v, but the earlier alternative %q yields %+v", name, body, got, a, alone)
				}
			}
		}
	})
}
