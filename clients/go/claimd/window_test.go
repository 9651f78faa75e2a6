package claimd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
)

// TestClaimWindow: ClaimRequest.Window reaches claimd as the claim's
// window: a week opens a week's window; one shorter than stripe's (84h) is
// ErrInvalidArgument naming the field, and claims nothing.
func TestClaimWindow(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	const week = 7 * 24 * time.Hour

	id := eventID(t)
	cl, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id, Window: week})
	if err != nil {
		t.Fatalf("Claim(window a week) error = %v", err)
	}
	if got := cl.GetTtl().AsDuration(); !cl.Acquired() || got != week {
		t.Errorf("Claim(window a week) = %v, ttl %v; want ACQUIRED, %v", cl.GetOutcome(), got, week)
	}
	if got := cl.GetWindowExpiresAt().AsTime().Sub(cl.GetFirstSeenAt().AsTime()); got != week {
		t.Errorf("Claim(window a week): window ends %v after first seen, want %v", got, week)
	}

	short := eventID(t)
	_, err = c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: short, Window: time.Hour})
	if !errors.Is(err, claimd.ErrInvalidArgument) || !strings.Contains(err.Error(), "ClaimRequest.window") {
		t.Fatalf("Claim(window an hour) error = %v, want ErrInvalidArgument naming ClaimRequest.window", err)
	}
	if _, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: short}); !errors.Is(err, claimd.ErrNotFound) {
		t.Errorf("Get(%s) after the refused claim error = %v, want ErrNotFound", short, err)
	}
}
