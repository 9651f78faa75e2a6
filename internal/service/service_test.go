package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/tierstest"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// embedded opens the production embedded pair (memory fast tier in front of
// SQLite) in a temp dir.
func embedded(t *testing.T) tiers.Store {
	t.Helper()
	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	s := twotier.New(memory.New(memory.Config{}), lite, twotier.Config{})
	t.Cleanup(func() { s.Close() })
	return s
}

func newTestService(t *testing.T, store tiers.Store, clk clock.Clock) *Service {
	t.Helper()
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{Store: store, Registry: reg, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func claimReq(mod func(*pb.ClaimRequest)) *pb.ClaimRequest {
	r := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_1"}}
	if mod != nil {
		mod(r)
	}
	return r
}

// fieldOf returns the code and the first BadRequest field of err.
func fieldOf(err error) (codes.Code, string, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) > 0 {
			return st.Code(), br.FieldViolations[0].Field, br.FieldViolations[0].Description
		}
	}
	return st.Code(), "", st.Message()
}

func TestClaimValidation(t *testing.T) {
	long := strings.Repeat("k", 256)
	tests := []struct {
		desc      string
		req       *pb.ClaimRequest
		code      codes.Code
		field     string
		descMatch string
	}{
		{"namespace missing", claimReq(func(r *pb.ClaimRequest) { r.Namespace = "" }), codes.InvalidArgument, "ClaimRequest.namespace", "required"},
		{"namespace pattern", claimReq(func(r *pb.ClaimRequest) { r.Namespace = "Billing" }), codes.InvalidArgument, "ClaimRequest.namespace", "must match"},
		{"namespace too long", claimReq(func(r *pb.ClaimRequest) { r.Namespace = strings.Repeat("a", 64) }), codes.InvalidArgument, "ClaimRequest.namespace", "64 bytes exceeds the maximum of 63"},
		{"provider missing", claimReq(func(r *pb.ClaimRequest) { r.Provider = "" }), codes.InvalidArgument, "ClaimRequest.provider", "required"},
		{"provider unknown", claimReq(func(r *pb.ClaimRequest) { r.Provider = "nope" }), codes.NotFound, "", "not registered"},
		{"no key", claimReq(func(r *pb.ClaimRequest) { r.Key = nil }), codes.InvalidArgument, "ClaimRequest.key", "exactly one of"},
		{"event_id empty", claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{} }), codes.InvalidArgument, "ClaimRequest.event_id", "required"},
		{"event_id too long", claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: long} }), codes.InvalidArgument, "ClaimRequest.event_id", "256 bytes exceeds the maximum of 255"},
		{"event_id control char", claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: "evt\x01"} }), codes.InvalidArgument, "ClaimRequest.event_id", "control character"},
		{"event_id invalid utf-8", claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: "evt\xff"} }), codes.InvalidArgument, "ClaimRequest.event_id", "UTF-8"},
		{"scope control char", claimReq(func(r *pb.ClaimRequest) { r.Scope = "a\nb" }), codes.InvalidArgument, "ClaimRequest.scope", "control character"},
		{"key with scope too long", claimReq(func(r *pb.ClaimRequest) { r.Scope = long[:250] }), codes.InvalidArgument, "ClaimRequest.scope", "exceeds the maximum"},
		{"payload hash size", claimReq(func(r *pb.ClaimRequest) { r.PayloadSha256 = make([]byte, 31) }), codes.InvalidArgument, "ClaimRequest.payload_sha256", "31 bytes, want 32"},
		{"lease zero", claimReq(func(r *pb.ClaimRequest) { r.Lease = dur(0) }), codes.InvalidArgument, "ClaimRequest.lease", "must be > 0"},
		{"lease negative", claimReq(func(r *pb.ClaimRequest) { r.Lease = dur(-time.Second) }), codes.InvalidArgument, "ClaimRequest.lease", "must be > 0"},
		{"lease over max", claimReq(func(r *pb.ClaimRequest) { r.Lease = dur(100 * time.Hour) }), codes.InvalidArgument, "ClaimRequest.lease", "exceeds max_lease"},
		{"wait over 30s", claimReq(func(r *pb.ClaimRequest) { r.Wait = dur(31 * time.Second) }), codes.InvalidArgument, "ClaimRequest.wait", "exceeds the maximum wait 30s"},
		{"wait negative", claimReq(func(r *pb.ClaimRequest) { r.Wait = dur(-time.Second) }), codes.InvalidArgument, "ClaimRequest.wait", "must be > 0"},
		{"holder too long", claimReq(func(r *pb.ClaimRequest) { r.Holder = long }), codes.InvalidArgument, "ClaimRequest.holder", "exceeds"},
		{"attempt_id too long", claimReq(func(r *pb.ClaimRequest) { r.AttemptId = long[:129] }), codes.InvalidArgument, "ClaimRequest.attempt_id", "exceeds the maximum of 128"},
		{"malformed json delivery", claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(`{"id": `)}}
		}), codes.InvalidArgument, "ClaimRequest.delivery", "json:id"},
		// A derived key may not hold the scope separator (or any control
		// character) either, or it could equal a scoped key.
		// Both used to become "A\uFFFD": the second then PAYLOAD_MISMATCH.
		{"derived key with invalid UTF-8 (0xff)", claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte("{\"id\":\"A\xff\"}")}}
		}), codes.InvalidArgument, "ClaimRequest.delivery", "key rule json:id: id is not valid UTF-8"},
		{"derived key with invalid UTF-8 (0xfe)", claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte("{\"id\":\"A\xfe\"}")}}
		}), codes.InvalidArgument, "ClaimRequest.delivery", "key rule json:id: id is not valid UTF-8"},
		{"derived key with the scope separator", claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(`{"id":"x\u001fpending"}`)}}
		}), codes.InvalidArgument, "ClaimRequest.delivery", "control character"},
		{"derived header key with the scope separator", claimReq(func(r *pb.ClaimRequest) {
			r.Provider = "github"
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Headers: map[string]string{"X-GitHub-Delivery": "x\x1fpending"}, Body: []byte(`{}`)}}
		}), codes.InvalidArgument, "ClaimRequest.delivery", "control character"},
		{"scope with the scope separator", claimReq(func(r *pb.ClaimRequest) { r.Scope = "a\x1fb" }), codes.InvalidArgument, "ClaimRequest.scope", "control character"},
		// A group has no lifecycles: entity fields on one are refused, not
		// claimed unordered.
		{"entity fields on a provider group", claimReq(func(r *pb.ClaimRequest) {
			r.Provider, r.EntityId, r.EventType = "billing", "pi_1", "payment_intent.succeeded"
		}), codes.InvalidArgument, "ClaimRequest.entity_id", `provider "billing" is a group (of adyen, paypal, stripe), which has no lifecycles`},
		{"event_type alone on a provider group", claimReq(func(r *pb.ClaimRequest) {
			r.Provider, r.EventType = "billing", "payment_intent.succeeded"
		}), codes.InvalidArgument, "ClaimRequest.event_type", "is a group"},
		{"delivery hash disagrees with body", claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(`{"id":"evt_9"}`)}}
			r.PayloadSha256 = make([]byte, 32)
		}), codes.InvalidArgument, "ClaimRequest.payload_sha256", "does not match"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			store := &tierstest.CountingStore{Store: embedded(t)}
			svc := newTestService(t, store, clock.NewFake(time.Now()))
			_, err := svc.Claim(context.Background(), tc.req)
			code, field, desc := fieldOf(err)
			if code != tc.code || field != tc.field || !strings.Contains(desc, tc.descMatch) {
				t.Errorf("Claim(%s) = %v %q %q, want %v %q containing %q", tc.desc, code, field, desc, tc.code, tc.field, tc.descMatch)
			}
			if n := store.Writes.Load(); n != 0 {
				t.Errorf("Claim(%s) reached the store %d times; bad input must write nothing", tc.desc, n)
			}
		})
	}
}

