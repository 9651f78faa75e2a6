package main

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/chaos"
)

// crashEntity runs a row of the matrix whose key is an entity event: A
// acquires payment_intent.processing of a new payment intent (new →
// processing) on r0 and settles it there, and r0 dies inside the settle's
// transaction (rolled back: the entity must stand as before) or right after
// its commit (the entity moved once). After the restart the deliveries
// must see one entity, advanced exactly once when A's retry (or the
// commit) settled it.
func (s *suite) crashEntity(row crashRow, w *crashWorld) crashRow {
	ctx := s.ctx
	w.l.cfg.provider = lifecycleProvider
	ll := &lifecycleLoad{load: w.l, lcs: s.lifecycles}
	entity := w.key + "-pi"
	evA := chaos.Event{Key: w.key, Lifecycle: "payment_intent", EntityID: entity, EventType: "payment_intent.processing"}
	evB := chaos.Event{Key: w.key + "-b", Lifecycle: "payment_intent", EntityID: entity, EventType: "payment_intent.requires_action"}
	committed := row.Point == "entity-settle-commit"
	step := func(who, replica, call, got, want string, ok bool) {
		row.Steps = append(row.Steps, crashStep{Who: who, Call: call, Replica: replica, Got: got, Want: want, OK: ok})
	}
	retried := func(f func() (chaos.Op, bool)) chaos.Op {
		var op chaos.Op
		for i := 0; i < 10; i++ {
			var done bool
			if op, done = f(); done {
				return op
			}
			sleep(ctx, 200*time.Millisecond) // the restarted replica may still be reconnecting
		}
		return op
	}
	claim := func(t *target, ev chaos.Event, attempt string) chaos.Op {
		return retried(func() (chaos.Op, bool) {
			op, _ := ll.claimEvent(ctx, t, w.client, ev, attempt, false)
			return op, op.Answered() || !chaos.Retryable(op.Code)
		})
	}
	getEntity := func(t *target) chaos.EntityRead {
		var r chaos.EntityRead
		for i := 0; i < 10; i++ {
			if r = ll.getEntity(ctx, t, evA.Lifecycle, entity, false); !chaos.Retryable(r.Code) {
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
		return r
	}
	is := func(op chaos.Op, out pb.Outcome) bool { return op.Code == codes.OK && op.Outcome == out }
	settled := func(r chaos.EntityRead) bool {
		return r.Code == codes.OK && r.State == "processing" && r.Version == 1 && r.BusyWith == "" &&
			len(r.Applied) == 1 && r.Applied[0].Key == evA.Key && r.Applied[0].From == "new" && r.Applied[0].To == "processing"
	}
	entityString := func(r chaos.EntityRead) string {
		if r.Code != codes.OK {
			return r.Code.String()
		}
		return appliedSummary(r)
	}

	// Drive A to the crash on r0.
	op, grant := ll.claimEvent(ctx, w.t0, w.client, evA, w.attempt, false)
	if !is(op, pb.Outcome_OUTCOME_ACQUIRED) || op.EntState != "new" {
		row.Err = "setup Claim: " + op.AnswerString()
		return row
	}
	result := evA.Key + "/settled"
	settle := chaos.Op{Kind: chaos.KindTransition, Token: 1, To: pb.EventState_EVENT_STATE_SETTLED, Result: result}
	w.l.targets = []*target{w.t0}
	w.l.call(ctx, w.client, evA.Key, settle, grant)
	row.Crashed = w.r0.waitExit(10*time.Second) && w.r0.killedBySignal()
	if !row.Crashed {
		row.Err = "claimd did not die at " + row.Point + " (built without -tags chaos?)"
		return row
	}
	if err := w.r0.start(ctx); err != nil { // disarmed: the env applies to one start
		row.Err = err.Error()
		return row
	}

	other, otherName := w.tOther, w.other.name
	r := getEntity(other)
	if committed {
		step("GetEntity", otherName, "GetEntity", entityString(r), "processing, version 1, A applied once, not busy", settled(r))
	} else {
		ok := r.Code == codes.OK && r.State == "new" && r.Version == 0 && len(r.Applied) == 0 && r.BusyWith == evA.Key
		step("GetEntity", otherName, "GetEntity", entityString(r), "new, version 0, nothing applied, busy with A (the transaction rolled back)", ok)
	}
	op = claim(other, evB, "b")
	if committed {
		step("B (requires_action, next delivery)", otherName, "Claim", op.AnswerString(), "DEFERRED in processing, nothing holding the entity",
			is(op, pb.Outcome_OUTCOME_DEFERRED) && op.EntState == "processing" && op.BusyWith == "")
	} else {
		step("B (requires_action, next delivery)", otherName, "Claim", op.AnswerString(), "DEFERRED in new, busy with payment_intent.processing (A)",
			is(op, pb.Outcome_OUTCOME_DEFERRED) && op.EntState == "new" && op.BusyWith == evA.EventType)
	}
	w.l.targets = []*target{other}
	op = retried(func() (chaos.Op, bool) {
		op := w.l.call(ctx, w.client, evA.Key, settle, grant)
		return op, op.Answered() || !chaos.Retryable(op.Code)
	})
	step("A retries SETTLED", otherName, "Transition", op.AnswerString(), "OK SETTLED, changed="+map[bool]string{true: "false", false: "true"}[committed],
		op.Code == codes.OK && op.AckState == pb.EventState_EVENT_STATE_SETTLED && op.Changed == !committed && op.AckResult == result)
	r = getEntity(w.t0)
	step("GetEntity", w.r0.name, "GetEntity", entityString(r), "processing, version 1, A applied once, not busy", settled(r))
	op = claim(w.t0, evA, "c")
	step("C (A's event again)", w.r0.name, "Claim", op.AnswerString(), "DUPLICATE with A's result",
		is(op, pb.Outcome_OUTCOME_DUPLICATE) && op.AckResult == result)
	return row
}

// appliedSummary renders a GetEntity answer in one line.
func appliedSummary(r chaos.EntityRead) string {
	s := fmt.Sprintf("%s v%d", r.State, r.Version)
	if r.BusyWith != "" {
		s += " busy with " + r.BusyWith
	}
	for _, a := range r.Applied {
		s += fmt.Sprintf(" [%s %s→%s t%d]", a.EventType, a.From, a.To, a.Token)
	}
	return s
}
