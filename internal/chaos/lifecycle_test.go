package chaos

import (
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/horizon"
)

// The lifecycle checks on synthetic histories of one payment intent "pi"
// with the shipped Stripe lifecycle: E0 payment_intent.processing, E1
// payment_intent.succeeded, E2 payment_intent.requires_action; times in
// milliseconds.

func stripeLifecycles(t *testing.T) map[string]*horizon.Lifecycle {
	t.Helper()
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := reg.Lookup("stripe")
	if !ok {
		t.Fatal("no stripe provider")
	}
	out := map[string]*horizon.Lifecycle{}
	for _, l := range p.Lifecycles {
		out[l.Name] = l
	}
	return out
}

var piEvents = []Event{
	{Key: "E0", Lifecycle: "payment_intent", EntityID: "pi", EventType: "payment_intent.processing"},
	{Key: "E1", Lifecycle: "payment_intent", EntityID: "pi", EventType: "payment_intent.succeeded"},
	{Key: "E2", Lifecycle: "payment_intent", EntityID: "pi", EventType: "payment_intent.requires_action"},
}

func eventClaim(client int, key, attempt string, t0, t1 int64, out pb.Outcome, state, busy string) Op {
	o := Op{Client: client, Key: key, Replica: "r0", Kind: KindClaim, AttemptID: attempt, Start: true,
		Lifecycle: "payment_intent", EntityID: "pi", Invoke: t0 * ms, Complete: t1 * ms,
		Outcome: out, EntState: state, BusyWith: busy}
	for _, e := range piEvents {
		if e.Key == key {
			o.EventType = e.EventType
		}
	}
	if out == pb.Outcome_OUTCOME_ACQUIRED {
		o.AckToken, o.AckHolder = 1, attempt
	}
	return o
}

func settleOp(client int, key string, t0, t1 int64) Op {
	o := transitionOp(client, 1, settledSt, key+"/r", t0, t1)
	o.Key = key
	return o
}

func finalEntity(replica, state string, applied ...AppliedRow) EntityRead {
	return EntityRead{Kind: ReadEntity, Replica: replica, Lifecycle: "payment_intent", EntityID: "pi", Final: true,
		Invoke: 100 * ms, Complete: 101 * ms, State: state, Version: uint64(len(applied)), Applied: applied}
}

func deferredRead(replica string, final bool, t0, t1 int64, rows ...DeferredRow) EntityRead {
	return EntityRead{Kind: ReadDeferred, Replica: replica, Lifecycle: "payment_intent", EntityID: "pi", Final: final,
		Invoke: t0 * ms, Complete: t1 * ms, Deferred: rows}
}

var cleanApplied = []AppliedRow{
	{Key: "E0", EventType: "payment_intent.processing", From: "new", To: "processing", Token: 1},
	{Key: "E1", EventType: "payment_intent.succeeded", From: "processing", To: "succeeded", Token: 1},
}

// cleanLifecycle: E0 applies from new while E1 waits for it (busy), E1
// applies once E0 settled, E2 comes last and is superseded.
func cleanLifecycle() LifecycleInput {
	ops := []Op{
		eventClaim(1, "E0", "a1", 0, 2, pb.Outcome_OUTCOME_ACQUIRED, "new", ""),
		eventClaim(2, "E1", "a2", 1, 3, pb.Outcome_OUTCOME_DEFERRED, "new", "payment_intent.processing"),
		settleOp(1, "E0", 4, 6),
		eventClaim(2, "E1", "a3", 7, 8, pb.Outcome_OUTCOME_ACQUIRED, "processing", ""),
		settleOp(2, "E1", 9, 10),
		eventClaim(3, "E2", "a4", 11, 12, pb.Outcome_OUTCOME_SUPERSEDED, "succeeded", ""),
	}
	finalRows := []DeferredRow{
		{Key: "E1", EventType: "payment_intent.succeeded", EntityState: "succeeded", Applied: true},
		{Key: "E2", EventType: "payment_intent.requires_action", EntityState: "succeeded", Superseded: true},
	}
	return LifecycleInput{
		Ops:    ops,
		Events: piEvents,
		Reads: []EntityRead{
			deferredRead("r1", false, 6, 7, DeferredRow{Key: "E1", EventType: "payment_intent.succeeded", EntityState: "processing", Ready: true}),
			finalEntity("r0", "succeeded", cleanApplied...),
			finalEntity("r1", "succeeded", cleanApplied...),
			deferredRead("r0", true, 102, 103, finalRows...),
			deferredRead("r1", true, 102, 103, finalRows...),
		},
		Replicas: []string{"r0", "r1"},
	}
}

