package service

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// The per-call window (ClaimRequest.window) on the embedded pair and the
// production pair: longer than the provider's, it is the window a claim
// opens; a duplicate is answered within the window its first claim opened;
// shorter, or over 400 days, it is refused and nothing is written.

const stripeWindow = 84 * time.Hour // stripe's retry horizon 72h + margin 12h

func windowStores() map[string]func(*testing.T) tiers.Store {
	return map[string]func(*testing.T) tiers.Store{"embedded": embedded, "redis+postgres": production}
}

func TestClaimWindow(t *testing.T) {
	for name, open := range windowStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Now())
			svc := newTestService(t, open(t), clk)
			ctx := context.Background()
			week := 7 * 24 * time.Hour
			claim := func(desc string, window time.Duration) *pb.ClaimResponse {
				t.Helper()
				resp, err := svc.Claim(ctx, claimReq(func(r *pb.ClaimRequest) {
					r.Key = &pb.ClaimRequest_EventId{EventId: "evt_window"}
					r.Start = true
					if window != 0 {
						r.Window = durationpb.New(window)
					}
				}))
				if err != nil {
					t.Fatalf("Claim(%s) error = %v", desc, err)
				}
				return resp
			}
			wantAnswer := func(desc string, resp *pb.ClaimResponse, outcome pb.Outcome, reason pb.Reason, window time.Duration, opened time.Time) {
				t.Helper()
				if resp.Outcome != outcome || resp.Reason != reason {
					t.Errorf("Claim(%s) = %v/%v, want %v/%v", desc, resp.Outcome, resp.Reason, outcome, reason)
				}
				if got := resp.Ttl.AsDuration(); got != window {
					t.Errorf("Claim(%s).ttl = %v, want %v", desc, got, window)
				}
				if got, want := resp.WindowExpiresAt.AsTime(), opened.Add(window); !got.Equal(want) {
					t.Errorf("Claim(%s).window_expires_at = %v, want %v (first seen + %v)", desc, got, want, window)
				}
			}

			t0 := clk.Now()
			first := claim("window a week", week)
			wantAnswer("window a week", first, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_NEW, week, t0)
			if _, err := svc.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_window",
				FencingToken: first.FencingToken, LeaseSecret: first.LeaseSecret, To: pb.EventState_EVENT_STATE_SETTLED, Result: []byte("ok")}); err != nil {
				t.Fatal(err)
			}

			// Past the provider's window, within the week: a retry without
			// a window, and one asking for a longer one, are duplicates of
			// the week the first claim opened.
			clk.Set(t0.Add(stripeWindow + time.Hour))
			wantAnswer("provider's window, after 85h", claim("no window", 0), pb.Outcome_OUTCOME_DUPLICATE, pb.Reason_REASON_UNSPECIFIED, week, t0)
			wantAnswer("two weeks, after 85h", claim("two weeks", 2*week), pb.Outcome_OUTCOME_DUPLICATE, pb.Reason_REASON_UNSPECIFIED, week, t0)

			// The week over, the next claim opens a window of its own: the
			// provider's when it asks for none.
			t1 := t0.Add(week + time.Second)
			clk.Set(t1)
			wantAnswer("no window, after the week", claim("no window", 0), pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_WINDOW_EXPIRED, stripeWindow, t1)
			rec, err := svc.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_window"})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := rec.Record.WindowExpiresAt.AsTime(), t1.Add(stripeWindow); !got.Equal(want) {
				t.Errorf("Get().window_expires_at = %v, want %v: the stored window is the one the claim opened", got, want)
			}

			// Exactly the provider's window is allowed, and 400 days too.
			for _, w := range []time.Duration{stripeWindow, MaxWindow} {
				t2 := clk.Now()
				resp, err := svc.Claim(ctx, claimReq(func(r *pb.ClaimRequest) {
					r.Key = &pb.ClaimRequest_EventId{EventId: "evt_window_" + w.String()}
					r.Window = durationpb.New(w)
				}))
				if err != nil {
					t.Fatalf("Claim(window %v) error = %v", w, err)
				}
				wantAnswer("window "+w.String(), resp, pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_NEW, w, t2)
			}
		})
	}
}

// TestClaimWindowRefused: a window shorter than the provider's, over 400
// days or not a duration is INVALID_ARGUMENT naming ClaimRequest.window,
// and the store is never asked: the key stays unclaimed.
func TestClaimWindowRefused(t *testing.T) {
	tests := []struct {
		desc, descMatch string
		window          *durationpb.Duration
	}{
		{"shorter than the provider's", "is shorter than the window of \"stripe\", 84h0m0s (retry horizon 72h0m0s + margin 12h0m0s)", durationpb.New(24 * time.Hour)},
		{"a nanosecond short", "is shorter than the window", durationpb.New(stripeWindow - time.Nanosecond)},
		{"negative", "is shorter than the window", durationpb.New(-time.Hour)},
		{"over 400 days", "exceeds the maximum window 9600h0m0s (400 days)", durationpb.New(MaxWindow + time.Second)},
		{"not a duration", "invalid duration", &durationpb.Duration{Seconds: 1, Nanos: -1}},
	}
	for name, open := range windowStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			counting := &tierstest.CountingStore{Store: store}
			svc := newTestService(t, counting, clock.NewFake(time.Now()))
			for _, tc := range tests {
				_, err := svc.Claim(context.Background(), claimReq(func(r *pb.ClaimRequest) {
					r.Key = &pb.ClaimRequest_EventId{EventId: "evt_refused"}
					r.Window = tc.window
				}))
				code, field, desc := fieldOf(err)
				if code != codes.InvalidArgument || field != "ClaimRequest.window" || !strings.Contains(desc, tc.descMatch) {
					t.Errorf("Claim(window %s) = %v %q %q, want InvalidArgument ClaimRequest.window containing %q", tc.desc, code, field, desc, tc.descMatch)
				}
			}
			if n := counting.Writes.Load(); n != 0 {
				t.Errorf("refused windows reached the store %d times; bad input must write nothing", n)
			}
			if _, err := store.Get(context.Background(), tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_refused"}); !errors.Is(err, tiers.ErrNotFound) {
				t.Errorf("Get(evt_refused) after the refusals error = %v, want ErrNotFound", err)
			}
		})
	}
}
