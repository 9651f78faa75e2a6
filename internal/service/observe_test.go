package service

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
)

// TestRequestLabels pins the names logs, spans and metrics give a request:
// dashboards and alerts select on them.
func TestRequestLabels(t *testing.T) {
	type labels struct{ Outcome, Reason, ServedBy, KeySource, CacheState, Transition string }
	tests := []struct {
		desc string
		r    Request
		want labels
	}{
		{"first claim", Request{Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonNew, ServedBy: tiers.TierDurable, KeySource: horizon.KeySourceEventID, To: tiers.StateReceived},
			labels{"ACQUIRED", "NEW", "DURABLE", "EVENT_ID", CacheMiss, "→RECEIVED"}},
		{"takeover keeps the state", Request{Outcome: tiers.OutcomeAcquired, Reason: tiers.ReasonLeaseExpired, ServedBy: tiers.TierDurable, KeySource: horizon.KeySourceHeader, State: tiers.StateProcessing},
			labels{"ACQUIRED", "LEASE_EXPIRED", "DURABLE", "HEADER", CacheMiss, ""}},
		{"duplicate from the local cache", Request{Outcome: tiers.OutcomeDuplicate, ServedBy: tiers.TierLocal, KeySource: horizon.KeySourceBodyField},
			labels{"DUPLICATE", "NONE", "LOCAL", "BODY_FIELD", CacheLocalHit, ""}},
		{"in progress from the fast tier", Request{Outcome: tiers.OutcomeInProgress, ServedBy: tiers.TierFast, KeySource: horizon.KeySourceBodyHash},
			labels{"IN_PROGRESS", "NONE", "FAST", "BODY_HASH", CacheFastHit, ""}},
		{"deferred lifecycle event", Request{Outcome: tiers.OutcomeDeferred, ServedBy: tiers.TierDurable, KeySource: horizon.KeySourceEventID},
			labels{"DEFERRED", "NONE", "DURABLE", "EVENT_ID", CacheMiss, ""}},
		{"superseded lifecycle event", Request{Outcome: tiers.OutcomeSuperseded, ServedBy: tiers.TierDurable, KeySource: horizon.KeySourceBodyField},
			labels{"SUPERSEDED", "NONE", "DURABLE", "BODY_FIELD", CacheMiss, ""}},
		{"durable tier down", Request{Code: codes.Unavailable, ErrReason: ReasonDurableUnavailable, KeySource: horizon.KeySourceEventID},
			labels{"ERROR", ReasonDurableUnavailable, "NONE", "EVENT_ID", "", ""}},
		{"bad input", Request{Code: codes.InvalidArgument, ErrReason: ReasonInvalidArgument},
			labels{"ERROR", ReasonInvalidArgument, "NONE", "NONE", "", ""}},
		{"refused transition", Request{Code: codes.FailedPrecondition, ErrReason: ReasonInvalidTransition, From: tiers.StateSettled, To: tiers.StateProcessing},
			labels{"ERROR", ReasonInvalidTransition, "NONE", "NONE", "", "SETTLED→PROCESSING"}},
	}
	for _, tc := range tests {
		got := labels{tc.r.OutcomeLabel(), tc.r.ReasonLabel(), tc.r.ServedByLabel(), tc.r.KeySourceLabel(), tc.r.CacheState(), tc.r.StateTransition()}
		if got != tc.want {
			t.Errorf("%s: labels = %+v, want %+v", tc.desc, got, tc.want)
		}
	}
}

// TestStateTransitionRejected: only a DEFERRED or SUPERSEDED answer is a
// rejected state transition; a failed claim is not, whatever it carries.
func TestStateTransitionRejected(t *testing.T) {
	for _, tc := range []struct {
		r    Request
		want bool
	}{
		{Request{Outcome: tiers.OutcomeDeferred}, true},
		{Request{Outcome: tiers.OutcomeSuperseded}, true},
		{Request{Outcome: tiers.OutcomeAcquired}, false},
		{Request{Outcome: tiers.OutcomeDuplicate}, false},
		{Request{Outcome: tiers.OutcomeDeferred, Code: codes.Internal}, false},
	} {
		if got := tc.r.StateTransitionRejected(); got != tc.want {
			t.Errorf("Request{%v, code %v}.StateTransitionRejected() = %v, want %v", tc.r.Outcome, tc.r.Code, got, tc.want)
		}
	}
}

func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.Canceled: "CANCELED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Unavailable: "UNAVAILABLE",
	} {
		if got := codeName(c); got != want {
			t.Errorf("codeName(%v) = %q, want %q", c, got, want)
		}
	}
}