func checksOf(vs []Violation) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[v.Check]++
	}
	return m
}

func TestLifecycleClean(t *testing.T) {
	in := cleanLifecycle()
	in.Lifecycles = stripeLifecycles(t)
	res := CheckLifecycles(in)
	if len(res.Violations) != 0 {
		t.Fatalf("violations on a clean history: %v", res.Violations)
	}
	if res.Applied != 2 || res.Superseded != 1 || res.DeferredAnswers != 1 || res.ReadyRows != 1 || res.Waiting != 0 {
		t.Errorf("counts: %+v", res)
	}
}

// Each case breaks the clean history in one way; the check named must
// report it.
func TestLifecycleViolations(t *testing.T) {
	cases := []struct {
		name  string
		check string
		edit  func(in *LifecycleInput)
	}{
		{"an event applied by two deliveries", CheckAppliedOnce, func(in *LifecycleInput) {
			o := eventClaim(4, "E0", "a9", 3, 5, pb.Outcome_OUTCOME_ACQUIRED, "new", "")
			o.AckToken = 2
			in.Ops = append(in.Ops, o)
		}},
		{"an application from a state the model's entity was not in", CheckOrder, func(in *LifecycleInput) {
			in.Ops[3].EntState = "requires_action" // E1 may arrive there, but the entity was in processing
		}},
		{"two events holding the entity at once", CheckOrder, func(in *LifecycleInput) {
			in.Ops[3].Invoke, in.Ops[3].Complete = 2*ms, 3*ms // acquired before E0's settle was sent
		}},
		{"SUPERSEDED where the event may still arrive", CheckOrdered, func(in *LifecycleInput) {
			in.Ops[5].EventType, in.Ops[5].Key = "payment_intent.succeeded", "E1"
			in.Ops[5].EntState = "processing"
			in.Ops[5].Invoke, in.Ops[5].Complete = 7*ms, 8*ms
		}},
		{"DEFERRED with nothing holding the entity in a state the event may arrive in", CheckOrdered, func(in *LifecycleInput) {
			in.Ops[1].EntState, in.Ops[1].BusyWith = "new", ""
		}},
		{"an answer naming a state the entity was not in during the call", CheckOrdered, func(in *LifecycleInput) {
			in.Ops[5].EntState = "canceled"
		}},
		{"ListDeferred not ready in a state the event may arrive in", CheckReady, func(in *LifecycleInput) {
			in.Reads[0].Deferred[0].Ready = false
		}},
		{"ListDeferred showing a state before the call", CheckReady, func(in *LifecycleInput) {
			in.Reads[0].Deferred[0].EntityState, in.Reads[0].Deferred[0].Ready = "new", false
			in.Reads[0].Invoke, in.Reads[0].Complete = 20*ms, 21*ms
		}},
		{"a deferred event left ready after the run", CheckReady, func(in *LifecycleInput) {
			in.Reads[3].Deferred[1] = DeferredRow{Key: "E2", EventType: "payment_intent.requires_action", EntityState: "succeeded"}
		}},
		{"an event neither applied nor superseded in a state that supersedes it", CheckEventEnds, func(in *LifecycleInput) {
			in.Ops = in.Ops[:5]
		}},
		{"an event applied and superseded", CheckEventEnds, func(in *LifecycleInput) {
			in.Ops = append(in.Ops, eventClaim(5, "E1", "a8", 11, 12, pb.Outcome_OUTCOME_SUPERSEDED, "succeeded", ""))
		}},
		{"a replica whose GetEntity lags", CheckEntity, func(in *LifecycleInput) {
			in.Reads[2] = finalEntity("r1", "processing", cleanApplied[0])
		}},
		{"GetEntity still busy after the run", CheckEntity, func(in *LifecycleInput) {
			in.Reads[1].BusyWith = "E2"
		}},
		{"GetEntity failing after the run", CheckEntity, func(in *LifecycleInput) {
			in.Reads[1] = EntityRead{Kind: ReadEntity, Replica: "r0", Lifecycle: "payment_intent", EntityID: "pi", Final: true, Code: codes.Unavailable}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := cleanLifecycle()
			in.Lifecycles = stripeLifecycles(t)
			c.edit(&in)
			got := checksOf(CheckLifecycles(in).Violations)
			if got[c.check] == 0 {
				t.Errorf("%s not reported; got %v", c.check, got)
			}
		})
	}
}