// secret16 is a lease secret of the right size that nobody was given.
var secret16 = []byte("0123456789abcdef")

func TestFollowUpValidation(t *testing.T) {
	ref := func() (string, string, string) { return "billing", "stripe", "evt_1" }
	ns, prov, key := ref()
	tests := []struct {
		desc  string
		call  func(s *Service) error
		code  codes.Code
		field string
	}{
		{"transition token missing", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, LeaseSecret: secret16, To: pb.EventState_EVENT_STATE_PROCESSING})
			return err
		}, codes.InvalidArgument, "TransitionRequest.fencing_token"},
		{"transition target missing", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16})
			return err
		}, codes.InvalidArgument, "TransitionRequest.to"},
		// The wire value is an int32: 259 and 260 must not wrap to
		// PROCESSING and SETTLED when narrowed to a tiers.State.
		{"transition target 259 out of range", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16, To: pb.EventState(259)})
			return err
		}, codes.InvalidArgument, "TransitionRequest.to"},
		{"transition target 260 out of range, with a result", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16, To: pb.EventState(260), Result: []byte("x")})
			return err
		}, codes.InvalidArgument, "TransitionRequest.to"},
		{"transition target negative", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16, To: pb.EventState(-253)})
			return err
		}, codes.InvalidArgument, "TransitionRequest.to"},
		{"transition result too large", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16, To: pb.EventState_EVENT_STATE_SETTLED, Result: make([]byte, MaxResultBytes+1)})
			return err
		}, codes.InvalidArgument, "TransitionRequest.result"},
		{"transition result on a non-terminal target", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16, To: pb.EventState_EVENT_STATE_PROCESSING, Result: []byte("x")})
			return err
		}, codes.InvalidArgument, "TransitionRequest.result"},
		{"transition extend_lease over max", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16, To: pb.EventState_EVENT_STATE_PROCESSING, ExtendLease: dur(100 * time.Hour)})
			return err
		}, codes.InvalidArgument, "TransitionRequest.extend_lease"},
		{"transition key missing", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, FencingToken: 1, LeaseSecret: secret16, To: pb.EventState_EVENT_STATE_PROCESSING})
			return err
		}, codes.InvalidArgument, "TransitionRequest.key"},
		{"renew lease over max", func(s *Service) error {
			_, err := s.Renew(context.Background(), &pb.RenewRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16, Lease: dur(100 * time.Hour)})
			return err
		}, codes.InvalidArgument, "RenewRequest.lease"},
		{"release token missing", func(s *Service) error {
			_, err := s.Release(context.Background(), &pb.ReleaseRequest{Namespace: ns, Provider: prov, Key: key, LeaseSecret: secret16})
			return err
		}, codes.InvalidArgument, "ReleaseRequest.fencing_token"},
		{"transition lease_secret missing", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, To: pb.EventState_EVENT_STATE_PROCESSING})
			return err
		}, codes.InvalidArgument, "TransitionRequest.lease_secret"},
		{"transition lease_secret too short", func(s *Service) error {
			_, err := s.Transition(context.Background(), &pb.TransitionRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: secret16[:15], To: pb.EventState_EVENT_STATE_PROCESSING})
			return err
		}, codes.InvalidArgument, "TransitionRequest.lease_secret"},
		{"renew lease_secret too long", func(s *Service) error {
			_, err := s.Renew(context.Background(), &pb.RenewRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1, LeaseSecret: make([]byte, 17)})
			return err
		}, codes.InvalidArgument, "RenewRequest.lease_secret"},
		{"release lease_secret missing", func(s *Service) error {
			_, err := s.Release(context.Background(), &pb.ReleaseRequest{Namespace: ns, Provider: prov, Key: key, FencingToken: 1})
			return err
		}, codes.InvalidArgument, "ReleaseRequest.lease_secret"},
		{"get namespace bad", func(s *Service) error {
			_, err := s.Get(context.Background(), &pb.GetRequest{Namespace: "A", Provider: prov, Key: key})
			return err
		}, codes.InvalidArgument, "GetRequest.namespace"},
		{"get provider unknown", func(s *Service) error {
			_, err := s.Get(context.Background(), &pb.GetRequest{Namespace: ns, Provider: "nope", Key: key})
			return err
		}, codes.NotFound, ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			store := &tierstest.CountingStore{Store: embedded(t)}
			err := tc.call(newTestService(t, store, clock.NewFake(time.Now())))
			code, field, _ := fieldOf(err)
			if code != tc.code || field != tc.field {
				t.Errorf("%s = %v %q, want %v %q (%v)", tc.desc, code, field, tc.code, tc.field, err)
			}
			if n := store.Writes.Load(); n != 0 {
				t.Errorf("%s reached the store %d times; bad input must write nothing", tc.desc, n)
			}
		})
	}
}

