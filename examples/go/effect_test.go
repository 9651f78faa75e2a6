package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
)

// TestCrashAfterAppend: a receiver that appended the row and died before
// claimd heard of it. The next holder takes the key over when the lease
// ends, finds the event's fence, appends nothing and answers the first
// holder's result; Stripe's later retries are duplicates with that answer.
func TestCrashAfterAppend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := openLedger(ctx, filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c, err := claimd.Dial(ctx, server.Addr, claimd.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &receiver{claimd: c, ledger: l, namespace: fmt.Sprintf("example-%d", seq.Add(1)), log: slog.New(slog.DiscardHandler), now: time.Now}
	id := newEventID()
	body := event(id)
	req := claimd.ClaimRequest{Namespace: rc.namespace, Provider: "stripe", Delivery: &claimd.Delivery{Body: body}}

	// The first holder: appends, then dies before settling (a panic leaves
	// the key to its lease, as a killed process would).
	type crash struct{}
	func() {
		defer func() {
			if r := recover(); r != (crash{}) {
				t.Fatalf("first delivery: recovered %v, want the test's crash", r)
			}
		}()
		first := req
		first.Lease = 300 * time.Millisecond
		c.Guard(ctx, first, func(ctx context.Context, _ claimd.Claim) ([]byte, error) {
			if _, err := rc.apply(ctx, body); err != nil {
				t.Errorf("first delivery: apply = %v", err)
			}
			panic(crash{})
		})
	}()
	if n := rows(t, l, id); n != 1 {
		t.Fatalf("ledger rows after the crash = %d, want 1", n)
	}

	// The redelivery waits out the dead holder's lease and takes over.
	again := req
	again.Wait = 10 * time.Second
	out := c.Guard(ctx, again, func(ctx context.Context, _ claimd.Claim) ([]byte, error) {
		return rc.apply(ctx, body)
	})
	if out.Status != 200 || string(out.Body) != `{"ledger_row":1}` || !out.Claim.TakenOver() || out.Effect == nil || !out.Effect.Done {
		t.Errorf("redelivery = %d %q (reason %v, effect %+v, err %v); want 200 row 1 after a takeover, effect done",
			out.Status, out.Body, out.Claim.GetReason(), out.Effect, out.Err)
	}

	// Stripe's next retry, through the receiver: a duplicate with that answer.
	mux := httptest.NewServer(rc)
	t.Cleanup(mux.Close)
	if r := post(t, mux.URL, body, ""); r != (reply{200, `{"ledger_row":1}`}) {
		t.Errorf("retry over HTTP = %+v, want 200 with row 1", r)
	}
	if n := rows(t, l, id); n != 1 {
		t.Errorf("ledger rows after the recovery = %d, want 1", n)
	}
}
