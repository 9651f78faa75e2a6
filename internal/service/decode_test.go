package service

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers/tierstest"
)

// wire builds a request's bytes field by field, so that a test can send
// what the generated client refuses to marshal (invalid UTF-8 in a string).
// Each append copies, so that one prefix can start several requests.
type wire []byte

func (w wire) str(num protowire.Number, s string) wire {
	b := protowire.AppendTag(slices.Clip(w), num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func (w wire) msg(num protowire.Number, m wire) wire {
	b := protowire.AppendTag(slices.Clip(w), num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func (w wire) varint(num protowire.Number, v uint64) wire {
	b := protowire.AppendTag(slices.Clip(w), num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// invokeRaw calls method with body as the request's bytes: an Empty whose
// unknown fields are body marshals to exactly body.
func invokeRaw(ctx context.Context, conn *grpc.ClientConn, method string, body wire, out any) error {
	in := &emptypb.Empty{}
	in.ProtoReflect().SetUnknown(protoreflect.RawFields(body))
	return conn.Invoke(ctx, method, in, out)
}

// TestInvalidUTF8InRequestIsInvalidArgument is the regression test of a
// request string with invalid UTF-8 coming back INTERNAL "failed to
// unmarshal": it is bad input, answered INVALID_ARGUMENT naming the field,
// and nothing reaches the store.
func TestInvalidUTF8InRequestIsInvalidArgument(t *testing.T) {
	store := &tierstest.CountingStore{Store: embedded(t)}
	conn := dialConn(t, newTestService(t, store, clock.NewFake(time.Now())))
	claim := wire(nil).str(1, "billing").str(2, "stripe")
	tests := []struct {
		desc   string
		method string
		body   wire
		out    any
		field  string
	}{
		{"claim event_id", pb.ClaimService_Claim_FullMethodName, claim.str(3, "evt\xff"), &pb.ClaimResponse{}, "ClaimRequest.event_id"},
		{"claim namespace", pb.ClaimService_Claim_FullMethodName, wire(nil).str(1, "bill\xfeing").str(2, "stripe").str(3, "evt_1"), &pb.ClaimResponse{}, "ClaimRequest.namespace"},
		{"claim delivery header", pb.ClaimService_Claim_FullMethodName,
			claim.msg(4, wire(nil).msg(1, wire(nil).str(1, "X-Id").str(2, "v\xff"))), &pb.ClaimResponse{}, "ClaimRequest.delivery.headers"},
		{"transition key", pb.ClaimService_Transition_FullMethodName,
			claim.str(3, "evt\xc0").varint(4, 1).varint(5, uint64(pb.EventState_EVENT_STATE_PROCESSING)), &pb.TransitionResponse{}, "TransitionRequest.key"},
		{"get provider name", pb.ProviderService_GetProvider_FullMethodName, wire(nil).str(1, "str\xffipe"), &pb.GetProviderResponse{}, "GetProviderRequest.name"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			err := invokeRaw(context.Background(), conn, tc.method, tc.body, tc.out)
			code, field, desc := fieldOf(err)
			if code != codes.InvalidArgument || field != tc.field {
				t.Fatalf("%s with invalid UTF-8 = %v %q %q (%v), want INVALID_ARGUMENT %q", tc.method, code, field, desc, err, tc.field)
			}
		})
	}
	if n := store.Writes.Load(); n != 0 {
		t.Fatalf("requests with invalid UTF-8 reached the store %d times", n)
	}
	// A well-formed request still goes through the same decoding.
	var resp pb.ClaimResponse
	if err := invokeRaw(context.Background(), conn, pb.ClaimService_Claim_FullMethodName, claim.str(3, "evt_ok"), &resp); err != nil || resp.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim(valid raw request) = %v, %v; want ACQUIRED", resp.Outcome, err)
	}
}
