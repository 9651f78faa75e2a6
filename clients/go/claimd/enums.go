package claimd

import pb "github.com/claimd/claimd/gen/idempotency/v1"

// Event states, re-exported so that callers rarely need the generated
// package.
const (
	StateReceived   = pb.EventState_EVENT_STATE_RECEIVED
	StateValidated  = pb.EventState_EVENT_STATE_VALIDATED
	StateProcessing = pb.EventState_EVENT_STATE_PROCESSING
	StateSettled    = pb.EventState_EVENT_STATE_SETTLED
	StateFailed     = pb.EventState_EVENT_STATE_FAILED
)

// Outcomes of a Claim, re-exported.
const (
	OutcomeAcquired        = pb.Outcome_OUTCOME_ACQUIRED
	OutcomeDuplicate       = pb.Outcome_OUTCOME_DUPLICATE
	OutcomeInProgress      = pb.Outcome_OUTCOME_IN_PROGRESS
	OutcomePayloadMismatch = pb.Outcome_OUTCOME_PAYLOAD_MISMATCH
	OutcomeDeferred        = pb.Outcome_OUTCOME_DEFERRED
	OutcomeSuperseded      = pb.Outcome_OUTCOME_SUPERSEDED
)

// Reasons for an ACQUIRED claim, re-exported.
const (
	ReasonNew           = pb.Reason_REASON_NEW
	ReasonReleased      = pb.Reason_REASON_RELEASED
	ReasonLeaseExpired  = pb.Reason_REASON_LEASE_EXPIRED
	ReasonWindowExpired = pb.Reason_REASON_WINDOW_EXPIRED
)
