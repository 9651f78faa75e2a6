package service

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/textclip"
	"github.com/claimd/claimd/internal/tiers"
)

// ErrorDomain is the ErrorInfo domain of every error claimd returns, declared
// once in internal/auth (which service imports, and not the other way round).
const ErrorDomain = auth.ErrorDomain

// ErrorInfo reasons: the names of the proto's ErrorReason, so that no
// language types them by hand. Clients branch on these, not on messages.
var (
	ReasonInvalidTransition  = pb.ErrorReason_INVALID_TRANSITION.String()
	ReasonStaleToken         = pb.ErrorReason_STALE_TOKEN.String()
	ReasonNotOwner           = pb.ErrorReason_NOT_OWNER.String()
	ReasonRecordNotFound     = pb.ErrorReason_RECORD_NOT_FOUND.String()
	ReasonProviderNotFound   = pb.ErrorReason_PROVIDER_NOT_FOUND.String()
	ReasonDurableUnavailable = pb.ErrorReason_DURABLE_TIER_UNAVAILABLE.String()
	ReasonInvalidArgument    = pb.ErrorReason_INVALID_ARGUMENT.String()
	// ReasonResultMismatch: SETTLED or FAILED repeated with a result other
	// than the stored one; the stored result stands and nothing was written.
	ReasonResultMismatch = pb.ErrorReason_RESULT_MISMATCH.String()
	reasonInternal       = pb.ErrorReason_INTERNAL.String()
)

// violation is one bad field: its path in the request and the rule broken.
type violation struct {
	field, desc string
}

// invalidArgument is bad input: every violation found, none written.
type invalidArgument struct {
	violations []violation
}

func (e *invalidArgument) Error() string {
	parts := make([]string, len(e.violations))
	for i, v := range e.violations {
		parts[i] = v.field + ": " + v.desc
	}
	return strings.Join(parts, "; ")
}

// providerNotFound is a provider name missing from the registry.
type providerNotFound struct {
	field, name string
}

func (e *providerNotFound) Error() string {
	return fmt.Sprintf("%s: provider %s is not registered (see ListProviders)", e.field, quote(e.name))
}

// lifecycleNotFound is a lifecycle the provider does not declare.
type lifecycleNotFound struct {
	field, provider, name string
}

func (e *lifecycleNotFound) Error() string {
	return fmt.Sprintf("%s: provider %s declares no lifecycle %s (see GetProvider)", e.field, e.provider, quote(e.name))
}

// errNoEntities: the store keeps no entities (it does not implement
// tiers.Entities), so EntityService has nothing to read.
var errNoEntities = errors.New("the store keeps no entity lifecycles")

// toStatus is the one place where errors become gRPC statuses. Tiers and
// horizon return sentinels and typed errors; they are matched with
// errors.Is/As so wrapping never turns them into Unknown.
//
// A store error's text is for the log (finish writes it there): it names
// backends, addresses and the current holder's token. The caller gets a
// message in its own terms, the ErrorInfo reason and, for bad input, the
// field.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var (
		inv *invalidArgument
		pnf *providerNotFound
		lnf *lifecycleNotFound
		te  *tiers.TransitionError
		rm  *tiers.ResultMismatchError
	)
	switch {
	case errors.As(err, &inv):
		br := &errdetails.BadRequest{}
		for _, v := range inv.violations {
			br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.field, Description: v.desc})
		}
		return withDetails(codes.InvalidArgument, err.Error(), br, info(ReasonInvalidArgument, nil))
	case errors.As(err, &pnf):
		return withDetails(codes.NotFound, err.Error(), info(ReasonProviderNotFound, map[string]string{"provider": logField(pnf.name)}))
	case errors.As(err, &lnf):
		return withDetails(codes.NotFound, err.Error(), info(pb.ErrorReason_LIFECYCLE_NOT_FOUND.String(), map[string]string{"lifecycle": logField(lnf.name)}))
	case errors.Is(err, tiers.ErrEntityNotFound):
		return withDetails(codes.NotFound, msgEntityNotFound, info(pb.ErrorReason_ENTITY_NOT_FOUND.String(), nil))
	case errors.Is(err, errNoEntities), errors.Is(err, errNoInspector):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, tiers.ErrInvalidCursor):
		return toStatus(&invalidArgument{violations: []violation{{field: "ListDeferredRequest.page_token", desc: "not a next_page_token of this listing"}}})
	case errors.As(err, &te):
		md := map[string]string{"current_state": stateName(te.Current)}
		if te.To != tiers.StateUnspecified {
			md["to"] = stateName(te.To)
		}
		return withDetails(codes.FailedPrecondition, te.Error()+" (current state "+stateName(te.Current)+")", info(ReasonInvalidTransition, md))
	case errors.As(err, &rm):
		return withDetails(codes.FailedPrecondition, rm.Error()+" (current state "+stateName(rm.Current)+")",
			info(ReasonResultMismatch, map[string]string{"current_state": stateName(rm.Current)}))
	case errors.Is(err, tiers.ErrStaleToken):
		// ABORTED, not FAILED_PRECONDITION: the caller did nothing wrong,
		// someone else owns the key now, and the code alone says so.
		return withDetails(codes.Aborted, msgStaleToken, info(ReasonStaleToken, nil))
	case errors.Is(err, tiers.ErrNotOwner):
		// The current token without its secret: the caller never acquired
		// the key (it may have read the token with Get). Nothing was written.
		return withDetails(codes.PermissionDenied, msgNotOwner, info(ReasonNotOwner, nil))
	case errors.Is(err, tiers.ErrNotFound):
		return withDetails(codes.NotFound, msgNotFound, info(ReasonRecordNotFound, nil))
	case errors.Is(err, tiers.ErrUnavailable):
		// Fail closed: the provider must retry later, and nothing was left
		// behind that would turn that retry into a false duplicate.
		return withDetails(codes.Unavailable, msgUnavailable, info(ReasonDurableUnavailable, nil))
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, textclip.Cut(err.Error(), maxMessageBytes))
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, textclip.Cut(err.Error(), maxMessageBytes))
	}
	return withDetails(codes.Internal, msgInternal, info(reasonInternal, nil))
}

// Messages of the errors whose detail stays in the log.
const (
	msgStaleToken  = "fencing token is not the current owner's: another holder took the key over, or it was released"
	msgNotOwner    = "lease secret is not the owner's: present the lease_secret that Claim returned with this token"
	msgNotFound    = "no record for this key: it was never claimed, or its window ended and it was pruned"
	msgUnavailable = "durable tier unavailable, retry later"
	msgInternal    = "internal error (the server's log has the detail)"
	// msgEntityNotFound: no event of the entity was ever applied or held.
	msgEntityNotFound = "no such entity: no event of it was claimed in this lifecycle, or it was pruned"
)

func info(reason string, md map[string]string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}
}

// withDetails builds the status. Its message is bounded here, the one
// place every message passes, so no path can echo a caller's input in full.
func withDetails(c codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(c, textclip.Cut(msg, maxMessageBytes))
	if with, err := st.WithDetails(details...); err == nil {
		st = with
	}
	return st.Err()
}

func stateName(s tiers.State) string { return pb.EventState(s).String() }