// An event that waits for what was never sent: the entity ended in
// processing, from which payment_failed (never sent) would lead to a state
// requires_action may arrive in. Counted as waiting, not a violation; the
// same event left ready would be one.
func TestLifecycleWaiting(t *testing.T) {
	in := LifecycleInput{
		Lifecycles: stripeLifecycles(t),
		Events:     []Event{piEvents[0], piEvents[2]},
		Ops: []Op{
			eventClaim(1, "E0", "a1", 0, 2, pb.Outcome_OUTCOME_ACQUIRED, "new", ""),
			settleOp(1, "E0", 3, 4),
			eventClaim(3, "E2", "a4", 5, 6, pb.Outcome_OUTCOME_DEFERRED, "processing", ""),
		},
		Reads: []EntityRead{
			finalEntity("r0", "processing", cleanApplied[0]),
			deferredRead("r0", true, 102, 103, DeferredRow{Key: "E2", EventType: "payment_intent.requires_action", EntityState: "processing"}),
		},
		Replicas: []string{"r0"},
	}
	res := CheckLifecycles(in)
	if len(res.Violations) != 0 || res.Waiting != 1 {
		t.Fatalf("waiting %d, violations %v", res.Waiting, res.Violations)
	}
	in.Reads[1].Deferred[0].Ready = true
	if got := checksOf(CheckLifecycles(in).Violations); got[CheckReady] == 0 {
		t.Errorf("a ready row not reported: %v", got)
	}
}

// The claim register accepts DEFERRED and SUPERSEDED where it would have
// granted the key, and leaves it as it was; nowhere else.
func TestModelOrderedClaims(t *testing.T) {
	in := eventClaim(1, "E1", "a1", 0, 1, pb.Outcome_OUTCOME_DEFERRED, "new", "x")
	if ok, next := stepClaim(register{}, &in, &in); !ok || next.Exists {
		t.Errorf("DEFERRED on an absent key: ok=%v next=%v", ok, next)
	}
	held := register{Exists: true, Token: 1, State: processing, AttemptID: "a0"}
	if ok, _ := stepClaim(held, &in, &in); ok {
		t.Error("DEFERRED accepted on a key held by another attempt (the key's IN_PROGRESS comes first)")
	}
	settled := register{Exists: true, Token: 1, State: settledSt, AttemptID: "a0", Result: "r"}
	if ok, _ := stepClaim(settled, &in, &in); ok {
		t.Error("DEFERRED accepted on a settled key (DUPLICATE comes first)")
	}
	plain := claimOp(1, "a1", 0, 1)
	plain.Outcome = pb.Outcome_OUTCOME_SUPERSEDED
	if ok, _ := stepClaim(register{}, &plain, &plain); ok {
		t.Error("SUPERSEDED accepted for a claim with no entity")
	}
	start := eventClaim(1, "E1", "a1", 0, 1, pb.Outcome_OUTCOME_ACQUIRED, "new", "")
	if _, next := stepClaim(register{}, &start, &start); next.State != processing {
		t.Errorf("a claim with start acquired into %v, want PROCESSING", next.State)
	}
}
