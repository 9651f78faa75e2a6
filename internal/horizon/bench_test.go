package horizon_test

import (
	"testing"

	"github.com/claimd/claimd/internal/horizon"
)

// BenchmarkDeriveKey measures the key derivation every Claim that sends a raw
// delivery pays: Stripe's json:id on a realistic 2.5 KB event, Adyen's joined
// rule (two walks of the body), and a header rule.
func BenchmarkDeriveKey(b *testing.B) {
	r := mustDefault(b)
	cases := []struct {
		name     string
		provider string
		headers  map[string]string
		body     []byte
	}{
		{
			name:     "stripe-json-id",
			provider: "stripe",
			headers:  map[string]string{"Stripe-Signature": "t=1762000124,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd", "Content-Type": "application/json"},
			body:     delivery(b, "stripe_payment_intent_succeeded.json"),
		},
		{
			name:     "adyen-joined",
			provider: "adyen",
			body:     delivery(b, "adyen_authorisation.json"),
		},
		{
			name:     "github-header",
			provider: "github",
			headers:  map[string]string{"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958", "X-GitHub-Event": "push", "Content-Type": "application/json"},
			body:     delivery(b, "github_push.json"),
		},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			p := lookup(b, r, bc.provider)
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if _, err := p.DeriveKey(horizon.NewDelivery(bc.headers, bc.body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
