package tiers

import (
	"errors"
	"fmt"
)

// Sentinel errors of the storage contract. Backends wrap them (%w) with
// detail; the service maps them to gRPC codes with errors.Is.
var (
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("record not found")
	// ErrEntityNotFound: no entity of that lifecycle and id.
	ErrEntityNotFound = errors.New("entity not found")
	// ErrInvalidCursor: ListDeferredParams.After is not a cursor a
	// ListDeferred returned.
	ErrInvalidCursor = errors.New("invalid page cursor")
	// ErrStaleToken: the presented fencing token is not the current owner's
	// (a newer holder took over, or the key was released).
	ErrStaleToken = errors.New("stale fencing token")
	// ErrNotOwner: the fencing token is the current one but the lease secret
	// presented with it is not its owner's (a caller that learned the token,
	// say from Get, without having acquired the key).
	ErrNotOwner = errors.New("lease secret does not match the owner's")
	// ErrUnavailable: the tier could not be reached or did not answer in
	// time. For a write, the write may or may not have happened; callers must
	// stay correct either way (a retried Claim is never a false DUPLICATE:
	// at worst IN_PROGRESS until the lease ends).
	ErrUnavailable = errors.New("tier unavailable")
)

// TransitionError reports a transition (or renew/release) that the state
// machine does not allow from the record's current state.
type TransitionError struct {
	Current State
	To      State // StateUnspecified for Renew and Release
	Op      string
}

func (e *TransitionError) Error() string {
	if e.To == StateUnspecified {
		return fmt.Sprintf("%s not allowed in state %s", e.Op, e.Current)
	}
	return fmt.Sprintf("transition %s→%s not allowed", e.Current, e.To)
}

// ResultMismatchError reports a terminal transition (SETTLED or FAILED)
// repeated, with the current token, carrying a result other than the stored
// one. Nothing is written: the first result stands, and the caller must not
// believe that its own was kept.
type ResultMismatchError struct {
	Current State
}

func (e *ResultMismatchError) Error() string {
	return fmt.Sprintf("already %s with a different result; the stored result stands", e.Current)
}

// Unavailable wraps err as ErrUnavailable, keeping its text.
func Unavailable(tier string, err error) error {
	return fmt.Errorf("%s: %w: %w", tier, ErrUnavailable, err)
}
