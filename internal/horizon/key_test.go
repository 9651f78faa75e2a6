package horizon_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/horizon"
)

func delivery(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "deliveries", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hashKey(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func lookup(t testing.TB, r *horizon.Registry, name string) *horizon.Provider {
	t.Helper()
	p, ok := r.Lookup(name)
	if !ok {
		t.Fatalf("Lookup(%q) found nothing", name)
	}
	return p
}

// TestDeriveKeyRetriesShareAKey sends each production provider two
// deliveries of one event, as the provider retries it: the per-attempt
// headers (signatures, timestamps) differ, the key must not.
func TestDeriveKeyRetriesShareAKey(t *testing.T) {
	r := mustDefault(t)
	stripe := delivery(t, "stripe_payment_intent_succeeded.json")
	github := delivery(t, "github_push.json")
	shopify := delivery(t, "shopify_orders_paid.json")
	adyen := delivery(t, "adyen_authorisation.json")
	stdwh := delivery(t, "standard_webhooks_invoice_paid.json")
	square := delivery(t, "square_payment_updated.json")
	paypal := delivery(t, "paypal_capture_completed.json")
	braintree := []byte("bt_signature=4ndnrpp3sd5f9d5x%7Cc2b1a9ec7b8d&bt_payload=PG5vdGlmaWNhdGlvbj48a2luZD5jaGVjazwva2luZD48L25vdGlmaWNhdGlvbj4%3D%0A")
	twilio := []byte("AccountSid=AC00000000000000000000000000000000&MessageSid=SM1f0e8ae6ade43cb3c0ce4525424e404f&MessageStatus=delivered")

	tests := []struct {
		desc     string
		provider string
		first    map[string]string
		retry    map[string]string
		body     []byte
		wantKey  string
		wantSrc  horizon.KeySource
	}{
		{
			desc:     "stripe: Stripe-Signature differs only in t=",
			provider: "stripe",
			first:    map[string]string{"Stripe-Signature": "t=1762000124,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd", "Content-Type": "application/json"},
			retry:    map[string]string{"Stripe-Signature": "t=1762003724,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd", "Content-Type": "application/json"},
			body:     stripe,
			wantKey:  "evt_3QbR7sKq2Lp9XvYz1aBcDeFg",
			wantSrc:  horizon.KeySourceBodyField,
		},
		{
			desc:     "github: X-GitHub-Delivery survives a manual redelivery",
			provider: "github",
			first:    map[string]string{"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c"},
			retry:    map[string]string{"x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "x-github-event": "push", "x-hub-signature-256": "sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c"},
			body:     github,
			wantKey:  "72d3162e-cc78-11e3-81ab-4c9367dc0958",
			wantSrc:  horizon.KeySourceHeader,
		},
		{
			desc:     "shopify: X-Shopify-Webhook-Id, whatever the HMAC and trigger time",
			provider: "shopify",
			first:    map[string]string{"X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "X-Shopify-Hmac-Sha256": "XWmrwMey6OsLMeiZKwP4FppHH3cmAiiJJAweH5Jo4bM=", "X-Shopify-Topic": "orders/paid"},
			retry:    map[string]string{"X-SHOPIFY-WEBHOOK-ID": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "X-Shopify-Hmac-Sha256": "XWmrwMey6OsLMeiZKwP4FppHH3cmAiiJJAweH5Jo4bM=", "X-Shopify-Topic": "orders/paid"},
			body:     shopify,
			wantKey:  "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
			wantSrc:  horizon.KeySourceHeader,
		},
		{
			desc:     "adyen: pspReference joined with eventCode and success",
			provider: "adyen",
			first:    map[string]string{"Content-Type": "application/json"},
			retry:    map[string]string{"Content-Type": "application/json", "Authorization": "Basic d2ViaG9vazpzZWNyZXQ="},
			body:     adyen,
			wantKey:  "QFQTPCQ8HXSKGK82:AUTHORISATION:true",
			wantSrc:  horizon.KeySourceBodyField,
		},
		{
			desc:     "standard webhooks: webhook-id, whatever the timestamp and signature",
			provider: "standard-webhooks",
			first:    map[string]string{"webhook-id": "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "webhook-timestamp": "1762000124", "webhook-signature": "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
			retry:    map[string]string{"Webhook-Id": "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "Webhook-Timestamp": "1762000429", "Webhook-Signature": "v1,uJGpvw6ykjXOd1A8PWSS0PZX2cDnNKkyyW5KiH0dTPk="},
			body:     stdwh,
			wantKey:  "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
			wantSrc:  horizon.KeySourceHeader,
		},
		{
			desc:     "square: event_id in the body",
			provider: "square",
			first:    map[string]string{"X-Square-Hmacsha256-Signature": "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og="},
			retry:    map[string]string{"X-Square-Hmacsha256-Signature": "2kRE5qRU2tR+tBGlDwMEw2avJ7QM4ikPYD/PJ3bd9Og="},
			body:     square,
			wantKey:  "13b867cf-db3d-4b1c-90b6-2f32a9d78124",
			wantSrc:  horizon.KeySourceBodyField,
		},
		{
			desc:     "paypal: event id in the body, whatever the transmission",
			provider: "paypal",
			first:    map[string]string{"Paypal-Transmission-Id": "69cd13f0-d67a-11e5-baa3-778b53f4ae55", "Paypal-Transmission-Time": "2026-10-30T13:55:25Z"},
			retry:    map[string]string{"Paypal-Transmission-Id": "6f2a4b10-d67c-11e5-baa3-778b53f4ae55", "Paypal-Transmission-Time": "2026-10-30T14:25:25Z"},
			body:     paypal,
			wantKey:  "WH-58D329510W468432D-8HN650336L201105X",
			wantSrc:  horizon.KeySourceBodyField,
		},
		{
			desc:     "braintree: the form-encoded signed payload, hashed",
			provider: "braintree",
			first:    map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			retry:    map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			body:     braintree,
			wantKey:  hashKey(braintree),
			wantSrc:  horizon.KeySourceBodyHash,
		},
		{
			desc:     "twilio: the idempotency token, whatever the signature",
			provider: "twilio",
			first:    map[string]string{"I-Twilio-Idempotency-Token": "c0ffee00-1b2c-4d5e-8f90-a1b2c3d4e5f6", "X-Twilio-Signature": "RSOYDt4T1cUTdK1PDd93/VVr8B8="},
			retry:    map[string]string{"i-twilio-idempotency-token": "c0ffee00-1b2c-4d5e-8f90-a1b2c3d4e5f6", "X-Twilio-Signature": "RSOYDt4T1cUTdK1PDd93/VVr8B8="},
			body:     twilio,
			wantKey:  "c0ffee00-1b2c-4d5e-8f90-a1b2c3d4e5f6",
			wantSrc:  horizon.KeySourceHeader,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			p := lookup(t, r, tc.provider)
			for i, h := range []map[string]string{tc.first, tc.retry} {
				got, err := p.DeriveKey(horizon.NewDelivery(h, tc.body))
				if err != nil {
					t.Fatalf("delivery %d: DeriveKey() error = %v", i, err)
				}
				if got.Key != tc.wantKey || got.Source != tc.wantSrc {
					t.Errorf("delivery %d: DeriveKey() = %q, %v; want %q, %v", i, got.Key, got.Source, tc.wantKey, tc.wantSrc)
				}
			}
		})
	}
}

// rulesFile registers one provider per rule shape, for the edge cases.
const rulesFile = `version: 1
providers:
  byheader:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: header:X-Event-Id
    source: https://example.com
    reviewed_on: 2026-11-01
  byid:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: json:id
    source: https://example.com
    reviewed_on: 2026-11-01
  byitem:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: json:items[1].ref
    source: https://example.com
    reviewed_on: 2026-11-01
  byjoin:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: header:X-Kind+json:a.id
    source: https://example.com
    reviewed_on: 2026-11-01
  byjoinedheaders:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: header:X-Account+header:X-Event-Id
    source: https://example.com
    reviewed_on: 2026-11-01
  nokey:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    source: https://example.com
    reviewed_on: 2026-11-01
  alsobyid:
    retry_horizon: 2h
    margin: 1h
    lease: 60s
    key: json:id
    source: https://example.com
    reviewed_on: 2026-11-01
  byalt:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: header:X-Webhook-Id | header:Webhook-Id
    source: https://example.com
    reviewed_on: 2026-11-01
  byfamily:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: json:items[0].ref+json:items[0].code|json:type+json:eventId|json:type+json:data.id
    source: https://example.com
    reviewed_on: 2026-11-01
  hashlast:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    key: header:X-Id | sha256
    source: https://example.com
    reviewed_on: 2026-11-01
groups:
  mixed: [byheader, byid]
  ids: [byid, alsobyid]
`

func TestDeriveKey(t *testing.T) {
	r, err := horizon.Load("rules.yaml", []byte(rulesFile))
	if err != nil {
		t.Fatalf("Load() error = %v", err)
	}
	long := strings.Repeat("x", horizon.MaxKeyLen+1)
	tests := []struct {
		desc     string
		provider string
		headers  map[string]string
		body     string
		wantKey  string
		wantSrc  horizon.KeySource
		wantErr  error  // sentinel, or nil
		wantMsg  string // prefix of the error message
		wantRule string // the alternative that yields; default: the provider's rule, or none for BODY_HASH
	}{
		{
			desc: "header matched case-insensitively", provider: "byheader",
			headers: map[string]string{"x-EVENT-id": "ev_1"}, body: "{}",
			wantKey: "ev_1", wantSrc: horizon.KeySourceHeader,
		},
		{
			desc: "header value trimmed", provider: "byheader",
			headers: map[string]string{"X-Event-Id": "  ev_1\t"}, body: "{}",
			wantKey: "ev_1", wantSrc: horizon.KeySourceHeader,
		},
		{
			desc: "header absent: body hash", provider: "byheader",
			headers: map[string]string{"X-Other": "1"}, body: `{"id":"ev_1"}`,
			wantKey: hashKey([]byte(`{"id":"ev_1"}`)), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "header empty: body hash", provider: "byheader",
			headers: map[string]string{"X-Event-Id": " "}, body: "payload",
			wantKey: hashKey([]byte("payload")), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "header given twice with different values", provider: "byheader",
			headers: map[string]string{"X-Event-Id": "ev_1", "x-event-id": "ev_2"}, body: "{}",
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule header:X-Event-Id: header X-Event-Id is given twice with different values",
		},
		{
			desc: "header given twice with one value", provider: "byheader",
			headers: map[string]string{"X-Event-Id": "ev_1", "x-event-id": "ev_1"}, body: "{}",
			wantKey: "ev_1", wantSrc: horizon.KeySourceHeader,
		},
		{
			desc: "header absent and body empty: nothing to hash", provider: "byheader",
			headers: nil, body: "",
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule header:X-Event-Id: no value under the rule and the body is empty",
		},
		{
			desc: "string field", provider: "byid",
			body:    `{"object":"event","id":"evt_1"}`,
			wantKey: "evt_1", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "string field with escapes", provider: "byid",
			body:    `{"id":"evt_\u00e9\/1"}`,
			wantKey: "evt_é/1", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "number field rendered as written", provider: "byid",
			body:    `{"id": 1.50e3}`,
			wantKey: "1.50e3", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "number beyond float64 precision kept exactly", provider: "byid",
			body:    `{"id":820982911946154508123}`,
			wantKey: "820982911946154508123", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "field absent: body hash", provider: "byid",
			body:    `{"object":"event"}`,
			wantKey: hashKey([]byte(`{"object":"event"}`)), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "field null: body hash", provider: "byid",
			body:    `{"id":null}`,
			wantKey: hashKey([]byte(`{"id":null}`)), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "field empty: body hash", provider: "byid",
			body:    `{"id":""}`,
			wantKey: hashKey([]byte(`{"id":""}`)), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "nested field of the same name is not the field", provider: "byid",
			body:    `{"data":{"id":"pi_1"}}`,
			wantKey: hashKey([]byte(`{"data":{"id":"pi_1"}}`)), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "malformed JSON names the rule", provider: "byid",
			body:    `{"id":"evt_1",`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: body is not valid JSON: ",
		},
		{
			desc: "truncated body after the field is still malformed", provider: "byid",
			body:    `{"id":"evt_1","data":{"object":`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: body is not valid JSON: ",
		},
		{
			desc: "trailing garbage is malformed", provider: "byid",
			body:    `{"id":"evt_1"} {"id":"evt_2"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: body is not valid JSON: ",
		},
		{
			desc: "empty body with a json rule is malformed", provider: "byid",
			body:    "",
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: body is not valid JSON: ",
		},
		{
			desc: "object where the key should be", provider: "byid",
			body:    `{"id":{"value":"evt_1"}}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: id is an object, want a string or a number",
		},
		{
			desc: "boolean where the key should be", provider: "byid",
			body:    `{"id":true}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: id is a boolean, want a string or a number",
		},
		{
			desc: "body an array where an object is expected", provider: "byid",
			body:    `[{"id":"evt_1"}]`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: the body is an array, want an object",
		},
		{
			desc: "member named twice on the path", provider: "byid",
			body:    `{"id":"evt_1","id":"evt_2"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: `key rule json:id: the body has member "id" twice`,
		},
		{
			desc: "value over the key length bound", provider: "byid",
			body:    `{"id":"` + long + `"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: value is 256 bytes long, more than 255",
		},
		{
			desc: "value with a control character", provider: "byid",
			body:    `{"id":"evt\n1"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: value has a control character (U+000A)",
		},
		{
			desc: "array index", provider: "byitem",
			body:    `{"items":[{"ref":"r0"},{"skip":[1,{"ref":"no"}],"ref":"r1"},{"ref":"r2"}]}`,
			wantKey: "r1", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "array index out of range: body hash", provider: "byitem",
			body:    `{"items":[{"ref":"r0"}]}`,
			wantKey: hashKey([]byte(`{"items":[{"ref":"r0"}]}`)), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "object where the path indexes an array", provider: "byitem",
			body:    `{"items":{"1":{"ref":"r1"}}}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:items[1].ref: items is an object, want an array",
		},
		{
			desc: "joined body field and header", provider: "byjoin",
			headers: map[string]string{"x-kind": "refund"}, body: `{"a":{"id":"tr_9"}}`,
			wantKey: "refund:tr_9", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "joined rule with a part absent: body hash", provider: "byjoin",
			body:    `{"a":{"id":"tr_9"}}`,
			wantKey: hashKey([]byte(`{"a":{"id":"tr_9"}}`)), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "joined rule reports a malformed body even when a header part is absent", provider: "byjoin",
			body:    `{"a":`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:a.id: body is not valid JSON: ",
		},
		{
			desc: "joined headers", provider: "byjoinedheaders",
			headers: map[string]string{"X-Account": "acct_1", "X-Event-Id": "ev_1"},
			wantKey: "acct_1:ev_1", wantSrc: horizon.KeySourceHeader,
		},
		{
			desc: "alternatives: the first that yields wins", provider: "byalt",
			headers: map[string]string{"webhook-id": "w2", "x-webhook-id": "w1"}, body: "{}",
			wantKey: "w1", wantSrc: horizon.KeySourceHeader, wantRule: "header:X-Webhook-Id",
		},
		{
			desc: "alternatives: a later one yields when the first is absent", provider: "byalt",
			headers: map[string]string{"Webhook-Id": "w2"}, body: "{}",
			wantKey: "w2", wantSrc: horizon.KeySourceHeader, wantRule: "header:Webhook-Id",
		},
		{
			desc: "alternatives: none yields, body hash", provider: "byalt",
			headers: map[string]string{"X-Other": "1"}, body: "payload",
			wantKey: hashKey([]byte("payload")), wantSrc: horizon.KeySourceBodyHash,
		},
		{
			desc: "families: the classic shape", provider: "byfamily",
			body:    `{"items":[{"ref":"r1","code":"CAPTURE"}],"type":"x","data":{"id":"d"}}`,
			wantKey: "r1:CAPTURE", wantSrc: horizon.KeySourceBodyField, wantRule: "json:items[0].ref+json:items[0].code",
		},
		{
			desc: "families: a family selected by the presence of its field", provider: "byfamily",
			body:    `{"type":"token.created","eventId":"E1","data":{"id":"D1"}}`,
			wantKey: "token.created:E1", wantSrc: horizon.KeySourceBodyField, wantRule: "json:type+json:eventId",
		},
		{
			desc: "families: a part absent passes the alternative over", provider: "byfamily",
			body:    `{"type":"transfer.updated","data":{"id":"D1"}}`,
			wantKey: "transfer.updated:D1", wantSrc: horizon.KeySourceBodyField, wantRule: "json:type+json:data.id",
		},
		{
			desc: "families: another family's shape passes the alternative over", provider: "byfamily",
			body:    `{"items":{"ref":"r1"},"type":"transfer.updated","data":{"id":"D1"}}`,
			wantKey: "transfer.updated:D1", wantSrc: horizon.KeySourceBodyField, wantRule: "json:type+json:data.id",
		},
		{
			desc: "families: a wrong shape is an error when no alternative yields", provider: "byfamily",
			body:    `{"items":{"ref":"r1"}}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:items[0].ref: items is an object, want an array",
		},
		{
			desc: "families: a body that is not JSON is malformed under every alternative", provider: "byfamily",
			body:    `{"type":"x","eventId":`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:items[0].ref: body is not valid JSON",
		},
		{
			desc: "families: an invalid value ends the search", provider: "byfamily",
			body:    `{"items":[{"ref":"r\u0001","code":"C"}],"type":"x","eventId":"E"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:items[0].ref+json:items[0].code: value has a control character",
		},
		{
			desc: "a declared sha256 alternative is no fallback", provider: "hashlast",
			body:    "payload",
			wantKey: hashKey([]byte("payload")), wantSrc: horizon.KeySourceBodyHash, wantRule: "sha256",
		},
		{
			desc: "a declared sha256 alternative with an empty body", provider: "hashlast",
			body:    "",
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule header:X-Id | sha256: no value under the rule and the body is empty",
		},
		{
			desc: "provider without a rule", provider: "nokey",
			body:    `{"id":"evt_1"}`,
			wantErr: horizon.ErrNoKeyRule, wantMsg: "no key rule: provider nokey derives no key from a delivery; send event_id",
		},
		// A key is the body's bytes as sent: invalid UTF-8 is not replaced
		// by U+FFFD (which made "A\xff" and "A\xfe" one key), it is refused.
		{
			desc: "json value with an invalid UTF-8 byte", provider: "byid",
			body:    "{\"id\":\"A\xff\"}",
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: id is not valid UTF-8",
		},
		{
			desc: "json value with another invalid UTF-8 byte", provider: "byid",
			body:    "{\"id\":\"A\xfe\"}",
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: id is not valid UTF-8",
		},
		{
			desc: "json value with an escaped lone surrogate", provider: "byid",
			body:    `{"id":"A\ud800"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: id is not valid UTF-8",
		},
		{
			desc: "json value with an escaped low surrogate first", provider: "byid",
			body:    `{"id":"A\udc00\ud800"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: id is not valid UTF-8",
		},
		{
			desc: "json value with a high surrogate before another escape", provider: "byid",
			body:    `{"id":"A\ud800\u0041"}`,
			wantErr: horizon.ErrMalformedBody, wantMsg: "key rule json:id: id is not valid UTF-8",
		},
		{
			desc: "json value with an escaped backslash before u", provider: "byid",
			body:    `{"id":"A\\ud800"}`,
			wantKey: `A\ud800`, wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "json value with an escaped surrogate pair", provider: "byid",
			body:    `{"id":"A\ud83d\ude00"}`,
			wantKey: "A\U0001F600", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "json value with U+FFFD as sent", provider: "byid",
			body:    "{\"id\":\"A\\ufffd\uFFFD\"}",
			wantKey: "A\uFFFD\uFFFD", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "invalid UTF-8 elsewhere in the body is not the key's business", provider: "byid",
			body:    "{\"id\":\"A\",\"note\":\"\xff\"}",
			wantKey: "A", wantSrc: horizon.KeySourceBodyField,
		},
		{
			desc: "group whose members' rules differ", provider: "mixed",
			body:    `{"id":"evt_1"}`,
			wantErr: horizon.ErrNoKeyRule, wantMsg: "no key rule: group mixed: its members derive keys by different rules",
		},
		{
			desc: "group whose members share a rule", provider: "ids",
			body:    `{"id":"evt_1"}`,
			wantKey: "evt_1", wantSrc: horizon.KeySourceBodyField,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			p := lookup(t, r, tc.provider)
			got, err := p.DeriveKey(horizon.NewDelivery(tc.headers, []byte(tc.body)))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.HasPrefix(err.Error(), tc.wantMsg) {
					t.Fatalf("DeriveKey(%q) = %+v, %v; want error %v starting %q", tc.body, got, err, tc.wantErr, tc.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("DeriveKey(%q) error = %v", tc.body, err)
			}
			if got.Key != tc.wantKey || got.Source != tc.wantSrc {
				t.Errorf("DeriveKey(%q) = %q, %v; want %q, %v", tc.body, got.Key, got.Source, tc.wantKey, tc.wantSrc)
			}
			wantRule := tc.wantRule
			if wantRule == "" && tc.wantSrc != horizon.KeySourceBodyHash {
				wantRule = p.KeyRule
			}
			if wantFallback := wantRule == ""; got.Fallback != wantFallback || got.Rule != wantRule {
				t.Errorf("DeriveKey(%q) Rule, Fallback = %q, %v; want %q, %v", tc.body, got.Rule, got.Fallback, wantRule, wantFallback)
			}
		})
	}
}

func TestKeyErrorCarriesTheRule(t *testing.T) {
	p := lookup(t, mustDefault(t), "adyen")
	_, err := p.DeriveKey(horizon.NewDelivery(nil, []byte(`{"notificationItems":[`)))
	var ke *horizon.KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("DeriveKey() error = %v, want a *KeyError", err)
	}
	if want := "json:notificationItems[0].NotificationRequestItem.pspReference"; ke.Rule != want {
		t.Errorf("KeyError.Rule = %q, want %q (the part that read the body)", ke.Rule, want)
	}
	if !errors.Is(err, horizon.ErrMalformedBody) {
		t.Errorf("DeriveKey() error = %v, want it to wrap ErrMalformedBody", err)
	}
}

func TestKeySourceString(t *testing.T) {
	tests := []struct {
		src  horizon.KeySource
		want string
	}{
		{horizon.KeySourceUnspecified, "UNSPECIFIED"},
		{horizon.KeySourceEventID, "EVENT_ID"},
		{horizon.KeySourceHeader, "HEADER"},
		{horizon.KeySourceBodyField, "BODY_FIELD"},
		{horizon.KeySourceBodyHash, "BODY_HASH"},
		{horizon.KeySource(9), "KeySource(9)"},
	}
	for _, tc := range tests {
		if got := tc.src.String(); got != tc.want {
			t.Errorf("KeySource(%d).String() = %q, want %q", tc.src, got, tc.want)
		}
	}
}

// TestDeriveKeyAdyenFamilies: the families Adyen added to its rule for the
// Terminal API, lone notification items, top-ups, relayed requests and
// disputes are each keyed by their own alternative, and what may change
// between two sends of one event (a field Adyen adds, a queue timestamp the
// rule does not read) leaves the key as it was.
func TestDeriveKeyAdyenFamilies(t *testing.T) {
	p := lookup(t, mustDefault(t), "adyen")
	const (
		event     = "json:SaleToPOIRequest.MessageHeader.POIID+json:SaleToPOIRequest.EventNotification.EventToNotify+json:SaleToPOIRequest.EventNotification.TimeStamp"
		display   = "json:SaleToPOIRequest.MessageHeader.POIID+json:SaleToPOIRequest.MessageHeader.ServiceID+json:SaleToPOIRequest.MessageHeader.DeviceID"
		classic   = "json:notificationItems[0].NotificationRequestItem.pspReference+json:notificationItems[0].NotificationRequestItem.eventCode+json:notificationItems[0].NotificationRequestItem.success"
		item      = "json:pspReference+json:eventCode+json:success"
		relayed   = "json:type+json:id"
		dispute   = "json:type+json:data.id+json:data.status"
		createdAt = "json:type+json:data.id+json:data.creationDate"
		queued    = "json:type+json:data.id+json:timestamp"
	)
	tests := []struct {
		desc     string
		bodies   []string // sends of one event: all must derive wantKey
		wantKey  string
		wantRule string
	}{
		{
			desc: "an event notification about a request is an event, not a display request",
			bodies: []string{
				`{"SaleToPOIRequest":{"EventNotification":{"EventToNotify":"Reject","TimeStamp":"2026-11-02T10:00:00.000Z"},"MessageHeader":{"POIID":"P400-1","ServiceID":"S1","DeviceID":"D1","MessageCategory":"Event"}}}`,
				`{"SaleToPOIRequest":{"EventNotification":{"EventToNotify":"Reject","TimeStamp":"2026-11-02T10:00:00.000Z","EventDetails":"added"},"MessageHeader":{"POIID":"P400-1","ServiceID":"S1","DeviceID":"D1","MessageCategory":"Event"}}}`,
			},
			wantKey: "P400-1:Reject:2026-11-02T10:00:00.000Z", wantRule: event,
		},
		{
			desc: "a display request is its terminal, its transaction's ServiceID and its DeviceID, whatever its ReferenceID holds",
			bodies: []string{
				`{"SaleToPOIRequest":{"DisplayRequest":{"DisplayOutput":[{"OutputContent":{"PredefinedContent":{"ReferenceID":"event=PIN_ENTERED"}}}]},"MessageHeader":{"POIID":"P400-1","ServiceID":"S1","DeviceID":"D2","MessageCategory":"Display"}}}`,
				`{"SaleToPOIRequest":{"DisplayRequest":{"DisplayOutput":[{"OutputContent":{"PredefinedContent":{"ReferenceID":"event=PIN_ENTERED&added=1"}}}]},"MessageHeader":{"POIID":"P400-1","ServiceID":"S1","DeviceID":"D2","MessageCategory":"Display"}}}`,
			},
			wantKey: "P400-1:S1:D2", wantRule: display,
		},
		{
			desc:    "a notification item on its own has the key it has in its notification",
			bodies:  []string{`{"pspReference":"PSP1","eventCode":"CAPTURE","success":"false","additionalData":{"hmacSignature":"c2lnMQ=="}}`},
			wantKey: "PSP1:CAPTURE:false", wantRule: item,
		},
		{
			desc:    "the same item in its notification",
			bodies:  []string{`{"live":"false","notificationItems":[{"NotificationRequestItem":{"pspReference":"PSP1","eventCode":"CAPTURE","success":"false","additionalData":{"hmacSignature":"c2lnMg=="}}}]}`},
			wantKey: "PSP1:CAPTURE:false", wantRule: classic,
		},
		{
			desc: "a relayed authentication request is its challenge, whatever its queue timestamp",
			bodies: []string{
				`{"id":"c-1","type":"balancePlatform.authentication.relayed","timestamp":"2026-11-02T10:00:00+01:00"}`,
				`{"id":"c-1","type":"balancePlatform.authentication.relayed","timestamp":"2026-11-02T10:00:02+01:00"}`,
			},
			wantKey: "balancePlatform.authentication.relayed:c-1", wantRule: relayed,
		},
		{
			desc:    "a recurring top-up with a data.id is keyed as the other Balance Platform webhooks",
			bodies:  []string{`{"type":"balancePlatform.balanceAccount.recurringTopUp.deleted","timestamp":"2026-11-02T10:00:00+01:00","data":{"id":"X1","webhookTopUpConfiguration":{"id":"TU1"}}}`},
			wantKey: "balancePlatform.balanceAccount.recurringTopUp.deleted:X1:2026-11-02T10:00:00+01:00", wantRule: queued,
		},
		{
			desc:    "a dispute webhook with its creationDate is keyed by it",
			bodies:  []string{`{"type":"balancePlatform.dispute.updated","data":{"id":"DS1","status":"open","creationDate":"2026-11-02T10:00:00+01:00"}}`},
			wantKey: "balancePlatform.dispute.updated:DS1:2026-11-02T10:00:00+01:00", wantRule: createdAt,
		},
		{
			desc: "a dispute webhook without a time is keyed by its status",
			bodies: []string{
				`{"type":"balancePlatform.dispute.updated","data":{"id":"DS1","status":"won"}}`,
				`{"type":"balancePlatform.dispute.updated","data":{"id":"DS1","status":"won","description":"added"}}`,
			},
			wantKey: "balancePlatform.dispute.updated:DS1:won", wantRule: dispute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			for _, body := range tc.bodies {
				got, err := p.DeriveKey(horizon.NewDelivery(nil, []byte(body)))
				if err != nil {
					t.Fatalf("DeriveKey(%q) error = %v", body, err)
				}
				if got.Key != tc.wantKey || got.Rule != tc.wantRule || got.Source != horizon.KeySourceBodyField || got.Fallback {
					t.Errorf("DeriveKey(%q) = %+v; want key %q by %s", body, got, tc.wantKey, tc.wantRule)
				}
			}
		})
	}
}