// failingStore answers every call with err.
type failingStore struct {
	tiers.Store
	err error
}

func (s failingStore) Claim(context.Context, tiers.ClaimParams) (tiers.ClaimResult, error) {
	return tiers.ClaimResult{}, s.err
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		desc   string
		err    error
		code   codes.Code
		reason string
	}{
		{"durable tier down fails closed", tiers.Unavailable("postgres", errors.New("connection refused")), codes.Unavailable, ReasonDurableUnavailable},
		{"stale token", tiers.ErrStaleToken, codes.Aborted, ReasonStaleToken},
		{"not the owner", fmt.Errorf("sqlite: %w", tiers.ErrNotOwner), codes.PermissionDenied, ReasonNotOwner},
		{"wrapped stale token", errors.Join(errors.New("ctx"), tiers.ErrStaleToken), codes.Aborted, ReasonStaleToken},
		{"invalid transition", &tiers.TransitionError{Current: tiers.StateSettled, To: tiers.StateProcessing, Op: "transition"}, codes.FailedPrecondition, ReasonInvalidTransition},
		{"not found", tiers.ErrNotFound, codes.NotFound, ReasonRecordNotFound},
		{"store outlived the service's own bound: fail closed", context.DeadlineExceeded, codes.Unavailable, ReasonDurableUnavailable},
		{"canceled", context.Canceled, codes.Canceled, ""},
		{"anything else", errors.New("boom"), codes.Internal, reasonInternal},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			svc := newTestService(t, failingStore{err: tc.err}, clock.NewFake(time.Now()))
			_, err := svc.Claim(context.Background(), claimReq(nil))
			st := status.Convert(err)
			reason := ""
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					reason = ei.Reason
				}
			}
			if st.Code() != tc.code || reason != tc.reason {
				t.Errorf("Claim with store error %v = %v/%q, want %v/%q", tc.err, st.Code(), reason, tc.code, tc.reason)
			}
		})
	}
}

