package main

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// TestServeOrdersLifecycleEvents: claimd as shipped (embedded tiers, the
// embedded providers.yaml) defers a Stripe refund that arrives before its
// charge succeeded, lists it with EntityService, logs it as a rejected
// state transition, counts it in claimd_out_of_order_total, and its
// background sampler reports it in claimd_deferred_events.
func TestServeOrdersLifecycleEvents(t *testing.T) {
	p := start(t, "--data-dir", t.TempDir(), "--log-format", "json", "--metrics-sample-interval", "20ms")
	conn := p.conn(t)
	waitServing(t, conn)
	ctx := context.Background()

	resp, err := pb.NewClaimServiceClient(conn).Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe",
		Key: &pb.ClaimRequest_EventId{EventId: "evt_refund"}, EntityId: "ch_1", EventType: "charge.refunded"})
	if err != nil || resp.Outcome != pb.Outcome_OUTCOME_DEFERRED || resp.RetryAfter == nil {
		t.Fatalf("Claim(refund before success) = %v, %v, want DEFERRED with retry_after", resp, err)
	}
	list, err := pb.NewEntityServiceClient(conn).ListDeferred(ctx, &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe"})
	if err != nil || len(list.Events) != 1 || list.Events[0].Key != "evt_refund" {
		t.Fatalf("ListDeferred() = %v, %v, want the refund", list, err)
	}
	p.logs.wait(t, "the deferred claim, rejected", func(r map[string]any) bool {
		return r["msg"] == "Claim" && r["outcome"] == "DEFERRED" && r["state_transition_rejected"] == true && r["event_type"] == "charge.refunded"
	})

	_, body := get(t, "http://"+p.http+"/metrics")
	if want := `claimd_out_of_order_total{event_type="charge.refunded",outcome="deferred",provider="stripe"} 1`; !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "claimd_out_of_order_total{event_type=\"charge.refunded\""))
	}
	// The sampler reads the durable tier every 20ms: wait (bounded) for a
	// sample taken after the claim.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body = get(t, "http://"+p.http+"/metrics")
		if strings.Contains(body, "\nclaimd_deferred_events 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claimd_deferred_events never reached 1 within 10s:\n%s", grepLines(body, "claimd_deferred"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"\nclaimd_deferred_lost_events 0\n", "\nclaimd_deferred_overdue_events 0\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", strings.TrimSpace(want), grepLines(body, "claimd_deferred"))
		}
	}
	p.stop(t)
}
