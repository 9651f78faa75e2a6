package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
)

// lastRequest keeps the last Request the service recorded.
type lastRequest struct {
	mu sync.Mutex
	r  Request
}

func (l *lastRequest) Record(_ context.Context, r *Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.r = *r
}

func (l *lastRequest) get() Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r
}

// TestKeyFallbackIsVisible: a delivery in which the provider's key rule finds
// nothing is claimed by its body hash, and says so: a warn line that carries
// neither the body nor the key in full, and KeyFallback on the Request the
// metrics count. A rule that declares the hash (braintree's sha256) is no
// fallback.
func TestKeyFallbackIsVisible(t *testing.T) {
	const secret = "4111111111111111"
	tests := []struct {
		desc         string
		provider     string
		headers      map[string]string
		body         string
		wantSrc      pb.KeySource
		wantFallback bool
	}{
		{
			desc: "stripe event without an id", provider: "stripe",
			headers: map[string]string{"Stripe-Signature": "t=1,v1=a", "Content-Type": "application/json"},
			body:    `{"object":"event","card":"` + secret + `"}`,
			wantSrc: pb.KeySource_KEY_SOURCE_BODY_HASH, wantFallback: true,
		},
		{
			desc: "shopify delivery without either webhook id header", provider: "shopify",
			headers: map[string]string{"X-Shopify-Topic": "orders/paid", "X-Shopify-Event-Id": "e1"},
			body:    `{"id":820982911946154508,"card":"` + secret + `"}`,
			wantSrc: pb.KeySource_KEY_SOURCE_BODY_HASH, wantFallback: true,
		},
		{
			desc: "stripe event with its id", provider: "stripe",
			body:    `{"id":"evt_1","card":"` + secret + `"}`,
			wantSrc: pb.KeySource_KEY_SOURCE_BODY_FIELD,
		},
		{
			desc: "shopify Events delivery", provider: "shopify",
			headers: map[string]string{"shopify-webhook-id": "w1", "shopify-topic": "orders/paid"},
			body:    `{"card":"` + secret + `"}`,
			wantSrc: pb.KeySource_KEY_SOURCE_HEADER,
		},
		{
			desc: "braintree declares the hash", provider: "braintree",
			body:    "bt_signature=x&bt_payload=" + secret,
			wantSrc: pb.KeySource_KEY_SOURCE_BODY_HASH,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			reg, err := horizon.Default()
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			rec := &lastRequest{}
			svc := New(Config{Store: embedded(t), Registry: reg, Clock: clock.NewFake(time.Now()), Recorder: rec,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			resp, err := svc.Claim(context.Background(), &pb.ClaimRequest{Namespace: "billing", Provider: tc.provider,
				Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Headers: tc.headers, Body: []byte(tc.body)}}})
			if err != nil {
				t.Fatalf("Claim() error = %v", err)
			}
			if resp.KeySource != tc.wantSrc {
				t.Errorf("Claim() key_source = %v, want %v", resp.KeySource, tc.wantSrc)
			}
			if got := rec.get().KeyFallback; got != tc.wantFallback {
				t.Errorf("Request.KeyFallback = %v, want %v", got, tc.wantFallback)
			}
			var warns []map[string]any
			var warnLines []string
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if m["level"] == "WARN" {
					warns = append(warns, m)
					warnLines = append(warnLines, line)
				}
			}
			if !tc.wantFallback {
				if len(warns) != 0 {
					t.Errorf("warn lines = %v, want none", warns)
				}
				return
			}
			if len(warns) != 1 {
				t.Fatalf("warn lines = %v, want one", warns)
			}
			w := warns[0]
			if w["provider"] != tc.provider || w["namespace"] != "billing" || w["body_bytes"] != float64(len(tc.body)) {
				t.Errorf("warn line = %v, want provider %s, namespace billing, body_bytes %d", w, tc.provider, len(tc.body))
			}
			if want := resp.Key[:keyPrefixBytes] + "…"; w["key_prefix"] != want {
				t.Errorf("warn line key_prefix = %v, want %q", w["key_prefix"], want)
			}
			for name := range tc.headers {
				if !strings.Contains(w["header_names"].(string), name) {
					t.Errorf("warn line header_names = %v, want it to name %s", w["header_names"], name)
				}
			}
			// The request's own line logs the key, as for every claim; the
			// warn line, about a delivery of unknown shape, carries neither.
			if line := warnLines[0]; strings.Contains(line, secret) || strings.Contains(line, resp.Key) {
				t.Errorf("warn line carries the body or the full key:\n%s", line)
			}
		})
	}
}
