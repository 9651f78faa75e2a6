package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
)

func TestInspectValidation(t *testing.T) {
	svc := newTestService(t, embedded(t), clock.NewFake(time.Now()))
	conn := dialConn(t, svc)
	inspect := pb.NewInspectServiceClient(conn)
	ctx := context.Background()
	tooMany := make([]string, 1001)
	for i := range tooMany {
		tooMany[i] = "evt"
	}
	now := timestamppb.Now()
	for _, tc := range []struct {
		desc      string
		call      func() error
		wantCode  codes.Code
		wantField string
	}{
		{"claims: no namespace", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.namespace"},
		{"claims: keys without provider", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", Keys: []string{"evt_1"}})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.keys"},
		{"claims: 1001 keys", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", Provider: "stripe", Keys: tooMany})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.keys"},
		{"claims: an empty key", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", Provider: "stripe", Keys: []string{"evt_1", ""}})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.keys[1]"},
		{"claims: a state out of range", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", States: []pb.EventState{pb.EventState_EVENT_STATE_SETTLED, 259}})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.states[1]"},
		{"claims: an unspecified state", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", States: []pb.EventState{pb.EventState_EVENT_STATE_UNSPECIFIED}})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.states[0]"},
		{"claims: a control character in entity_id", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", EntityId: "pi\x00"})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.entity_id"},
		{"claims: an invalid timestamp", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", FirstSeenAfter: &timestamppb.Timestamp{Nanos: -1}})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.first_seen_after"},
		{"claims: before not after after", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", FirstSeenAfter: now, FirstSeenBefore: now})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.first_seen_before"},
		{"claims: page of 1001", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", PageSize: 1001})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.page_size"},
		{"claims: a page token of 513 bytes", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", PageToken: strings.Repeat("a", 513)})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.page_token"},
		{"claims: a page token no listing made", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", PageToken: "bm90IGEgY3Vyc29y"})
			return err
		}, codes.InvalidArgument, "ListClaimsRequest.page_token"},
		{"claims: unknown provider", func() error {
			_, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", Provider: "nosuch"})
			return err
		}, codes.NotFound, ""},
		{"audit: no key", func() error {
			_, err := inspect.ListAudit(ctx, &pb.ListAuditRequest{Namespace: "billing", Provider: "stripe"})
			return err
		}, codes.InvalidArgument, "ListAuditRequest.key"},
		{"audit: no provider", func() error {
			_, err := inspect.ListAudit(ctx, &pb.ListAuditRequest{Namespace: "billing", Key: "evt_1"})
			return err
		}, codes.InvalidArgument, "ListAuditRequest.provider"},
		{"audit: a key of 256 bytes", func() error {
			_, err := inspect.ListAudit(ctx, &pb.ListAuditRequest{Namespace: "billing", Provider: "stripe", Key: strings.Repeat("k", 256)})
			return err
		}, codes.InvalidArgument, "ListAuditRequest.key"},
		{"audit: page of 1001", func() error {
			_, err := inspect.ListAudit(ctx, &pb.ListAuditRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1", PageSize: 1001})
			return err
		}, codes.InvalidArgument, "ListAuditRequest.page_size"},
		{"audit: a page token no listing made", func() error {
			_, err := inspect.ListAudit(ctx, &pb.ListAuditRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1", PageToken: "bm90IGEgY3Vyc29y"})
			return err
		}, codes.InvalidArgument, "ListAuditRequest.page_token"},
		{"audit: unknown provider", func() error {
			_, err := inspect.ListAudit(ctx, &pb.ListAuditRequest{Namespace: "billing", Provider: "nosuch", Key: "evt_1"})
			return err
		}, codes.NotFound, ""},
	} {
		code, field, desc := fieldOf(tc.call())
		if code != tc.wantCode || field != tc.wantField {
			t.Errorf("%s: code %v field %q (%s), want %v %q", tc.desc, code, field, desc, tc.wantCode, tc.wantField)
		}
		if tc.wantCode == codes.NotFound {
			if _, ei := errorInfo(tc.call()); ei.GetReason() != ReasonProviderNotFound {
				t.Errorf("%s: reason %q, want %s", tc.desc, ei.GetReason(), ReasonProviderNotFound)
			}
		}
	}
}

// TestInspectListsAndPages: records newest first, filtered by state, a page
// at a time; a page token reused with other filters is refused naming
// page_token; a key's audit log names each decision, oldest first.
func TestInspectListsAndPages(t *testing.T) {
	clk := clock.NewFake(time.Now().Truncate(time.Microsecond))
	svc := newTestService(t, embedded(t), clk)
	conn := dialConn(t, svc)
	claims, inspect := pb.NewClaimServiceClient(conn), pb.NewInspectServiceClient(conn)
	ctx := context.Background()
	var settled *pb.ClaimResponse
	for _, k := range []string{"evt_a", "evt_b", "evt_c"} {
		clk.Advance(time.Second)
		res, err := claims.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: k}; r.Holder = "pod-a" }))
		if err != nil {
			t.Fatal(err)
		}
		if k == "evt_b" {
			settled = res
		}
	}
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_b",
			FencingToken: settled.GetFencingToken(), LeaseSecret: settled.GetLeaseSecret(), To: to}); err != nil {
			t.Fatal(err)
		}
	}

	var keys []string
	req := &pb.ListClaimsRequest{Namespace: "billing", Provider: "stripe", PageSize: 2}
	for {
		resp, err := inspect.ListClaims(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			keys = append(keys, r.GetKey())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		// The token of this listing, with another filter, is refused.
		other := &pb.ListClaimsRequest{Namespace: "billing", States: []pb.EventState{pb.EventState_EVENT_STATE_SETTLED}, PageToken: resp.GetNextPageToken()}
		_, err = inspect.ListClaims(ctx, other)
		if code, field, _ := fieldOf(err); code != codes.InvalidArgument || field != "ListClaimsRequest.page_token" {
			t.Fatalf("ListClaims(another filter, this token) = %v %q, want INVALID_ARGUMENT naming ListClaimsRequest.page_token", code, field)
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if got, want := strings.Join(keys, " "), "evt_c evt_b evt_a"; got != want {
		t.Errorf("ListClaims pages = %q, want %q", got, want)
	}
	resp, err := inspect.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: "billing", States: []pb.EventState{pb.EventState_EVENT_STATE_SETTLED}})
	if err != nil || len(resp.GetRecords()) != 1 || resp.GetRecords()[0].GetKey() != "evt_b" || resp.GetRecords()[0].GetState() != pb.EventState_EVENT_STATE_SETTLED {
		t.Fatalf("ListClaims(SETTLED) = %v, %v; want evt_b", resp, err)
	}

	audit, err := inspect.ListAudit(ctx, &pb.ListAuditRequest{Namespace: "billing", Provider: "stripe", Key: "evt_b"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range audit.GetEntries() {
		got = append(got, e.GetOp().String()+" "+e.GetOutcome().String()+" "+e.GetReason().String()+" "+e.GetState().String()+" "+e.GetHolder())
	}
	want := []string{
		"AUDIT_OP_CLAIM OUTCOME_ACQUIRED REASON_NEW EVENT_STATE_RECEIVED pod-a",
		"AUDIT_OP_TRANSITION OUTCOME_UNSPECIFIED REASON_UNSPECIFIED EVENT_STATE_PROCESSING pod-a",
		"AUDIT_OP_TRANSITION OUTCOME_UNSPECIFIED REASON_UNSPECIFIED EVENT_STATE_SETTLED pod-a",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ListAudit(evt_b) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if at := audit.GetEntries()[0].GetAt().AsTime(); !at.Equal(clk.Now().Add(-time.Second)) {
		t.Errorf("ListAudit(evt_b) first entry at %v, want the claim's time %v", at, clk.Now().Add(-time.Second))
	}
}

// TestGetNext: what Get says the next Claim would be answered is what the
// next Claim is answered, through a key's life: held (IN_PROGRESS until the
// lease ends), its lease over (a LEASE_EXPIRED takeover), settled
// (DUPLICATE until the window ends), its window over (WINDOW_EXPIRED), and
// released (RELEASED).
func TestGetNext(t *testing.T) {
	clk := clock.NewFake(time.Now().Truncate(time.Second))
	svc := newTestService(t, embedded(t), clk)
	claims, _ := dial(t, svc)
	ctx := context.Background()
	claim := func(key string) *pb.ClaimResponse {
		t.Helper()
		res, err := claims.Claim(ctx, claimReq(func(r *pb.ClaimRequest) { r.Key = &pb.ClaimRequest_EventId{EventId: key}; r.Holder = "pod-a" }))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// check asks Get, then Claims, and compares.
	check := func(desc, key string, want pb.Outcome, wantReason pb.Reason, until time.Time, words string) *pb.ClaimResponse {
		t.Helper()
		got, err := claims.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		n := got.GetNext()
		if n.GetOutcome() != want || n.GetReason() != wantReason {
			t.Errorf("%s: Get next = %v/%v, want %v/%v", desc, n.GetOutcome(), n.GetReason(), want, wantReason)
		}
		if (until.IsZero() && n.GetUntil() != nil) || (!until.IsZero() && !n.GetUntil().AsTime().Equal(until)) {
			t.Errorf("%s: Get next until = %v, want %v", desc, n.GetUntil(), until)
		}
		if !strings.Contains(n.GetExplanation(), words) {
			t.Errorf("%s: Get next explanation = %q, want it to say %q", desc, n.GetExplanation(), words)
		}
		res := claim(key)
		if res.GetOutcome() != n.GetOutcome() || res.GetReason() != n.GetReason() {
			t.Errorf("%s: Claim = %v/%v, but Get said %v/%v", desc, res.GetOutcome(), res.GetReason(), n.GetOutcome(), n.GetReason())
		}
		return res
	}
	first := claim("evt_1")
	lease, window := first.GetLeaseExpiresAt().AsTime(), first.GetWindowExpiresAt().AsTime()
	check("held", "evt_1", pb.Outcome_OUTCOME_IN_PROGRESS, pb.Reason_REASON_UNSPECIFIED, lease, `held by "pod-a" (token 1, state RECEIVED)`)
	clk.Set(lease)
	took := check("lease over", "evt_1", pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_LEASE_EXPIRED, time.Time{}, "takes it over (token 2) in state RECEIVED")
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1",
			FencingToken: took.GetFencingToken(), LeaseSecret: took.GetLeaseSecret(), To: to}); err != nil {
			t.Fatal(err)
		}
	}
	check("settled", "evt_1", pb.Outcome_OUTCOME_DUPLICATE, pb.Reason_REASON_UNSPECIFIED, window, "settled; duplicates are suppressed")
	clk.Set(window)
	check("window over", "evt_1", pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_WINDOW_EXPIRED, time.Time{}, "the window ended")

	r := claim("evt_2")
	if _, err := claims.Release(ctx, &pb.ReleaseRequest{Namespace: "billing", Provider: "stripe", Key: "evt_2",
		FencingToken: r.GetFencingToken(), LeaseSecret: r.GetLeaseSecret()}); err != nil {
		t.Fatal(err)
	}
	check("released", "evt_2", pb.Outcome_OUTCOME_ACQUIRED, pb.Reason_REASON_RELEASED, time.Time{}, `released by "pod-a"`)
}

// TestListClaimsPagesBoundedInBytes: sixty settled records with 64 KiB
// results (3.75 MiB) do not fit one page under MaxListResponseBytes: the
// first page ends early with a token, the second holds the rest, each
// record is listed once, and no page comes near a gRPC client's default
// 4 MiB receive limit (a thousand such records would be 64 MiB).
func TestListClaimsPagesBoundedInBytes(t *testing.T) {
	clk := clock.NewFake(time.Now())
	svc := newTestService(t, embedded(t), clk)
	conn := dialConn(t, svc)
	claims, inspect := pb.NewClaimServiceClient(conn), pb.NewInspectServiceClient(conn)
	ctx := context.Background()
	result := []byte(strings.Repeat("r", MaxResultBytes))
	const n = 60
	for i := range n {
		clk.Advance(time.Millisecond)
		res, err := claims.Claim(ctx, claimReq(func(r *pb.ClaimRequest) {
			r.Key = &pb.ClaimRequest_EventId{EventId: fmt.Sprintf("evt_%02d", i)}
			r.Start = true
		}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: res.GetKey(),
			FencingToken: res.GetFencingToken(), LeaseSecret: res.GetLeaseSecret(), To: pb.EventState_EVENT_STATE_SETTLED, Result: result}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	req := &pb.ListClaimsRequest{Namespace: "billing", PageSize: 1000}
	var pages []int
	for {
		resp, err := inspect.ListClaims(ctx, req)
		if err != nil {
			t.Fatalf("ListClaims(page %d) error = %v", len(pages), err)
		}
		pages = append(pages, len(resp.GetRecords()))
		if sz := proto.Size(resp); sz > MaxListResponseBytes+MaxResultBytes+4096 {
			t.Errorf("ListClaims page %d is %d bytes, want at most about %d", len(pages), sz, MaxListResponseBytes)
		}
		for _, r := range resp.GetRecords() {
			if seen[r.GetKey()] || len(r.GetResult()) != MaxResultBytes {
				t.Fatalf("ListClaims listed %q twice, or without its result", r.GetKey())
			}
			seen[r.GetKey()] = true
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if len(seen) != n || len(pages) < 2 {
		t.Fatalf("ListClaims pages = %v (%d records), want every one of %d records over at least two pages", pages, len(seen), n)
	}
}