func TestEnumNumbersMatch(t *testing.T) {
	for i := range 6 {
		if got, want := "EVENT_STATE_"+tiers.State(i).String(), pb.EventState(i).String(); got != want {
			t.Errorf("tiers.State(%d) = %s, proto %s", i, got, want)
		}
	}
	for i := range 7 {
		if got, want := "OUTCOME_"+tiers.Outcome(i).String(), pb.Outcome(i).String(); got != want {
			t.Errorf("tiers.Outcome(%d) = %s, proto %s", i, got, want)
		}
	}
	for i := range 5 {
		if got, want := "REASON_"+tiers.Reason(i).String(), pb.Reason(i).String(); got != want {
			t.Errorf("tiers.Reason(%d) = %s, proto %s", i, got, want)
		}
	}
	for i := range 4 {
		if got, want := "TIER_"+tiers.Tier(i).String(), pb.Tier(i).String(); got != want {
			t.Errorf("tiers.Tier(%d) = %s, proto %s", i, got, want)
		}
	}
	for i := 1; i < len(pb.AuditOp_name); i++ {
		if got, want := "AUDIT_OP_"+strings.ToUpper(tiers.AuditOp(i).String()), pb.AuditOp(i).String(); got != want {
			t.Errorf("tiers.AuditOp(%d) = %s, proto %s", i, got, want)
		}
	}
}

// dial starts the real gRPC server on a loopback port and returns a client.
func dial(t *testing.T, svc *Service) (pb.ClaimServiceClient, pb.ProviderServiceClient) {
	t.Helper()
	conn := dialConn(t, svc)
	return pb.NewClaimServiceClient(conn), pb.NewProviderServiceClient(conn)
}

