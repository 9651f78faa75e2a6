package claimd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of claimd's errors.
const ErrorDomain = "claimd.dev"

// ErrorInfo reasons that claimd attaches to its errors. Branch on these (or on
// the sentinels below), never on message text. They are the names of the
// proto's ErrorReason (the reason string is the value's name), taken from the
// generated code so that no list of them is typed by hand.
var (
	ErrorReasonInvalidTransition  = pb.ErrorReason_INVALID_TRANSITION.String()
	ErrorReasonResultMismatch     = pb.ErrorReason_RESULT_MISMATCH.String()
	ErrorReasonStaleToken         = pb.ErrorReason_STALE_TOKEN.String()
	ErrorReasonNotOwner           = pb.ErrorReason_NOT_OWNER.String()
	ErrorReasonRecordNotFound     = pb.ErrorReason_RECORD_NOT_FOUND.String()
	ErrorReasonProviderNotFound   = pb.ErrorReason_PROVIDER_NOT_FOUND.String()
	ErrorReasonDurableUnavailable = pb.ErrorReason_DURABLE_TIER_UNAVAILABLE.String()
	ErrorReasonInvalidArgument    = pb.ErrorReason_INVALID_ARGUMENT.String()
	ErrorReasonEntityNotFound     = pb.ErrorReason_ENTITY_NOT_FOUND.String()    // no entity of that lifecycle and id
	ErrorReasonLifecycleNotFound  = pb.ErrorReason_LIFECYCLE_NOT_FOUND.String() // the provider declares no such lifecycle
	ErrorReasonInternal           = pb.ErrorReason_INTERNAL.String()            // a bug in claimd; its log has the detail

	// Reasons of a claimd that authenticates callers (--auth-file,
	// --tls-client-ca). UNAUTHENTICATED carries one of these:
	ErrorReasonCredentialsMissing = pb.ErrorReason_CREDENTIALS_MISSING.String() // no token and no known client certificate
	ErrorReasonTokenMalformed     = pb.ErrorReason_TOKEN_MALFORMED.String()     // the authorization metadata is not "Bearer <token>"
	ErrorReasonTokenUnknown       = pb.ErrorReason_TOKEN_UNKNOWN.String()       // revoked, mistyped, or another server's token
	ErrorReasonIdentityUnknown    = pb.ErrorReason_IDENTITY_UNKNOWN.String()    // the client certificate names no principal
	ErrorReasonPrincipalConflict  = pb.ErrorReason_PRINCIPAL_CONFLICT.String()  // token and certificate name different principals
	// PERMISSION_DENIED carries one of these, and the principal in Metadata:
	ErrorReasonNamespaceDenied = pb.ErrorReason_NAMESPACE_DENIED.String() // the principal may not use the request's namespace
	ErrorReasonRoleDenied      = pb.ErrorReason_ROLE_DENIED.String()      // the principal lacks the method's role
	ErrorReasonMethodDenied    = pb.ErrorReason_METHOD_DENIED.String()    // the method is open to no role
	// RESOURCE_EXHAUSTED carries this, with a RetryInfo (Error.RetryDelay):
	ErrorReasonRateLimited = pb.ErrorReason_RATE_LIMITED.String()

	// Reasons of the HTTP front door (the gateway), for clients that speak
	// HTTP/JSON or Connect to it:
	ErrorReasonRequestTooLarge        = pb.ErrorReason_REQUEST_TOO_LARGE.String()        // the body is past its bound (RESOURCE_EXHAUSTED, 413)
	ErrorReasonHostNotAllowed         = pb.ErrorReason_HOST_NOT_ALLOWED.String()         // Host is not one of --http-allowed-hosts (421)
	ErrorReasonOriginNotAllowed       = pb.ErrorReason_ORIGIN_NOT_ALLOWED.String()       // Origin's host is not allowed (403)
	ErrorReasonContentTypeUnsupported = pb.ErrorReason_CONTENT_TYPE_UNSUPPORTED.String() // a write neither JSON nor protobuf (415)
)

// Sentinels matched by errors.Is against the *Error that every call returns.
var (
	// ErrStaleToken: a newer holder took the key over (or the token was
	// released); the caller no longer owns it and must not settle it.
	// claimd answers it ABORTED (older servers FAILED_PRECONDITION), with
	// reason STALE_TOKEN.
	ErrStaleToken = errors.New("claimd: stale fencing token")
	// ErrNotOwner: the fencing token is the current one but the lease secret
	// is not its owner's (PERMISSION_DENIED). Only the Lease of an ACQUIRED
	// Claim writes a record; a token read with Get does not.
	ErrNotOwner = errors.New("claimd: not the owner of the lease")
	// ErrInvalidTransition: the state machine does not allow the move, e.g.
	// the record is already SETTLED or FAILED.
	ErrInvalidTransition = errors.New("claimd: invalid transition")
	// ErrResultMismatch: SETTLED or FAILED repeated, with the current
	// token, carrying another result than the stored one. Nothing was
	// written: the first result stands.
	ErrResultMismatch = errors.New("claimd: terminal already, with another result")
	// ErrNotFound: no record for (namespace, provider, key).
	ErrNotFound = errors.New("claimd: record not found")
	// ErrProviderNotFound: the provider name is not registered on the server.
	ErrProviderNotFound = errors.New("claimd: provider not registered")
	// ErrInvalidArgument: claimd rejected the request's fields; nothing was
	// written.
	ErrInvalidArgument = errors.New("claimd: invalid argument")
	// ErrUnavailable: claimd did not answer in time (unreachable, its durable
	// tier is down, or the deadline passed). Claims fail closed with it, so a
	// provider retry later is always safe.
	ErrUnavailable = errors.New("claimd: unavailable")
	// ErrUnauthenticated: claimd requires credentials and the call's were
	// missing or not recognised (Error.Reason says which). Nothing was
	// written; fix the token or certificate, retrying changes nothing.
	ErrUnauthenticated = errors.New("claimd: unauthenticated")
	// ErrPermissionDenied: the caller's principal may not use the namespace
	// or call the method (Error.Reason says which, Metadata["principal"]
	// who). Nothing was written. It matches every PERMISSION_DENIED, so an
	// error matching ErrNotOwner matches it too: test ErrNotOwner first.
	ErrPermissionDenied = errors.New("claimd: permission denied")
	// ErrResourceExhausted: the caller's principal is over its rate limit,
	// still after the retries the policy allowed; Error.RetryDelay says when
	// claimd accepts calls again. Nothing was written.
	ErrResourceExhausted = errors.New("claimd: rate limited")
	// ErrPayloadMismatch is the Outcome.Err of a guard whose delivery reused
	// a key with a different payload; it deserves an alert.
	ErrPayloadMismatch = errors.New("claimd: same key, different payload")
)

