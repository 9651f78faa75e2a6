package horizon

import "testing"

// TestDeliveryReadOnce shows that the key rule and the lifecycle rules
// share one reading of a delivery: once DeriveKey has checked the body and
// read the paths of a Stripe event, PlaceDelivery answers from that reading
// even after the bytes are overwritten (which no caller does; it is how the
// test sees that the body is not walked again).
func TestDeliveryReadOnce(t *testing.T) {
	reg, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	stripe, ok := reg.Lookup("stripe")
	if !ok {
		t.Fatal("no built-in stripe provider")
	}
	body := []byte(`{"id":"evt_1","type":"payment_intent.processing","data":{"object":{"id":"pi_1"}}}`)
	d := NewDelivery(nil, body)
	got, err := stripe.DeriveKey(d)
	if err != nil || got.Key != "evt_1" {
		t.Fatalf("DeriveKey = %+v, %v; want evt_1", got, err)
	}
	// The lifecycle rules read type and data.object.id, which the key rule
	// did not: read them once too, then spoil the bytes.
	if pl, ok, err := stripe.PlaceDelivery(d); err != nil || !ok || pl.EntityID != "pi_1" {
		t.Fatalf("PlaceDelivery = %+v, %v, %v; want pi_1", pl, ok, err)
	}
	for i := range body {
		body[i] = '!'
	}
	pl, ok, err := stripe.PlaceDelivery(d)
	if err != nil || !ok || pl.EntityID != "pi_1" || pl.Event.EventType != "payment_intent.processing" {
		t.Fatalf("PlaceDelivery after the body changed = %+v, %v, %v; want the first reading (pi_1, payment_intent.processing)", pl, ok, err)
	}
	if again, err := stripe.DeriveKey(d); err != nil || again.Key != "evt_1" {
		t.Fatalf("DeriveKey after the body changed = %+v, %v; want the first reading (evt_1)", again, err)
	}
	// A fresh Delivery of the spoiled bytes reads them anew: the memory is
	// per delivery, never shared.
	if _, err := stripe.DeriveKey(NewDelivery(nil, body)); err == nil {
		t.Fatal("DeriveKey of a fresh Delivery of spoiled bytes = nil error, want the body refused")
	}
}