// dialConn starts the real gRPC server on a loopback port and returns a
// connection to it.
func dialConn(t *testing.T, svc *Service) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func errorInfo(err error) (codes.Code, *errdetails.ErrorInfo) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei
		}
	}
	return st.Code(), nil
}

func TestEndToEndOverGRPC(t *testing.T) {
	clk := clock.NewFake(time.Now())
	claims, providers := dial(t, newTestService(t, embedded(t), clk))
	ctx := context.Background()

	first, err := claims.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.Holder = "pod-a" }))
	if err != nil {
		t.Fatal(err)
	}
	if first.Outcome != pb.Outcome_OUTCOME_ACQUIRED || first.Reason != pb.Reason_REASON_NEW || first.FencingToken != 1 ||
		first.Key != "evt_1" || first.KeySource != pb.KeySource_KEY_SOURCE_EVENT_ID || first.Ttl.AsDuration() != 84*time.Hour ||
		first.ServedBy != pb.Tier_TIER_DURABLE {
		t.Fatalf("Claim(first) = %v", first)
	}
	if got := first.WindowExpiresAt.AsTime().Sub(first.FirstSeenAt.AsTime()); got != 84*time.Hour {
		t.Errorf("window = %v after first seen, want 84h", got)
	}

	dup, err := claims.Claim(ctx, claimReq(nil))
	if err != nil || dup.Outcome != pb.Outcome_OUTCOME_IN_PROGRESS || dup.Holder != "pod-a" || dup.FencingToken != 0 {
		t.Fatalf("Claim(while in progress) = %v, %v; want IN_PROGRESS held by pod-a, without its token", dup, err)
	}

	if len(first.LeaseSecret) != LeaseSecretBytes || len(dup.LeaseSecret) != 0 {
		t.Fatalf("lease_secret of ACQUIRED/IN_PROGRESS = %d/%d bytes, want %d/0", len(first.LeaseSecret), len(dup.LeaseSecret), LeaseSecretBytes)
	}
	tr := func(token uint64, to pb.EventState, result []byte) (*pb.TransitionResponse, error) {
		return claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1", FencingToken: token,
			LeaseSecret: first.LeaseSecret, To: to, Result: result})
	}
	if _, err := tr(1, pb.EventState_EVENT_STATE_PROCESSING, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tr(1, pb.EventState_EVENT_STATE_SETTLED, []byte(`{"charge":"ch_1"}`)); err != nil {
		t.Fatal(err)
	}
	again, err := tr(1, pb.EventState_EVENT_STATE_SETTLED, []byte(`{"charge":"ch_1"}`))
	if err != nil || again.Changed || string(again.Record.Result) != `{"charge":"ch_1"}` {
		t.Fatalf("repeat Transition(SETTLED) = %v, %v; want unchanged", again, err)
	}
	_, err = tr(1, pb.EventState_EVENT_STATE_SETTLED, []byte(`other`))
	if code, ei := errorInfo(err); code != codes.FailedPrecondition || ei.GetReason() != ReasonResultMismatch || ei.GetMetadata()["current_state"] != "EVENT_STATE_SETTLED" {
		t.Fatalf("Transition(SETTLED again, other result) = %v %v, want FAILED_PRECONDITION/RESULT_MISMATCH current SETTLED", code, ei)
	}
	_, err = tr(1, pb.EventState_EVENT_STATE_PROCESSING, nil)
	if code, ei := errorInfo(err); code != codes.FailedPrecondition || ei.GetReason() != ReasonInvalidTransition || ei.GetMetadata()["current_state"] != "EVENT_STATE_SETTLED" {
		t.Fatalf("Transition(SETTLED→PROCESSING) = %v %v, want FAILED_PRECONDITION/INVALID_TRANSITION current SETTLED", code, ei)
	}
	_, err = tr(2, pb.EventState_EVENT_STATE_SETTLED, nil)
	if code, ei := errorInfo(err); code != codes.Aborted || ei.GetReason() != ReasonStaleToken {
		t.Fatalf("Transition(token 2) = %v %v, want ABORTED/STALE_TOKEN", code, ei)
	}

	// A settled record within its window never changes: the process-local
	// cache answers its duplicates with no network hop.
	d, err := claims.Claim(ctx, claimReq(nil))
	if err != nil || d.Outcome != pb.Outcome_OUTCOME_DUPLICATE || string(d.Result) != `{"charge":"ch_1"}` ||
		d.State != pb.EventState_EVENT_STATE_SETTLED || d.ServedBy != pb.Tier_TIER_LOCAL {
		t.Fatalf("Claim(after settle) = %v, %v; want DUPLICATE with the result, served LOCAL", d, err)
	}

	// Release and re-claim.
	k2 := claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: "evt_2"} })
	c2, err := claims.Claim(ctx, k2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Release(ctx, &pb.ReleaseRequest{Namespace: "billing", Provider: "stripe", Key: "evt_2", FencingToken: c2.FencingToken, LeaseSecret: c2.LeaseSecret}); err != nil {
		t.Fatal(err)
	}
	c3, err := claims.Claim(ctx, k2)
	if err != nil || c3.Outcome != pb.Outcome_OUTCOME_ACQUIRED || c3.Reason != pb.Reason_REASON_RELEASED || c3.FencingToken != 2 {
		t.Fatalf("Claim(after release) = %v, %v; want ACQUIRED/RELEASED token 2", c3, err)
	}

	got, err := claims.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_2"})
	if err != nil || got.Record.FencingToken != 2 || got.Record.Attempt != 2 {
		t.Fatalf("Get = %v, %v", got, err)
	}
	_, err = claims.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_none"})
	if code, ei := errorInfo(err); code != codes.NotFound || ei.GetReason() != ReasonRecordNotFound {
		t.Fatalf("Get(unknown) = %v %v, want NOT_FOUND", code, ei)
	}

	list, err := providers.ListProviders(ctx, &pb.ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*pb.Provider{}
	for _, p := range list.Providers {
		names[p.Name] = p
	}
	if s := names["stripe"]; s == nil || s.Ttl.AsDuration() != 84*time.Hour || s.KeyRule != "json:id" {
		t.Errorf("ListProviders stripe = %v, want ttl 84h key json:id", s)
	}
	if b := names["billing"]; b == nil || len(b.Members) == 0 {
		t.Errorf("ListProviders billing group = %v, want members", b)
	}
	if _, err := providers.GetProvider(ctx, &pb.GetProviderRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetProvider(nope) = %v, want NOT_FOUND", err)
	}
}

func TestWaitOverGRPC(t *testing.T) {
	clk := clock.NewFake(time.Now())
	store := embedded(t)
	claims, _ := dial(t, newTestService(t, store, clk))
	ctx := context.Background()
	c, err := claims.Claim(ctx, claimReq(nil))
	if err != nil {
		t.Fatal(err)
	}
	// The holder settles concurrently with a waiting duplicate; whichever
	// order they run in, the duplicate must come back DUPLICATE with the
	// result, never IN_PROGRESS, because it waits up to 10s.
	done := make(chan *pb.ClaimResponse, 1)
	go func() {
		r, err := claims.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.Wait = dur(10 * time.Second) }))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1", FencingToken: c.FencingToken, LeaseSecret: c.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1", FencingToken: c.FencingToken, LeaseSecret: c.LeaseSecret, To: pb.EventState_EVENT_STATE_SETTLED, Result: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.GetOutcome() != pb.Outcome_OUTCOME_DUPLICATE || string(r.GetResult()) != "ok" {
		t.Fatalf("Claim(wait 10s) = %v, want DUPLICATE with result ok", r)
	}
}

