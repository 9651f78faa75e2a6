package service

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
)

// TestProviderLifecycles: GetProvider and ListProviders carry a provider's
// lifecycles as the registry declares them; a group has none.
func TestProviderLifecycles(t *testing.T) {
	_, providers := dial(t, newTestService(t, embedded(t), clock.NewFake(time.Now())))
	ctx := context.Background()
	got, err := providers.GetProvider(ctx, &pb.GetProviderRequest{Name: "stripe"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*pb.Lifecycle{}
	for _, l := range got.Provider.Lifecycles {
		byName[l.Name] = l
	}
	charge := byName["charge"]
	if charge == nil || byName["payment_intent"] == nil {
		t.Fatalf("GetProvider(stripe).lifecycles = %v, want payment_intent and charge", got.Provider.Lifecycles)
	}
	want := &pb.Lifecycle{
		Name:          "charge",
		EntityRule:    "json:data.object.id",
		EventTypeRule: "json:type",
		States:        []string{"new", "pending", "succeeded", "failed"},
		Source:        "https://docs.stripe.com/api/events/types",
	}
	if diff := cmp.Diff(want, charge, protocmp.Transform(), protocmp.IgnoreFields(&pb.Lifecycle{}, "events")); diff != "" {
		t.Errorf("GetProvider(stripe) charge lifecycle (-want +got):\n%s", diff)
	}
	events := map[string]*pb.LifecycleEvent{}
	for _, e := range charge.Events {
		events[e.EventType] = e
	}
	for _, e := range []*pb.LifecycleEvent{
		{EventType: "charge.succeeded", FromStates: []string{"new", "pending"}, ToState: "succeeded"},
		{EventType: "charge.dispute.created", FromStates: []string{"succeeded"}, ToState: "succeeded", EntityRule: "json:data.object.charge"},
	} {
		if diff := cmp.Diff(e, events[e.EventType], protocmp.Transform()); diff != "" {
			t.Errorf("GetProvider(stripe) event %s (-want +got):\n%s", e.EventType, diff)
		}
	}

	list, err := providers.ListProviders(ctx, &pb.ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Providers {
		switch {
		case p.Name == "adyen" && len(p.Lifecycles) != 1:
			t.Errorf("ListProviders adyen has %d lifecycles, want 1", len(p.Lifecycles))
		case len(p.Members) > 0 && len(p.Lifecycles) > 0:
			t.Errorf("ListProviders group %s has lifecycles", p.Name)
		}
	}
}
