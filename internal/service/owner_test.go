package service

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// durableOnly opens SQLite alone, so that every answer, a repeated attempt
// included, comes from the durable tier.
func durableOnly(t *testing.T) tiers.Store {
	t.Helper()
	s, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestGetNeverLetsAStrangerWrite reads the live holder's token with Get, as
// anyone may, and tries every fenced write with it and a made-up secret:
// each is PERMISSION_DENIED/NOT_OWNER and the record does not change. The
// owner's own secret still works afterwards.
func TestGetNeverLetsAStrangerWrite(t *testing.T) {
	claims, _ := dial(t, newTestService(t, embedded(t), clock.NewFake(time.Now())))
	ctx := context.Background()
	owner, err := claims.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.Holder = "pod-a" }))
	if err != nil || owner.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim = %v, %v; want ACQUIRED", owner, err)
	}
	ref := &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: owner.Key}
	before, err := claims.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	token := before.Record.FencingToken
	if token != owner.FencingToken {
		t.Fatalf("Get token = %d, want the owner's %d", token, owner.FencingToken)
	}
	forged := bytes.Repeat([]byte{0x42}, LeaseSecretBytes)
	attempts := []struct {
		desc string
		call func() error
	}{
		{"Transition(→PROCESSING)", func() error {
			_, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: owner.Key,
				FencingToken: token, LeaseSecret: forged, To: pb.EventState_EVENT_STATE_PROCESSING})
			return err
		}},
		{"Transition(repeat →RECEIVED)", func() error {
			_, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: owner.Key,
				FencingToken: token, LeaseSecret: forged, To: pb.EventState_EVENT_STATE_RECEIVED})
			return err
		}},
		{"Transition(→FAILED with a forged result)", func() error {
			_, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: owner.Key,
				FencingToken: token, LeaseSecret: forged, To: pb.EventState_EVENT_STATE_FAILED, Result: []byte("forged")})
			return err
		}},
		{"Renew", func() error {
			_, err := claims.Renew(ctx, &pb.RenewRequest{Namespace: "billing", Provider: "stripe", Key: owner.Key,
				FencingToken: token, LeaseSecret: forged})
			return err
		}},
		{"Release", func() error {
			_, err := claims.Release(ctx, &pb.ReleaseRequest{Namespace: "billing", Provider: "stripe", Key: owner.Key,
				FencingToken: token, LeaseSecret: forged})
			return err
		}},
	}
	for _, a := range attempts {
		code, ei := errorInfo(a.call())
		if code != codes.PermissionDenied || ei.GetReason() != ReasonNotOwner {
			t.Errorf("%s with Get's token and a made-up secret = %v %v, want PERMISSION_DENIED/NOT_OWNER", a.desc, code, ei)
		}
	}
	after, err := claims.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before.Record, after.Record) {
		t.Fatalf("record changed by refused writes:\nbefore %v\nafter  %v", before.Record, after.Record)
	}
	if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: owner.Key,
		FencingToken: owner.FencingToken, LeaseSecret: owner.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
		t.Fatalf("Transition by the owner error = %v", err)
	}
}

// TestAttemptIDRecognisesOnlyItsCaller repeats a claim's attempt_id from
// the same principal and holder (the same ACQUIRED, token and secret), from
// another holder and from another principal (neither acquires, nor learns
// the secret), against the two-tier store (the repeat is answered by its
// fast tier) and the durable tier alone.
func TestAttemptIDRecognisesOnlyItsCaller(t *testing.T) {
	stores := []struct {
		desc string
		open func(t *testing.T) tiers.Store
		// repeatBy serves the first and the second repeat: in two tiers
		// the first meets the first claim's pending marker and asks the
		// durable tier, which copies the record into the fast tier.
		repeatBy []pb.Tier
	}{
		{"two-tier", embedded, []pb.Tier{pb.Tier_TIER_DURABLE, pb.Tier_TIER_FAST}},
		{"durable only", durableOnly, []pb.Tier{pb.Tier_TIER_DURABLE, pb.Tier_TIER_DURABLE}},
	}
	for _, st := range stores {
		t.Run(st.desc, func(t *testing.T) {
			clk := clock.NewFake(time.Now())
			svc := newTestService(t, st.open(t), clk)
			as := func(principal string) context.Context {
				return auth.NewContext(context.Background(), auth.Principal{Name: principal})
			}
			req := func(holder string) *pb.ClaimRequest {
				return claimReq(func(r *pb.ClaimRequest) { r.Holder, r.AttemptId = holder, "att-1" })
			}
			first, err := svc.Claim(as("billing-svc"), req("pod-a"))
			if err != nil || first.Outcome != pb.Outcome_OUTCOME_ACQUIRED || len(first.LeaseSecret) != LeaseSecretBytes {
				t.Fatalf("Claim = %v, %v; want ACQUIRED with a %d-byte lease secret", first, err, LeaseSecretBytes)
			}
			clk.Advance(time.Second)

			var again *pb.ClaimResponse
			for _, by := range st.repeatBy {
				var err error
				again, err = svc.Claim(as("billing-svc"), req("pod-a"))
				if err != nil || again.Outcome != pb.Outcome_OUTCOME_ACQUIRED || again.FencingToken != first.FencingToken ||
					!bytes.Equal(again.LeaseSecret, first.LeaseSecret) || again.ServedBy != by {
					t.Fatalf("Claim(same principal, holder, attempt_id) = %v, %v; want ACQUIRED with token %d and the same secret, served by %v",
						again, err, first.FencingToken, by)
				}
			}
			for _, other := range []struct {
				desc      string
				ctx       context.Context
				holder    string
				principal string
			}{
				{"another holder", as("billing-svc"), "pod-b", "billing-svc"},
				{"another principal", as("payouts-svc"), "pod-a", "payouts-svc"},
				{"no principal", context.Background(), "pod-a", ""},
			} {
				got, err := svc.Claim(other.ctx, req(other.holder))
				if err != nil || got.Outcome != pb.Outcome_OUTCOME_IN_PROGRESS || got.FencingToken != 0 || len(got.LeaseSecret) != 0 {
					t.Errorf("Claim(%s, same attempt_id) = %v, %v; want IN_PROGRESS without token or secret", other.desc, got, err)
				}
			}
			// The owner's secret still writes: nothing above changed the owner.
			if _, err := svc.Transition(context.Background(), &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: first.Key,
				FencingToken: first.FencingToken, LeaseSecret: again.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
				t.Fatalf("Transition with the repeated claim's secret error = %v", err)
			}
		})
	}
}