func TestScopeIsPartOfTheKey(t *testing.T) {
	claims, _ := dial(t, newTestService(t, embedded(t), clock.NewFake(time.Now())))
	for _, scope := range []string{"pending", "settled"} {
		r, err := claims.Claim(context.Background(), claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_EventId{EventId: "tr_9"}
			r.Scope = scope
		}))
		if err != nil || r.Outcome != pb.Outcome_OUTCOME_ACQUIRED || r.Key != "tr_9\x1f"+scope {
			t.Fatalf("Claim(tr_9, scope %s) = %v, %v; want ACQUIRED key %q", scope, r, err, "tr_9\x1f"+scope)
		}
	}
}

// TestScopedKeysNeverCollide is the regression test of event_id "x:pending"
// and event_id "x" with scope "pending" sharing one record: a scoped key is
// <key> U+001F <scope>, and no event_id, scope or derived key may hold a
// control character, so no two (key, scope) pairs compose alike. Unscoped
// keys are stored as they were sent, as before.
func TestScopedKeysNeverCollide(t *testing.T) {
	claims, _ := dial(t, newTestService(t, embedded(t), clock.NewFake(time.Now())))
	ctx := context.Background()
	claim := func(id, scope string) *pb.ClaimResponse {
		t.Helper()
		r, err := claims.Claim(ctx, claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_EventId{EventId: id}
			r.Scope = scope
		}))
		if err != nil {
			t.Fatalf("Claim(%q, scope %q) error = %v", id, scope, err)
		}
		return r
	}
	for _, c := range []struct{ id, scope, key string }{
		{"x:pending", "", "x:pending"},
		{"x", "pending", "x\x1fpending"},
		{"x:pending", "a", "x:pending\x1fa"},
		{"x", "pending:a", "x\x1fpending:a"},
	} {
		r := claim(c.id, c.scope)
		if r.Outcome != pb.Outcome_OUTCOME_ACQUIRED || r.Reason != pb.Reason_REASON_NEW || r.Key != c.key {
			t.Fatalf("Claim(%q, scope %q) = %v/%v key %q, want ACQUIRED/NEW key %q (a distinct identity)", c.id, c.scope, r.Outcome, r.Reason, r.Key, c.key)
		}
	}
	// The canonical key of a scoped claim is what the follow-up calls take.
	scoped := claim("tr_7", "settled")
	if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: scoped.Key, FencingToken: scoped.FencingToken, LeaseSecret: scoped.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
		t.Fatalf("Transition(key %q) error = %v", scoped.Key, err)
	}
	got, err := claims.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: scoped.Key})
	if err != nil || got.Record.State != pb.EventState_EVENT_STATE_PROCESSING || got.Record.Key != "tr_7\x1fsettled" {
		t.Fatalf("Get(key %q) = %v, %v; want PROCESSING", scoped.Key, got, err)
	}
	if r := claim("tr_7", "settled"); r.Outcome != pb.Outcome_OUTCOME_IN_PROGRESS {
		t.Fatalf("Claim(tr_7, scope settled) again = %v, want IN_PROGRESS", r.Outcome)
	}
}

