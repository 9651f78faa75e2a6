package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// stripeSequence is internal/horizon's fixture of one Stripe payment whose
// events arrive out of order: the refund first, then the capture, then
// stale processing and pending events, then Stripe's retry of the refund.
var stripeSequence = filepath.Join("..", "..", "internal", "horizon", "testdata", "lifecycles", "stripe", "out_of_order")

// sequence is the part of sequence.yaml this test reads.
type sequence struct {
	Deliveries []struct {
		File  string `yaml:"file"`
		Order string `yaml:"order"` // defer, proceed or supersede
	} `yaml:"deliveries"`
	Ledger map[string]int64 `yaml:"ledger"`
}

// TestOutOfOrderStripeSequence replays the fixture through the receiver, in
// the order it lists, and checks every answer and the ledger at the end:
// the capture booked once, the refund booked once and only after it,
// nothing booked from a stale event. The receiver itself knows nothing of
// order; claimd's Stripe lifecycles (providers.yaml) decide it.
func TestOutOfOrderStripeSequence(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(stripeSequence, "sequence.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var seqs sequence
	if err := yaml.Unmarshal(raw, &seqs); err != nil {
		t.Fatal(err)
	}
	srv, l := setup(t)
	deliver := func(file string) (int, string, string) {
		body, err := os.ReadFile(filepath.Join(stripeSequence, file))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", signed(body, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Retry-After")
	}

	for i, d := range seqs.Deliveries {
		status, body, retryAfter := deliver(d.File)
		switch d.Order {
		case "defer":
			// 409 and Retry-After: Stripe retries, and its retry is the replay.
			if n, err := strconv.Atoi(retryAfter); status != http.StatusConflict || err != nil || n < 1 {
				t.Errorf("delivery %d (%s, deferred) = %d %q, Retry-After %q; want 409 with a Retry-After", i+1, d.File, status, body, retryAfter)
			}
		case "proceed":
			if status != http.StatusOK || !bytes.Contains([]byte(body), []byte("ledger_row")) {
				t.Errorf("delivery %d (%s, applied) = %d %q; want 200 with its ledger row", i+1, d.File, status, body)
			}
		case "supersede":
			if status != http.StatusOK || body != "event superseded by a later state of its entity\n" {
				t.Errorf("delivery %d (%s, superseded) = %d %q; want 200, superseded", i+1, d.File, status, body)
			}
		default:
			t.Fatalf("sequence.yaml: delivery %d: unknown order %q", i+1, d.Order)
		}
	}
	// Stripe may deliver any of them again, in any order: nothing changes.
	for i := len(seqs.Deliveries) - 1; i >= 0; i-- {
		if status, body, _ := deliver(seqs.Deliveries[i].File); status != http.StatusOK {
			t.Errorf("redelivery of %s = %d %q, want 200 (a duplicate or superseded)", seqs.Deliveries[i].File, status, body)
		}
	}

	const charge, intent = "ch_3QxOrd2eZvKYlo2C1Rk5Zt9B", "pi_3QxOrd2eZvKYlo2C1Nq0Pq7A"
	got, err := l.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []booking{
		{EventID: "evt_3QxOrd2eZvKYlo2C0cHs0k03", EventType: "charge.succeeded", ObjectID: charge, Amount: 2000},
		{EventID: "evt_3QxOrd2eZvKYlo2C0aPs0k04", EventType: "payment_intent.succeeded", ObjectID: intent, Amount: 0},
		{EventID: "evt_3QxOrd2eZvKYlo2C0cHr3f05", EventType: "charge.refunded", ObjectID: charge, Amount: -2000},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ledger rows (-want +got):\n%s", diff)
	}
	for order, balance := range seqs.Ledger {
		if got, err := l.Balance(context.Background(), order); err != nil || got != balance {
			t.Errorf("balance of order %s = %d, %v; want %d (sequence.yaml)", order, got, err, balance)
		}
	}
}