// Error is a failed call to claimd, after the client's own retries.
type Error struct {
	// Op is the RPC that failed: "Claim", "Transition", "Renew", "Release",
	// "Get" or "Dial".
	Op string
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the google.rpc.ErrorInfo reason, empty when claimd sent none
	// (a transport error, for instance).
	Reason string
	// Metadata is the ErrorInfo metadata, e.g. current_state for
	// INVALID_TRANSITION.
	Metadata map[string]string
	// Message is the status message.
	Message string
	// Attempts is how many times the call was sent.
	Attempts int
	// RetryDelay is the google.rpc.RetryInfo delay claimd sent with
	// RESOURCE_EXHAUSTED: how long until the rate limit admits a call.
	RetryDelay time.Duration
	// Fields are the fields a google.rpc.BadRequest names
	// ("ClaimRequest.lease"); empty when claimd sent none.
	Fields []string

	st *status.Status
}

// Error implements error.
func (e *Error) Error() string {
	reason := ""
	if e.Reason != "" {
		reason = " " + e.Reason
	}
	return fmt.Sprintf("claimd: %s: %s%s: %s", e.Op, e.Code, reason, e.Message)
}

// GRPCStatus lets status.Code and status.FromError see through the wrapper.
func (e *Error) GRPCStatus() *status.Status { return e.st }

// Is maps the error onto the package's sentinels by code and ErrorInfo
// reason, so callers never compare messages. Where a reason names the error
// the reason alone decides, whatever the code: a stale token is ABORTED from
// this claimd and FAILED_PRECONDITION from older ones, and matches
// ErrStaleToken from both.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrStaleToken:
		return e.Reason == ErrorReasonStaleToken
	case ErrNotOwner:
		return e.Reason == ErrorReasonNotOwner
	case ErrInvalidTransition:
		return e.Reason == ErrorReasonInvalidTransition
	case ErrResultMismatch:
		return e.Reason == ErrorReasonResultMismatch
	case ErrNotFound:
		return e.Code == codes.NotFound && e.Reason != ErrorReasonProviderNotFound
	case ErrProviderNotFound:
		return e.Reason == ErrorReasonProviderNotFound
	case ErrInvalidArgument:
		return e.Code == codes.InvalidArgument
	case ErrUnavailable:
		return e.Code == codes.Unavailable || e.Code == codes.DeadlineExceeded
	case ErrUnauthenticated:
		return e.Code == codes.Unauthenticated
	case ErrPermissionDenied:
		return e.Code == codes.PermissionDenied
	case ErrResourceExhausted:
		return e.Code == codes.ResourceExhausted
	}
	return false
}

// newError turns a gRPC error into an *Error. Errors that carry no status
// (none should reach here) become codes.Unknown.
func newError(op string, err error, attempts int) *Error {
	st, _ := status.FromError(err)
	e := &Error{Op: op, Code: st.Code(), Message: st.Message(), Attempts: attempts, RetryDelay: retryDelay(st), st: st}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == ErrorDomain {
				e.Reason, e.Metadata = d.GetReason(), d.GetMetadata()
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				e.Fields = append(e.Fields, v.GetField())
			}
		}
	}
	return e
}

// deliveryFields are the ClaimRequest fields that carry what the provider
// sent (GUARD.md rows 4 and 25).
var deliveryFields = []string{
	"ClaimRequest.delivery", "ClaimRequest.event_id", "ClaimRequest.key",
	"ClaimRequest.entity_id", "ClaimRequest.event_type",
}

// rejectsDelivery reports whether err is an INVALID_ARGUMENT whose
// BadRequest names only deliveryFields: a delivery claimd can never accept
// (400). Any other field, or none, is the receiver's own configuration: only
// what claimd says was wrong with the delivery may tell a provider to stop
// retrying (GUARD.md row 25).
func rejectsDelivery(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.InvalidArgument || len(e.Fields) == 0 {
		return false
	}
	for _, f := range e.Fields {
		if !slices.ContainsFunc(deliveryFields, func(d string) bool {
			return f == d || strings.HasPrefix(f, d+" ") || strings.HasPrefix(f, d+".")
		}) {
			return false
		}
	}
	return true
}

// retryDelay is the RetryInfo delay of st, 0 when it carries none.
func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().IsValid() {
			return max(ri.GetRetryDelay().AsDuration(), 0)
		}
	}
	return 0
}

// permanentError marks a handler failure that retrying cannot fix.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent marks err as a permanent failure for Guard: the event is moved
// to FAILED (with the error text as its result) and the provider is told to
// stop retrying. Any error not so marked is retryable. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