// TestFollowUpKeyWithScope: a follow-up call's key may hold the one
// separator a scoped key has, between two valid parts; nothing else that is
// a control character.
func TestFollowUpKeyWithScope(t *testing.T) {
	for _, tc := range []struct {
		desc, key string
		ok        bool
	}{
		{"unscoped", "evt_1", true},
		{"scoped", "evt_1\x1fsettled", true},
		{"separator first", "\x1fsettled", false},
		{"separator last", "evt_1\x1f", false},
		{"two separators", "evt_1\x1fa\x1fb", false},
		{"another control character", "evt_1\x1esettled", false},
		{"control character in the scope", "evt_1\x1fset\ntled", false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			store := &tierstest.CountingStore{Store: embedded(t)}
			svc := newTestService(t, store, clock.NewFake(time.Now()))
			_, err := svc.Get(context.Background(), &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: tc.key})
			code, field, _ := fieldOf(err)
			if tc.ok && code != codes.NotFound {
				t.Fatalf("Get(%q) = %v %q, want NOT_FOUND (a valid key)", tc.key, code, field)
			}
			if !tc.ok && (code != codes.InvalidArgument || field != "GetRequest.key") {
				t.Fatalf("Get(%q) = %v %q, want INVALID_ARGUMENT GetRequest.key", tc.key, code, field)
			}
		})
	}
}

