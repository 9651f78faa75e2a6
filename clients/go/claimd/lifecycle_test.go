package claimd_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/claimd/claimd/clients/go/claimd"
	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// rewriteClaim is an interceptor that lets a Claim reach claimd and then
// changes its answer, as a claimd that answered otherwise would have.
func rewriteClaim(edit func(*pb.ClaimResponse)) claimd.Option {
	return claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if r, ok := reply.(*pb.ClaimResponse); ok && err == nil {
				edit(r)
			}
			return err
		}))
}

// refundFirst claims a charge.refunded before its charge succeeded: DEFERRED
// by Stripe's charge lifecycle.
func refundFirst(t *testing.T) claimd.ClaimRequest {
	id := eventID(t)
	return claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id, EntityID: "ch_" + id, EventType: "charge.refunded"}
}

func TestGuardDeferred(t *testing.T) {
	tests := []struct {
		desc           string
		retryAfter     *durationpb.Duration // nil: as claimd sent it
		keep           bool
		wantRetryAfter string
	}{
		{desc: "claimd's first deferral is 1-2s", keep: true},
		{desc: "none sent", retryAfter: nil, wantRetryAfter: "1"},
		{desc: "zero", retryAfter: durationpb.New(0), wantRetryAfter: "1"},
		{desc: "whole seconds stay", retryAfter: durationpb.New(3 * time.Second), wantRetryAfter: "3"},
		{desc: "a fraction rounds up", retryAfter: durationpb.New(1200 * time.Millisecond), wantRetryAfter: "2"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c := dial(t, shared.Addr, rewriteClaim(func(r *pb.ClaimResponse) {
				if !tt.keep {
					r.RetryAfter = tt.retryAfter
				}
			}))
			var fx effects
			out := c.Guard(ctxT(t), refundFirst(t), fx.succeed)
			want := summary{http.StatusConflict, "event arrived before its prerequisite; retry later\n", claimd.Deferred, false}
			if got := sum(out); got != want || fx.count() != 0 || out.Err != nil {
				t.Fatalf("Guard(refund first) = %+v (err %v, %d runs), want %+v and no run", got, out.Err, fx.count(), want)
			}
			rec := httptest.NewRecorder()
			out.Respond(rec)
			ra := rec.Header().Get("Retry-After")
			if tt.keep {
				if ra != "1" && ra != "2" {
					t.Errorf("Retry-After = %q, want 1 or 2 (claimd's retry_after %v rounded up)", ra, out.Claim.GetRetryAfter().AsDuration())
				}
			} else if ra != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", ra, tt.wantRetryAfter)
			}
			if e := out.Claim.GetEntity(); e.GetLifecycle() != "charge" || e.GetState() != "new" || len(e.GetAwaiting()) != 1 || e.GetAwaiting()[0] != "succeeded" {
				t.Errorf("Claim.Entity = %v, want charge in state new awaiting succeeded", e)
			}
		})
	}
}

func TestGuardSupersededByEntity(t *testing.T) {
	c := dial(t, shared.Addr)
	ctx := ctxT(t)
	id := eventID(t)
	succeeded := claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id + "_succeeded", EntityID: "pi_" + id, EventType: "payment_intent.succeeded"}
	processing := claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id, EntityID: "pi_" + id, EventType: "payment_intent.processing"}
	var fx effects
	if out := c.Guard(ctx, succeeded, fx.succeed); out.Status != http.StatusOK || !out.Ran {
		t.Fatalf("Guard(succeeded) = %+v, want 200 and a run", sum(out))
	}
	out := c.Guard(ctx, processing, fx.succeed)
	want := summary{http.StatusOK, "event superseded by a later state of its entity\n", claimd.SupersededByEntity, false}
	if got := sum(out); got != want || fx.count() != 1 || out.RetryAfter != 0 {
		t.Fatalf("Guard(stale processing) = %+v (retry after %v, %d runs), want %+v and one run in all", got, out.RetryAfter, fx.count(), want)
	}
	if !out.Claim.Superseded() || out.Claim.GetEntity().GetState() != "succeeded" {
		t.Errorf("Claim = %v, want SUPERSEDED with the entity succeeded", out.Claim.ClaimResponse)
	}
}

func TestGuardUnknownOutcome(t *testing.T) {
	c := dial(t, shared.Addr, rewriteClaim(func(r *pb.ClaimResponse) { r.Outcome = pb.Outcome(99) }))
	var fx effects
	out := c.Guard(ctxT(t), stripe(eventID(t)), fx.succeed)
	want := summary{http.StatusInternalServerError, "unexpected answer from claimd\n", claimd.Rejected, false}
	if got := sum(out); got != want || fx.count() != 0 || out.Err == nil {
		t.Fatalf("Guard(outcome 99) = %+v (err %v), want %+v with an error", got, out.Err, want)
	}
}
