// Package chaos holds what claimd's fault-injection suite (cmd/chaos, `make
// chaos`) knows about correctness: the record of every call a run made (a
// History of Ops), a sequential model of the claim register for the
// linearizability checker porcupine, the invariants a history must keep,
// and the TCP proxy that loses replies after the server sent them.
//
// It never starts a process and never talks to claimd: cmd/chaos drives the
// load and the faults and hands the history, the durable tier's audit log
// and the final probes to Check.
package chaos

import (
	"fmt"
	"sort"
	"sync"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Kind names an operation of the claim register.
type Kind uint8

// The operations a run records.
const (
	KindClaim Kind = iota + 1
	KindTransition
	KindRelease
)

func (k Kind) String() string {
	switch k {
	case KindClaim:
		return "Claim"
	case KindTransition:
		return "Transition"
	case KindRelease:
		return "Release"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Op is one call as a caller made and saw it: the request, the times it was
// invoked and completed (unix nanoseconds of the wall clock, which claimd
// shares on this host), and the answer or the error code.
type Op struct {
	ID      int    // index in the History, set by Add
	Client  int    // the caller (one goroutine, one delivery at a time)
	Key     string // the canonical key (the event id: the load sends no scope)
	Replica string // which replica (or proxy) the call went to
	Kind    Kind
	Probe   bool // a final probe of the run, not load
	Cutoff  bool // failed because the run's own time bound ended it, not the server

	// The request.
	AttemptID string        // Claim: the delivery's attempt_id (also sent as holder)
	Start     bool          // Claim: asked to start in PROCESSING (ClaimRequest.start)
	Token     uint64        // Transition, Release: the fencing token presented
	To        pb.EventState // Transition: the target state
	Result    string        // Transition to SETTLED: the result stored

	// Claim of an entity event (the lifecycle scenarios): its entity and
	// type, sent as entity_id and event_type.
	Lifecycle, EntityID, EventType string

	Deadline  int64         // the call's deadline in nanoseconds (0: none)
	Invoke    int64         // unix nanoseconds before the call
	Complete  int64         // unix nanoseconds after it returned
	Code      codes.Code    // codes.OK or the error's code
	ErrReason string        // the google.rpc.ErrorInfo reason of an error, if any
	Outcome   pb.Outcome    // Claim answered: the outcome
	Reason    pb.Reason     // Claim answered ACQUIRED: why
	AckToken  uint64        // Claim: fencing_token; Transition, Release: record.fencing_token
	AckResult string        // Claim DUPLICATE: result; Transition: record.result
	AckHolder string        // Claim: holder (empty for a pending marker's IN_PROGRESS)
	AckState  pb.EventState // the record's state in the answer
	Changed   bool          // Transition: changed
	ServedBy  pb.Tier       // Claim: served_by
	EntState  string        // Claim of an entity event: entity.state, where the entity stood when it was decided
	BusyWith  string        // Claim DEFERRED: entity.busy_with, the event type holding the entity
	Released  bool          // Release, Transition: record.released
	Message   string        // the error message (clipped), for the report
}

// Answered reports whether the call got an answer of the API (as opposed to
// a failure whose effect is unknown). Transition and Release answer
// ABORTED, FAILED_PRECONDITION and NOT_FOUND as part of their contract.
func (o *Op) Answered() bool {
	switch o.Code {
	case codes.OK:
		return true
	case codes.Aborted, codes.FailedPrecondition, codes.NotFound:
		return o.Kind != KindClaim
	}
	return false
}

// FromMarker reports whether a Claim was answered IN_PROGRESS by a pending
// marker: a claim in flight (or one that never committed) that has no holder
// yet. Every call of the load sends a holder, so an empty one means a marker.
func (o *Op) FromMarker() bool {
	return o.Kind == KindClaim && o.Code == codes.OK && o.Outcome == pb.Outcome_OUTCOME_IN_PROGRESS && o.AckHolder == ""
}

// Retryable reports whether a failure carries a code the contract allows
// for a transient fault: the caller retries the same call.
func Retryable(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled
}

// String renders the op for reports and the visualization.
func (o *Op) String() string { return o.requestString() + " → " + o.AnswerString() }

// AnswerString renders the answer alone.
func (o *Op) AnswerString() string {
	if o.Code != codes.OK {
		if o.ErrReason != "" {
			return o.Code.String() + "/" + o.ErrReason
		}
		return o.Code.String()
	}
	switch o.Kind {
	case KindClaim:
		s := outcomeName(o.Outcome)
		switch o.Outcome {
		case pb.Outcome_OUTCOME_ACQUIRED:
			s += fmt.Sprintf(" t%d %s", o.AckToken, reasonName(o.Reason))
		case pb.Outcome_OUTCOME_DUPLICATE:
			s += fmt.Sprintf(" %q", o.AckResult)
		case pb.Outcome_OUTCOME_IN_PROGRESS:
			if o.AckHolder == "" {
				s += " (pending marker)"
			} else {
				s += " held by " + o.AckHolder
			}
		}
		if o.EntityID != "" && o.EntState != "" {
			s += " in " + o.EntState
			if o.BusyWith != "" {
				s += " busy with " + o.BusyWith
			}
		}
		return s + " via " + tierName(o.ServedBy)
	case KindTransition:
		return fmt.Sprintf("OK %s changed=%v", stateName(o.AckState), o.Changed)
	}
	return fmt.Sprintf("OK released=%v", o.Released)
}

// History is every call of a run, safe for concurrent Add.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records op and returns its ID.
func (h *History) Add(op Op) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	op.ID = len(h.ops)
	h.ops = append(h.ops, op)
	return op.ID
}

// Ops returns a copy of the recorded calls in the order they were added.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// byKey groups ops by key, each group in invoke order.
func byKey(ops []Op) map[string][]Op {
	m := map[string][]Op{}
	for _, o := range ops {
		m[o.Key] = append(m[o.Key], o)
	}
	for _, g := range m {
		sort.SliceStable(g, func(i, j int) bool { return g[i].Invoke < g[j].Invoke })
	}
	return m
}

func stateName(s pb.EventState) string {
	return trimPrefix(s.String(), "EVENT_STATE_")
}

func outcomeName(o pb.Outcome) string { return trimPrefix(o.String(), "OUTCOME_") }
func reasonName(r pb.Reason) string   { return trimPrefix(r.String(), "REASON_") }
func tierName(t pb.Tier) string       { return trimPrefix(t.String(), "TIER_") }

func trimPrefix(s, p string) string {
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
