package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
)

// maxBody bounds a delivery; Stripe events are a few KiB.
const maxBody = 1 << 20

// stripeEvent is the part of a Stripe event the ledger needs.
type stripeEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		Object struct {
			ID             string `json:"id"`
			Amount         int64  `json:"amount"`
			AmountRefunded int64  `json:"amount_refunded"`
			Currency       string `json:"currency"`
			Metadata       struct {
				OrderID string `json:"order_id"`
			} `json:"metadata"`
		} `json:"object"`
	} `json:"data"`
}

// receiver handles POST /webhooks/stripe.
type receiver struct {
	claimd    *claimd.Client
	ledger    *ledger
	namespace string
	secret    string // Stripe endpoint secret; empty skips verification (local runs only)
	log       *slog.Logger
	now       func() time.Time
}

// ServeHTTP verifies the delivery, then lets claimd's guard decide whether
// this delivery appends the ledger row: once per event, however many times
// and however concurrently Stripe delivers it.
func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, err := claimd.ReadDelivery(r, maxBody)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rc.secret != "" {
		if err := verifyStripeSignature(r.Header.Get("Stripe-Signature"), d.Body, rc.secret, rc.now()); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	req := claimd.ClaimRequest{Namespace: rc.namespace, Provider: "stripe", Delivery: d}
	out := rc.claimd.Guard(r.Context(), req, func(ctx context.Context, c claimd.Claim) ([]byte, error) {
		return rc.apply(ctx, d.Body)
	})
	out.Respond(w)
	rc.log.Info("delivery", "key", out.Claim.GetKey(), "disposition", out.Disposition.String(),
		"status", out.Status, "ran", out.Ran, "err", out.Err)
}

// apply is the side effect: one ledger row for the event, written through
// claimd's effect fence. The row and the event's fence row (in the ledger's
// own database) commit in one transaction, so a holder that appended and
// died before claimd heard of it, or that wakes after another took its key
// over, cannot append twice: the next holder's effect finds the fence done,
// skips the append, and the guard settles with the stored result. Its
// result (the row id) is stored by claimd and answered to every duplicate.
func (rc *receiver) apply(ctx context.Context, body []byte) ([]byte, error) {
	var ev stripeEvent
	// Retrying cannot fix a malformed event: fail it for good.
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, claimd.Permanent(fmt.Errorf("malformed Stripe event: %w", err))
	}
	if ev.ID == "" || ev.Type == "" {
		return nil, claimd.Permanent(errors.New("malformed Stripe event: id and type are required"))
	}
	fx, err := claimd.Effect(ctx, rc.ledger.db, func(ctx context.Context, tx claimd.EffectTx, fx *claimd.Fx) error {
		amount, err := booked(ctx, tx, ev)
		if err != nil {
			return err
		}
		obj := ev.Data.Object
		id, err := appendEntry(ctx, tx, entry{
			EventID: ev.ID, EventType: ev.Type, ObjectID: obj.ID, OrderID: obj.Metadata.OrderID,
			Amount: amount, Currency: obj.Currency,
			RecordedAt: rc.now(),
		})
		if err != nil {
			return err
		}
		fx.Result, err = result(id)
		return err
	})
	if err != nil {
		return nil, err // retryable: nothing was written, the claim is released and Stripe retries
	}
	return fx.Result, nil // fx.Done: an earlier holder's append, and its answer
}

// booked is the money an event moves: a charge that succeeded brings its
// amount in, a refund takes out what was refunded since the last refund
// (charge.refunded carries the charge's running amount_refunded); anything
// else (a payment intent's status) moves nothing and is a row of amount 0.
//
// Reading the refunds booked so far and then appending is safe without a
// lock: claimd runs one event of an entity at a time (another refund of the
// same charge is DEFERRED until this one settles), and never a refund before
// its charge succeeded, so the running total is this charge's.
func booked(ctx context.Context, tx claimd.EffectTx, ev stripeEvent) (int64, error) {
	obj := ev.Data.Object
	switch ev.Type {
	case "charge.succeeded":
		return obj.Amount, nil
	case "charge.refunded":
		before, err := refunded(ctx, tx, obj.ID)
		if err != nil {
			return 0, err
		}
		return -(obj.AmountRefunded - before), nil
	}
	return 0, nil
}

func result(row int64) ([]byte, error) {
	return json.Marshal(map[string]int64{"ledger_row": row})
}