func TestDeliveryKeyDerivation(t *testing.T) {
	claims, _ := dial(t, newTestService(t, embedded(t), clock.NewFake(time.Now())))
	body := []byte(`{"id":"evt_3","type":"charge.succeeded"}`)
	deliver := func(sig string) *pb.ClaimResponse {
		r, err := claims.Claim(context.Background(), claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Headers: map[string]string{"Stripe-Signature": sig}, Body: body}}
		}))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := deliver("t=1700000000,v1=aaa")
	b := deliver("t=1700000600,v1=bbb")
	if a.Key != "evt_3" || a.KeySource != pb.KeySource_KEY_SOURCE_BODY_FIELD || a.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("first delivery = %v", a)
	}
	if b.Key != a.Key || b.Outcome == pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("retry with a new Stripe-Signature t= = key %q outcome %v, want key %q not ACQUIRED", b.Key, b.Outcome, a.Key)
	}
}

func TestReviewOverdueIsReported(t *testing.T) {
	ctx := context.Background()
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	stripe, _ := reg.Lookup("stripe")
	for _, tc := range []struct {
		desc    string
		now     time.Time
		overdue bool
	}{
		{"reviewed recently", stripe.ReviewedOn.Add(24 * time.Hour), false},
		{"older than the review age", stripe.ReviewedOn.Add(181 * 24 * time.Hour), true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, providers := dial(t, newTestService(t, embedded(t), clock.NewFake(tc.now)))
			got, err := providers.GetProvider(ctx, &pb.GetProviderRequest{Name: "stripe"})
			if err != nil {
				t.Fatal(err)
			}
			if got.Provider.ReviewOverdue != tc.overdue {
				t.Fatalf("GetProvider(stripe) at %v review_overdue = %v, want %v", tc.now, got.Provider.ReviewOverdue, tc.overdue)
			}
		})
	}
}

// claimsSeen is an embedded store that keeps the params of every Claim the
// service asks it, and still answers locally (tiers.LocalAnswerer) through
// the store it embeds.
type claimsSeen struct {
	*twotier.Store
	params []tiers.ClaimParams
}

func (s *claimsSeen) Claim(ctx context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	s.params = append(s.params, p)
	return s.Store.Claim(ctx, p)
}

// A duplicate of a settled key is answered from the local cache before the
// service derives an ownership for it: it never reaches the tiers. Every
// claim that does reach them carries an ownership of its own.
func TestLocalAnswerNeedsNoOwnership(t *testing.T) {
	ctx := context.Background()
	store := &claimsSeen{Store: embedded(t).(*twotier.Store)}
	svc := newTestService(t, store, clock.NewFake(time.Now()))
	first, err := svc.Claim(ctx, claimReq(nil))
	if err != nil || first.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim = %v, %v; want ACQUIRED", first, err)
	}
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		if _, err := svc.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1",
			FencingToken: first.FencingToken, LeaseSecret: first.LeaseSecret, To: to}); err != nil {
			t.Fatalf("Transition(%v) = %v", to, err)
		}
	}
	for range 2 {
		dup, err := svc.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.AttemptId = "att-1" }))
		if err != nil || dup.Outcome != pb.Outcome_OUTCOME_DUPLICATE || dup.ServedBy != pb.Tier_TIER_LOCAL || len(dup.LeaseSecret) != 0 {
			t.Fatalf("Claim(settled) = %v, %v; want DUPLICATE served LOCAL, no secret", dup, err)
		}
	}
	other, err := svc.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: "evt_2"} }))
	if err != nil || other.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim(evt_2) = %v, %v; want ACQUIRED", other, err)
	}
	if len(store.params) != 2 || store.params[0].Key.Key != "evt_1" || store.params[1].Key.Key != "evt_2" {
		t.Fatalf("the tiers were asked %d claims (%v), want the two first claims only", len(store.params), store.params)
	}
	for _, p := range store.params {
		if len(p.Salt) != tiers.SaltBytes || len(p.SecretHash) != tiers.SecretHashBytes {
			t.Errorf("Claim(%q) reached the tiers with a %d-byte salt and a %d-byte secret hash, want %d and %d",
				p.Key.Key, len(p.Salt), len(p.SecretHash), tiers.SaltBytes, tiers.SecretHashBytes)
		}
	}
	if bytes.Equal(store.params[0].Salt, store.params[1].Salt) {
		t.Error("two claims reached the tiers with the same salt")
	}
}