// TestLeaseSecretsDiffer acquires keys with and without an attempt_id, and
// one key again after a release: every acquisition gets a secret of its own,
// and a released owner's secret no longer writes the re-acquired key.
func TestLeaseSecretsDiffer(t *testing.T) {
	svc := newTestService(t, embedded(t), clock.NewFake(time.Now()))
	ctx := context.Background()
	seen := map[string]string{}
	acquire := func(desc string, r *pb.ClaimRequest) *pb.ClaimResponse {
		t.Helper()
		c, err := svc.Claim(ctx, r)
		if err != nil || c.Outcome != pb.Outcome_OUTCOME_ACQUIRED || len(c.LeaseSecret) != LeaseSecretBytes {
			t.Fatalf("Claim(%s) = %v, %v; want ACQUIRED with a %d-byte secret", desc, c, err, LeaseSecretBytes)
		}
		if prev, ok := seen[string(c.LeaseSecret)]; ok {
			t.Fatalf("Claim(%s) lease secret equals the one of %s", desc, prev)
		}
		seen[string(c.LeaseSecret)] = desc
		return c
	}
	key := func(id string) func(*pb.ClaimRequest) {
		return func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: id} }
	}
	acquire("evt_a", claimReq(key("evt_a")))
	acquire("evt_b", claimReq(key("evt_b")))
	// The same attempt_id and holder on two keys: the salt differs per call.
	acquire("evt_c att-1", claimReq(func(r *pb.ClaimRequest) { key("evt_c")(r); r.AttemptId = "att-1" }))
	d := acquire("evt_d att-1", claimReq(func(r *pb.ClaimRequest) { key("evt_d")(r); r.AttemptId = "att-1" }))
	if _, err := svc.Release(ctx, &pb.ReleaseRequest{Namespace: "billing", Provider: "stripe", Key: "evt_d",
		FencingToken: d.FencingToken, LeaseSecret: d.LeaseSecret}); err != nil {
		t.Fatal(err)
	}
	next := acquire("evt_d after release", claimReq(func(r *pb.ClaimRequest) { key("evt_d")(r); r.AttemptId = "att-1" }))
	_, err := svc.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_d",
		FencingToken: next.FencingToken, LeaseSecret: d.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING})
	if code, ei := errorInfo(err); code != codes.PermissionDenied || ei.GetReason() != ReasonNotOwner {
		t.Fatalf("Transition(new token, released owner's secret) = %v %v, want PERMISSION_DENIED/NOT_OWNER", code, ei)
	}
}

// badHashStore answers every claim ACQUIRED with a record whose secret hash
// no claim derived.
type badHashStore struct{ tiers.Store }

func (s badHashStore) Claim(_ context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	rec := tiers.NewRecord(p)
	rec.SecretHash = bytes.Repeat([]byte{1}, tiers.SecretHashBytes)
	return tiers.ClaimResult{Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonNew, Record: rec, ServedBy: tiers.TierDurable}, nil
}

// TestSecretMismatchIsInternal: a store whose acquired record does not hold
// the claim's secret hash is a bug, answered INTERNAL; a secret that would
// not work is never handed out.
func TestSecretMismatchIsInternal(t *testing.T) {
	svc := newTestService(t, badHashStore{}, clock.NewFake(time.Now()))
	resp, err := svc.Claim(context.Background(), claimReq(nil))
	if code, _ := errorInfo(err); code != codes.Internal || resp != nil {
		t.Fatalf("Claim(store with a foreign hash) = %v, %v; want INTERNAL and no answer", resp, err)
	}
}
