package chaos

import (
	"fmt"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// register is the state of one key in the sequential model: DESIGN §2 and
// tiers.Decide with a lease longer than the run, so that a lease never ends
// by itself and time need not be modelled. The zero value is an absent key.
type register struct {
	Exists    bool
	Token     uint64
	State     pb.EventState
	AttemptID string // the current holder's attempt (it is also its holder text)
	Released  bool
	Result    string
}

func (r register) String() string {
	if !r.Exists {
		return "absent"
	}
	s := fmt.Sprintf("t%d %s by %s", r.Token, stateName(r.State), r.AttemptID)
	if r.Released {
		s += " (released)"
	}
	if r.Result != "" {
		s += fmt.Sprintf(" result %q", r.Result)
	}
	return s
}

// Reasons of the refusals the model predicts: STALE_TOKEN is ABORTED,
// INVALID_TRANSITION is FAILED_PRECONDITION.
var (
	reasonStale   = pb.ErrorReason_STALE_TOKEN.String()
	reasonInvalid = pb.ErrorReason_INVALID_TRANSITION.String()
)

// transitions are the allowed moves of DESIGN §2.
var transitions = map[pb.EventState][]pb.EventState{
	pb.EventState_EVENT_STATE_RECEIVED:   {pb.EventState_EVENT_STATE_VALIDATED, pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_FAILED},
	pb.EventState_EVENT_STATE_VALIDATED:  {pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_FAILED},
	pb.EventState_EVENT_STATE_PROCESSING: {pb.EventState_EVENT_STATE_SETTLED, pb.EventState_EVENT_STATE_FAILED},
}

func terminal(s pb.EventState) bool {
	return s == pb.EventState_EVENT_STATE_SETTLED || s == pb.EventState_EVENT_STATE_FAILED
}

func canTransition(from, to pb.EventState) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// step applies the request of in to r and says whether out (nil: the call
// failed, its outcome is unknown) is an answer the register could give.
func step(r register, in, out *Op) (bool, register) {
	switch in.Kind {
	case KindClaim:
		return stepClaim(r, in, out)
	case KindTransition:
		return stepTransition(r, in, out)
	case KindRelease:
		return stepRelease(r, in, out)
	}
	return false, r
}

// stepClaim checks a claim's answer against r, the state it reports
// included: every answer that carries the record (ACQUIRED, the same
// ACQUIRED again for the owner's attempt, IN_PROGRESS naming the holder,
// DUPLICATE) must carry the register's state, so an answer whose state goes
// back in time (IN_PROGRESS with RECEIVED after another caller was told
// PROCESSING) does not linearize. The only IN_PROGRESS left out of the
// model is one from a pending marker, which names no holder and carries no
// record (porcupineOps; checkHolder flags it).
func stepClaim(r register, in, out *Op) (bool, register) {
	answered := func(outcome pb.Outcome, token uint64, state pb.EventState) bool {
		return out.Outcome == outcome && out.AckToken == token && out.AckState == state
	}
	first := pb.EventState_EVENT_STATE_RECEIVED // the state a new holder starts in
	if in.Start {
		first = pb.EventState_EVENT_STATE_PROCESSING
	}
	if ordered(out) {
		// DEFERRED or SUPERSEDED: the entity's order refused what the key
		// alone would have granted (it is absent or released), and the
		// record stays as it was (claim.proto, Lifecycles). Whether the
		// entity's state justified it is the lifecycle checks' question.
		return in.EntityID != "" && (!r.Exists || (r.Released && !terminal(r.State))), r
	}
	switch {
	case !r.Exists:
		next := register{Exists: true, Token: 1, State: first, AttemptID: in.AttemptID}
		return out == nil || answered(pb.Outcome_OUTCOME_ACQUIRED, 1, next.State), next
	case terminal(r.State):
		return out == nil || (out.Outcome == pb.Outcome_OUTCOME_DUPLICATE && out.AckResult == r.Result && out.AckState == r.State), r
	case in.AttemptID != "" && in.AttemptID == r.AttemptID && !r.Released:
		return out == nil || answered(pb.Outcome_OUTCOME_ACQUIRED, r.Token, r.State), r
	case r.Released:
		next := register{Exists: true, Token: r.Token + 1, State: first, AttemptID: in.AttemptID}
		return out == nil || answered(pb.Outcome_OUTCOME_ACQUIRED, next.Token, next.State), next
	}
	return out == nil || (out.Outcome == pb.Outcome_OUTCOME_IN_PROGRESS && out.AckHolder == r.AttemptID && out.AckState == r.State), r
}

// ordered reports whether out is a Claim answered by an entity's order
// instead of by the key: DEFERRED or SUPERSEDED.
func ordered(out *Op) bool {
	return out != nil && (out.Outcome == pb.Outcome_OUTCOME_DEFERRED || out.Outcome == pb.Outcome_OUTCOME_SUPERSEDED)
}

// refused is the answer of a fenced call the register refuses.
func refused(out *Op, code codes.Code, reason string) bool {
	if out == nil {
		return true
	}
	return out.Code == code && (reason == "" || out.ErrReason == "" || out.ErrReason == reason)
}

func stepTransition(r register, in, out *Op) (bool, register) {
	switch {
	case !r.Exists:
		return refused(out, codes.NotFound, ""), r
	case in.Token != r.Token || r.Released:
		return refused(out, codes.Aborted, reasonStale), r
	case r.State == in.To:
		return out == nil || (out.Code == codes.OK && !out.Changed && out.AckState == r.State && out.AckResult == r.Result), r
	case !canTransition(r.State, in.To):
		return refused(out, codes.FailedPrecondition, reasonInvalid), r
	}
	next := r
	next.State = in.To
	if terminal(in.To) {
		next.Result = in.Result
	}
	return out == nil || (out.Code == codes.OK && out.Changed && out.AckState == next.State && out.AckResult == next.Result), next
}

func stepRelease(r register, in, out *Op) (bool, register) {
	switch {
	case !r.Exists:
		return refused(out, codes.NotFound, ""), r
	case in.Token != r.Token:
		return refused(out, codes.Aborted, reasonStale), r
	case terminal(r.State):
		return refused(out, codes.FailedPrecondition, reasonInvalid), r
	}
	next := r
	next.Released = true
	return out == nil || (out.Code == codes.OK && out.Released), next
}

// Model is the claim register of one key for porcupine. An operation's Input
// and Output are both the *Op; an Output of nil is a call that failed and may
// or may not have taken effect, which the history gives a return time of
// "never" so that it can be placed anywhere after its invocation.
func Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return register{} },
		Step: func(state, input, output any) (bool, any) {
			out, _ := output.(*Op)
			return step(state.(register), input.(*Op), out)
		},
		Equal: func(a, b any) bool { return a.(register) == b.(register) },
		DescribeOperation: func(input, output any) string {
			in := input.(*Op)
			if out, ok := output.(*Op); ok && out != nil {
				return fmt.Sprintf("c%d@%s %s", in.Client, in.Replica, out.String())
			}
			return fmt.Sprintf("c%d@%s %s → failed (%s), maybe applied", in.Client, in.Replica, in.requestString(), in.Code)
		},
		DescribeState: func(state any) string { return state.(register).String() },
	}
}

// requestString is the request half of String.
func (o *Op) requestString() string {
	switch o.Kind {
	case KindClaim:
		if o.EventType != "" {
			return fmt.Sprintf("Claim(%s, %s)", o.AttemptID, o.EventType)
		}
		return fmt.Sprintf("Claim(%s)", o.AttemptID)
	case KindTransition:
		return fmt.Sprintf("Transition(t%d→%s)", o.Token, stateName(o.To))
	}
	return fmt.Sprintf("Release(t%d)", o.Token)
}
