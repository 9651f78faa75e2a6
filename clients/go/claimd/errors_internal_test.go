package claimd

import (
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// refusal is a status as claimd sends it: code, message and an ErrorInfo.
func refusal(t *testing.T, c codes.Code, reason string) error {
	t.Helper()
	st := status.New(c, "refused")
	if reason != "" {
		var err error
		if st, err = st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err != nil {
			t.Fatal(err)
		}
	}
	return st.Err()
}

func TestErrorIsDecidedByReason(t *testing.T) {
	sentinels := []error{ErrStaleToken, ErrNotOwner, ErrInvalidTransition, ErrResultMismatch, ErrNotFound, ErrUnavailable}
	tests := []struct {
		desc   string
		code   codes.Code
		reason string
		want   error // nil: none of the sentinels
	}{
		{desc: "stale token from this claimd", code: codes.Aborted, reason: ErrorReasonStaleToken, want: ErrStaleToken},
		{desc: "stale token from an older claimd", code: codes.FailedPrecondition, reason: ErrorReasonStaleToken, want: ErrStaleToken},
		{desc: "invalid transition", code: codes.FailedPrecondition, reason: ErrorReasonInvalidTransition, want: ErrInvalidTransition},
		{desc: "result mismatch", code: codes.FailedPrecondition, reason: ErrorReasonResultMismatch, want: ErrResultMismatch},
		{desc: "not the owner", code: codes.PermissionDenied, reason: ErrorReasonNotOwner, want: ErrNotOwner},
		{desc: "aborted without claimd's reason", code: codes.Aborted, want: nil},
	}
	for _, tt := range tests {
		err := newError("Renew", refusal(t, tt.code, tt.reason), 1)
		for _, s := range sentinels {
			if got, want := errors.Is(err, s), s == tt.want; got != want {
				t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tt.desc, err, s, got, want)
			}
		}
		if err.Code != tt.code || err.Reason != tt.reason {
			t.Errorf("%s: Code, Reason = %v, %q; want %v, %q", tt.desc, err.Code, err.Reason, tt.code, tt.reason)
		}
	}
}

func TestErrorReasonsAreTheProtoNames(t *testing.T) {
	exported := map[string]bool{}
	for _, r := range []string{
		ErrorReasonInvalidTransition, ErrorReasonResultMismatch, ErrorReasonStaleToken, ErrorReasonNotOwner,
		ErrorReasonRecordNotFound, ErrorReasonProviderNotFound, ErrorReasonDurableUnavailable, ErrorReasonInvalidArgument,
		ErrorReasonEntityNotFound, ErrorReasonLifecycleNotFound, ErrorReasonInternal,
		ErrorReasonCredentialsMissing, ErrorReasonTokenMalformed, ErrorReasonTokenUnknown, ErrorReasonIdentityUnknown,
		ErrorReasonPrincipalConflict, ErrorReasonNamespaceDenied, ErrorReasonRoleDenied, ErrorReasonMethodDenied,
		ErrorReasonRateLimited,
		ErrorReasonRequestTooLarge, ErrorReasonHostNotAllowed, ErrorReasonOriginNotAllowed, ErrorReasonContentTypeUnsupported,
	} {
		exported[r] = true
	}
	// Every reason claimd can send has a name here, so a reason added to the
	// proto fails this test until the client names it.
	for v, name := range pb.ErrorReason_name {
		if v == int32(pb.ErrorReason_ERROR_REASON_UNSPECIFIED) {
			continue
		}
		if !exported[name] {
			t.Errorf("ErrorReason %s has no ErrorReason… variable in the client", name)
		}
		delete(exported, name)
	}
	for r := range exported {
		t.Errorf("ErrorReason… variable %q is not a name of idempotency.v1.ErrorReason", r)
	}
}
