package tierstest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// The entity cases hold every Store to the lifecycle contract of
// tiers.EntityEvent: they run in Run, so every durable tier alone and every
// pairing of a fast tier in front of one answers them alike. They need the
// store to implement tiers.Entities. Like every case they may share a
// database with the others: CountDeferred's case counts providers of names
// no other case uses.

// The lifecycle of the cases: a payment intent that is processed, then
// succeeds and may be refunded, or is canceled before it succeeds.
//
//	created → processing → succeeded → refunded
//	created | processing → canceled
//
// Wait is what horizon computes from this graph.
const (
	piLifecycle = "payment_intent"
	piInitial   = "created"
)

var (
	evProcessing = tiers.EntityEvent{Lifecycle: piLifecycle, Initial: piInitial, EventType: "payment_intent.processing",
		From: []string{"created"}, To: "processing"}
	evSucceeded = tiers.EntityEvent{Lifecycle: piLifecycle, Initial: piInitial, EventType: "payment_intent.succeeded",
		From: []string{"processing"}, Wait: []string{"created"}, To: "succeeded"}
	evCanceled = tiers.EntityEvent{Lifecycle: piLifecycle, Initial: piInitial, EventType: "payment_intent.canceled",
		From: []string{"created", "processing"}, To: "canceled"}
	evRefunded = tiers.EntityEvent{Lifecycle: piLifecycle, Initial: piInitial, EventType: "charge.refunded",
		From: []string{"succeeded"}, Wait: []string{"created", "processing"}, To: "refunded"}
)

var entityCases = []struct {
	desc string
	run  func(t *testing.T, e *env)
}{
	{"lifecycle: an event before its prerequisite is deferred and writes no record", testEntityDefer},
	{"lifecycle: an event after its entity moved past it is superseded", testEntitySupersede},
	{"lifecycle: settling advances the entity, failing or releasing frees it unchanged", testEntityAdvance},
	{"lifecycle: an entity held by a live claim defers other events until its lease ends", testEntityBusy},
	{"lifecycle: a retry of a settled event stays DUPLICATE", testEntityDuplicate},
	{"lifecycle: the holder repeating its attempt stays ACQUIRED", testEntitySameAttempt},
	{"lifecycle: 64 events racing from one state: exactly one acquires the entity", testEntityRace},
	{"lifecycle: two holders settling at once advance the entity once", testEntitySettleRace},
	{"lifecycle: ListDeferred pages newest first, per entity, and marks applied events", testListDeferred},
	{"lifecycle: CountDeferred counts unapplied deferrals and those lost past a cutoff", testCountDeferred},
	{"lifecycle: entities, holds and deferrals survive a restart", testEntityRestart},
}

// event is a claim of key k that is event ev of entity id.
func (e *env) event(k, id string, ev tiers.EntityEvent) tiers.ClaimParams {
	p := e.params(k)
	ev.EntityID = id
	p.Entity = &ev
	return p
}

func (e *env) entityKey(id string) tiers.EntityKey {
	return tiers.EntityKey{Namespace: e.ns, Provider: "stripe", Lifecycle: piLifecycle, EntityID: id}
}

// entities is the store's tiers.Entities.
func (e *env) entities() tiers.Entities {
	e.t.Helper()
	en, ok := e.store.(tiers.Entities)
	if !ok {
		e.t.Fatalf("%T does not implement tiers.Entities", e.store)
	}
	return en
}

// entity reads entity id and fails the test on error.
func (e *env) entity(id string) tiers.Entity {
	e.t.Helper()
	got, err := e.entities().GetEntity(e.ctx(), e.entityKey(id))
	if err != nil {
		e.t.Fatalf("GetEntity(%q) error = %v", id, err)
	}
	if got.EntityKey != e.entityKey(id) {
		e.t.Fatalf("GetEntity(%q) key = %+v, want %+v", id, got.EntityKey, e.entityKey(id))
	}
	return got
}

// wantEntity checks entity id's state, version and holder.
func (e *env) wantEntity(id, state string, version uint64, busyWith string) tiers.Entity {
	e.t.Helper()
	got := e.entity(id)
	if got.State != state || got.Version != version || got.BusyWith != busyWith || len(got.Applied) != int(version) {
		e.t.Fatalf("GetEntity(%q) = state %q version %d busy %q, %d applied; want %q %d %q, %d applied",
			id, got.State, got.Version, got.BusyWith, len(got.Applied), state, version, busyWith, version)
	}
	return got
}

// ordered claims p and checks an answer that the entity decided: outcome,
// the entity's state, the holder's event type and the deferral count.
func (e *env) ordered(p tiers.ClaimParams, want tiers.Outcome, state, busyWith string, deferrals uint32) tiers.ClaimResult {
	e.t.Helper()
	res := e.claim(p)
	if res.Outcome != want {
		e.t.Fatalf("Claim(%q, %s) = %v, want %v", p.Key.Key, p.Entity.EventType, res.Outcome, want)
	}
	if res.Record.Key != p.Key {
		e.t.Fatalf("Claim(%q) record key = %v, want %v", p.Key.Key, res.Record.Key, p.Key)
	}
	wantPos := tiers.EntityPosition{State: state, BusyWith: busyWith, Deferrals: deferrals}
	if res.Entity == nil || *res.Entity != wantPos {
		e.t.Fatalf("Claim(%q, %s) entity = %+v, want %+v", p.Key.Key, p.Entity.EventType, res.Entity, wantPos)
	}
	if want != tiers.OutcomeAcquired && slices.Equal(res.Record.SecretHash, p.SecretHash) {
		e.t.Fatalf("Claim(%q) = %v carries the claimant's secret: nothing may be acquired", p.Key.Key, want)
	}
	return res
}

// acquire claims p, which must acquire the entity in state.
func (e *env) acquire(p tiers.ClaimParams, state string) tiers.ClaimResult {
	e.t.Helper()
	return e.ordered(p, tiers.OutcomeAcquired, state, "", 0)
}

// settle moves acquired k through PROCESSING to SETTLED.
func (e *env) settle(k string, res tiers.ClaimResult) {
	e.t.Helper()
	e.mustTransition(k, ownerOf(res.Record), tiers.StateProcessing, tiers.StateSettled)
}

// apply acquires event ev of id under key k in state and settles it.
func (e *env) apply(k, id string, ev tiers.EntityEvent, state string) {
	e.t.Helper()
	e.settle(k, e.acquire(e.event(k, id, ev), state))
}

// wantAbsent checks that no claim record exists for k.
func (e *env) wantAbsent(k string) {
	e.t.Helper()
	_, err := e.store.Get(e.ctx(), e.key(k))
	wantErr(e.t, "Get("+k+")", err, tiers.ErrNotFound)
}

func testEntityDefer(t *testing.T, e *env) {
	const id = "pi_defer"
	e.ordered(e.event("evt_refund", id, evRefunded), tiers.OutcomeDeferred, "created", "", 1)
	e.wantAbsent("evt_refund")
	_, err := e.entities().GetEntity(e.ctx(), e.entityKey(id))
	wantErr(t, "GetEntity(never acquired)", err, tiers.ErrEntityNotFound)
	e.clk.Advance(time.Second)
	e.ordered(e.event("evt_refund", id, evRefunded), tiers.OutcomeDeferred, "created", "", 2)
	e.wantAbsent("evt_refund")

	e.apply("evt_processing", id, evProcessing, "created")
	e.ordered(e.event("evt_refund", id, evRefunded), tiers.OutcomeDeferred, "processing", "", 3)
	e.apply("evt_succeeded", id, evSucceeded, "processing")
	// The deferral left nothing behind (no record, no pending marker of a
	// fast tier): the provider's retry is a first claim, at once.
	e.apply("evt_refund", id, evRefunded, "succeeded")
	got := e.wantEntity(id, "refunded", 3, "")
	var path []string
	for _, a := range got.Applied {
		path = append(path, a.From+"→"+a.To+" by "+a.EventType)
	}
	want := []string{
		"created→processing by payment_intent.processing",
		"processing→succeeded by payment_intent.succeeded",
		"succeeded→refunded by charge.refunded",
	}
	if !slices.Equal(path, want) {
		t.Fatalf("GetEntity applied = %q, want %q", path, want)
	}
}

func testEntitySupersede(t *testing.T, e *env) {
	const id = "pi_super"
	e.apply("evt_processing", id, evProcessing, "created")
	e.apply("evt_canceled", id, evCanceled, "processing")
	for range 2 {
		e.ordered(e.event("evt_succeeded", id, evSucceeded), tiers.OutcomeSuperseded, "canceled", "", 0)
		e.wantAbsent("evt_succeeded")
		e.clk.Advance(time.Second)
	}
	// Not even a first delivery of an event the entity is past acquires.
	e.ordered(e.event("evt_processing_2", id, evProcessing), tiers.OutcomeSuperseded, "canceled", "", 0)
	e.wantAbsent("evt_processing_2")
	e.wantEntity(id, "canceled", 2, "")
}

func testEntityAdvance(t *testing.T, e *env) {
	const id = "pi_adv"
	a := e.acquire(e.event("evt_a", id, evProcessing), "created")
	for _, r := range []tiers.Record{a.Record, e.mustGet("evt_a")} {
		if r.Lifecycle != piLifecycle || r.EntityID != id || r.EventType != evProcessing.EventType {
			t.Fatalf("record lifecycle/entity/event = %q/%q/%q, want %q/%q/%q",
				r.Lifecycle, r.EntityID, r.EventType, piLifecycle, id, evProcessing.EventType)
		}
	}
	e.wantEntity(id, "created", 0, "evt_a")
	e.mustTransition("evt_a", ownerOf(a.Record), tiers.StateProcessing)
	e.wantEntity(id, "created", 0, "evt_a")
	e.clk.Advance(time.Second)
	settledAt := e.clk.Now()
	e.mustTransition("evt_a", ownerOf(a.Record), tiers.StateSettled)
	got := e.wantEntity(id, "processing", 1, "")
	wantApplied := tiers.AppliedEvent{EventType: evProcessing.EventType, Key: "evt_a", From: "created", To: "processing",
		Token: 1, AppliedAt: settledAt}
	if ap := got.Applied[0]; ap.EventType != wantApplied.EventType || ap.Key != wantApplied.Key || ap.From != wantApplied.From ||
		ap.To != wantApplied.To || ap.Token != wantApplied.Token || !ap.AppliedAt.Equal(settledAt) {
		t.Fatalf("GetEntity applied[0] = %+v, want %+v", ap, wantApplied)
	}
	if !got.UpdatedAt.Equal(settledAt) {
		t.Fatalf("GetEntity updated at = %v, want %v", got.UpdatedAt, settledAt)
	}

	// FAILED frees the entity without moving it.
	b := e.acquire(e.event("evt_b", id, evSucceeded), "processing")
	e.wantEntity(id, "processing", 1, "evt_b")
	e.mustTransition("evt_b", ownerOf(b.Record), tiers.StateFailed)
	e.wantEntity(id, "processing", 1, "")

	// So does Release; the next claim of the key takes it again.
	c := e.acquire(e.event("evt_c", id, evSucceeded), "processing")
	if _, err := e.release("evt_c", ownerOf(c.Record)); err != nil {
		t.Fatalf("Release(evt_c) error = %v", err)
	}
	e.wantEntity(id, "processing", 1, "")
	c = e.acquire(e.event("evt_c", id, evSucceeded), "processing")
	if c.Reason != tiers.ReasonReleased || c.Record.Token != 2 {
		t.Fatalf("Claim(released evt_c) = %v token %d, want RELEASED token 2", c.Reason, c.Record.Token)
	}
	e.settle("evt_c", c)
	got = e.wantEntity(id, "succeeded", 2, "")
	if ap := got.Applied[1]; ap.Key != "evt_c" || ap.From != "processing" || ap.To != "succeeded" || ap.Token != 2 {
		t.Fatalf("GetEntity applied[1] = %+v, want evt_c processing→succeeded with token 2", ap)
	}
	// The failed event is over: a retry is its duplicate.
	e.mustOutcome(e.event("evt_b", id, evSucceeded), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
}

func (e *env) mustGet(k string) tiers.Record {
	e.t.Helper()
	rec, err := e.store.Get(e.ctx(), e.key(k))
	if err != nil {
		e.t.Fatalf("Get(%q) error = %v", k, err)
	}
	return rec
}

func testEntityBusy(t *testing.T, e *env) {
	const id = "pi_busy"
	a := e.acquire(e.event("evt_a", id, evProcessing), "created")
	e.mustTransition("evt_a", ownerOf(a.Record), tiers.StateProcessing)
	e.clk.Advance(lease - time.Millisecond)
	// canceled may arrive in created, but evt_a holds the entity.
	e.ordered(e.event("evt_b", id, evCanceled), tiers.OutcomeDeferred, "created", evProcessing.EventType, 1)
	e.wantAbsent("evt_b")

	// evt_a's lease ended: its hold is no longer live.
	e.clk.Advance(time.Millisecond)
	b := e.acquire(e.event("evt_b", id, evCanceled), "created")
	e.wantEntity(id, "created", 0, "evt_b")

	// evt_a's holder settling late would apply a second event from the
	// same state: refused, and nothing written.
	_, _, err := e.transition("evt_a", ownerOf(a.Record), tiers.StateSettled, []byte("late"))
	wantErr(t, "Transition(evt_a →SETTLED, entity taken)", err, tiers.ErrStaleToken)
	if rec := e.mustGet("evt_a"); rec.State != tiers.StateProcessing {
		t.Fatalf("Get(evt_a) after a refused settle = %v, want PROCESSING", rec.State)
	}
	e.wantEntity(id, "created", 0, "evt_b")

	e.settle("evt_b", b)
	e.wantEntity(id, "canceled", 1, "")
	// evt_a delivered again: its record would change hands, but the entity
	// is past it.
	e.ordered(e.event("evt_a", id, evProcessing), tiers.OutcomeSuperseded, "canceled", "", 0)
	if rec := e.mustGet("evt_a"); rec.Token != 1 || rec.State != tiers.StateProcessing {
		t.Fatalf("Get(evt_a) after SUPERSEDED = token %d %v, want token 1 PROCESSING (unchanged)", rec.Token, rec.State)
	}
}

func testEntityDuplicate(t *testing.T, e *env) {
	const id = "pi_dup"
	e.apply("evt_a", id, evProcessing, "created")
	e.apply("evt_b", id, evSucceeded, "processing")
	// The entity is past payment_intent.processing, but evt_a is a retry of
	// an event that applied: its duplicate, with its result.
	dup := e.mustOutcome(e.event("evt_a", id, evProcessing), tiers.OutcomeDuplicate, tiers.ReasonUnspecified)
	if string(dup.Record.Result) != "result-of-evt_a" {
		t.Fatalf("Claim(settled evt_a) result = %q, want result-of-evt_a", dup.Record.Result)
	}
	events, _, err := e.entities().ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: e.ns, Provider: "stripe", Page: tiers.Page{Size: 10}})
	if err != nil || len(events) != 0 {
		t.Fatalf("ListDeferred = %+v, %v; want nothing: a duplicate is not deferred", events, err)
	}
	e.wantEntity(id, "succeeded", 2, "")
}

func testEntitySameAttempt(t *testing.T, e *env) {
	const id = "pi_attempt"
	p := e.event("evt_a", id, evProcessing)
	p.AttemptID = "attempt-1"
	a := e.acquire(p, "created")
	e.clk.Advance(time.Second)
	again := e.event("evt_a", id, evProcessing)
	again.AttemptID = "attempt-1"
	res := e.mustOutcome(again, tiers.OutcomeAcquired, tiers.ReasonNew)
	if res.Record.Token != a.Record.Token || string(res.Record.SecretHash) != string(p.SecretHash) {
		t.Fatalf("Claim(same attempt) = token %d, want the same acquisition (token %d, its secret)", res.Record.Token, a.Record.Token)
	}
	other := e.event("evt_a", id, evProcessing)
	other.AttemptID = "attempt-2"
	e.mustOutcome(other, tiers.OutcomeInProgress, tiers.ReasonUnspecified)
	e.ordered(e.event("evt_b", id, evCanceled), tiers.OutcomeDeferred, "created", evProcessing.EventType, 1)
	e.settle("evt_a", a)
	e.wantEntity(id, "processing", 1, "")
}

func testEntityRace(t *testing.T, e *env) {
	const (
		id = "pi_race"
		n  = 64
	)
	ps := make([]tiers.ClaimParams, n)
	for i := range n {
		ev := evProcessing
		if i%2 == 1 {
			ev = evCanceled // arrives in created too
		}
		ps[i] = e.event(fmt.Sprintf("evt_race_%d", i), id, ev)
	}
	results := make([]tiers.ClaimResult, n)
	errs := make([]error, n)
	ctx := e.ctx()
	race(n, func(i int) { results[i], errs[i] = e.store.Claim(ctx, ps[i]) })
	winner := -1
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("Claim #%d error = %v", i, errs[i])
		}
		if res.Outcome == tiers.OutcomeAcquired {
			if winner >= 0 {
				t.Fatalf("Claims #%d and #%d both ACQUIRED entity %s from one state", winner, i, id)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("%d concurrent events of one entity: none ACQUIRED", n)
	}
	for i, res := range results {
		if i == winner {
			continue
		}
		want := tiers.EntityPosition{State: "created", BusyWith: ps[winner].Entity.EventType, Deferrals: 1}
		if res.Outcome != tiers.OutcomeDeferred || res.Entity == nil || *res.Entity != want {
			t.Fatalf("Claim #%d = %v %+v, want DEFERRED %+v (held by #%d)", i, res.Outcome, res.Entity, want, winner)
		}
	}
	e.wantEntity(id, "created", 0, ps[winner].Key.Key)

	// Many claims of one event: the key's own race, decided as without
	// an entity.
	ClaimRace(t, e.store, n, func(int) tiers.ClaimParams { return e.event("evt_one", "pi_race_one", evProcessing) })
	e.wantEntity("pi_race_one", "created", 0, "evt_one")
}

func testEntitySettleRace(t *testing.T, e *env) {
	const id = "pi_settle_race"
	a := e.acquire(e.event("evt_a", id, evProcessing), "created")
	e.mustTransition("evt_a", ownerOf(a.Record), tiers.StateProcessing)
	e.clk.Advance(lease)
	b := e.acquire(e.event("evt_b", id, evCanceled), "created")
	e.mustTransition("evt_b", ownerOf(b.Record), tiers.StateProcessing)
	// Both hold a valid token of their own key; both settle at once.
	holders := []struct {
		k string
		o owner
	}{{"evt_a", ownerOf(a.Record)}, {"evt_b", ownerOf(b.Record)}}
	errs := make([]error, len(holders))
	ctx, now := e.ctx(), e.clk.Now()
	race(len(holders), func(i int) {
		_, _, errs[i] = e.store.Transition(ctx, tiers.TransitionParams{Key: e.key(holders[i].k), Now: now,
			Token: holders[i].o.token, SecretHash: holders[i].o.hash, To: tiers.StateSettled, Result: []byte("r")})
	})
	if errs[1] != nil {
		t.Fatalf("Transition(evt_b, the entity's holder) error = %v", errs[1])
	}
	wantErr(t, "Transition(evt_a, lost the entity)", errs[0], tiers.ErrStaleToken)
	got := e.wantEntity(id, "canceled", 1, "")
	if ap := got.Applied[0]; ap.Key != "evt_b" || ap.From != "created" {
		t.Fatalf("GetEntity applied = %+v, want evt_b from created", ap)
	}
}

func (e *env) listDeferred(p tiers.ListDeferredParams) ([]tiers.DeferredEvent, string) {
	e.t.Helper()
	events, next, err := e.entities().ListDeferred(e.ctx(), p)
	if err != nil {
		e.t.Fatalf("ListDeferred(%+v) error = %v", p, err)
	}
	return events, next
}

func deferredKeys(events []tiers.DeferredEvent) []string {
	var keys []string
	for _, d := range events {
		keys = append(keys, d.Key)
	}
	return keys
}

func testListDeferred(t *testing.T, e *env) {
	e.apply("evt_z_cancel", "pi_z", evCanceled, "created")
	t0 := e.clk.Now()
	at := func(d time.Duration) { e.clk.Set(t0.Add(d)) }
	e.ordered(e.event("evt_r1", "pi_x", evRefunded), tiers.OutcomeDeferred, "created", "", 1)
	at(1 * time.Second)
	e.ordered(e.event("evt_s1", "pi_x", evSucceeded), tiers.OutcomeDeferred, "created", "", 1)
	at(2 * time.Second)
	e.ordered(e.event("evt_r1", "pi_x", evRefunded), tiers.OutcomeDeferred, "created", "", 2)
	at(3 * time.Second)
	e.ordered(e.event("evt_r2", "pi_y", evRefunded), tiers.OutcomeDeferred, "created", "", 1)
	at(4 * time.Second)
	e.ordered(e.event("evt_s3", "pi_z", evSucceeded), tiers.OutcomeSuperseded, "canceled", "", 0)
	at(5 * time.Second)
	e.ordered(e.event("evt_w", "pi_w", evRefunded), tiers.OutcomeDeferred, "created", "", 1)

	// Newest last seen first, two to a page.
	var all []tiers.DeferredEvent
	p := tiers.ListDeferredParams{Namespace: e.ns, Provider: "stripe", Page: tiers.Page{Size: 2}}
	for page := 0; ; page++ {
		events, next := e.listDeferred(p)
		if page < 2 && (len(events) != 2 || next == "") {
			t.Fatalf("ListDeferred page %d = %q next %q, want 2 events and a next page", page, deferredKeys(events), next)
		}
		all = append(all, events...)
		if next == "" {
			break
		}
		if page > 3 {
			t.Fatalf("ListDeferred still has a next page after %q", deferredKeys(all))
		}
		// A cursor pages on only the listing that made it: with another
		// entity or provider it is refused, as is one no store made.
		for _, other := range []tiers.ListDeferredParams{
			{Namespace: e.ns, Provider: "stripe", EntityID: "pi_x", Page: tiers.Page{Size: 2, After: next}},
			{Namespace: e.ns, Provider: "paypal", Page: tiers.Page{Size: 2, After: next}},
			{Namespace: e.ns, Provider: "stripe", Page: tiers.Page{Size: 2, After: flipFirst(next)}},
		} {
			if _, _, err := e.entities().ListDeferred(e.ctx(), other); !errors.Is(err, tiers.ErrInvalidCursor) {
				t.Fatalf("ListDeferred(%+v) error = %v, want ErrInvalidCursor", other, err)
			}
		}
		p.After = next
	}
	if keys, want := deferredKeys(all), []string{"evt_w", "evt_s3", "evt_r2", "evt_r1", "evt_s1"}; !slices.Equal(keys, want) {
		t.Fatalf("ListDeferred pages = %q, want %q", keys, want)
	}
	r1 := all[3]
	wantR1 := tiers.DeferredEvent{Lifecycle: piLifecycle, EntityID: "pi_x", EventType: evRefunded.EventType, Key: "evt_r1",
		Count: 2, Awaiting: []string{"succeeded"}, EntityState: "created"}
	if r1.Lifecycle != wantR1.Lifecycle || r1.EntityID != wantR1.EntityID || r1.EventType != wantR1.EventType ||
		r1.Count != 2 || r1.Superseded || r1.Applied || !slices.Equal(r1.Awaiting, wantR1.Awaiting) ||
		r1.EntityState != "created" || !r1.FirstSeen.Equal(t0) || !r1.LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("ListDeferred evt_r1 = %+v, want %+v first seen %v last seen %v", r1, wantR1, t0, t0.Add(2*time.Second))
	}
	if s3 := all[1]; !s3.Superseded || s3.Count != 1 || s3.EntityState != "canceled" || s3.Applied {
		t.Fatalf("ListDeferred evt_s3 = %+v, want superseded once, entity canceled", s3)
	}

	// One entity; then it reaches what evt_s1 awaited, and evt_s1's
	// retry applies.
	x := tiers.ListDeferredParams{Namespace: e.ns, Provider: "stripe", EntityID: "pi_x", Page: tiers.Page{Size: 10}}
	if events, next := e.listDeferred(x); !slices.Equal(deferredKeys(events), []string{"evt_r1", "evt_s1"}) || next != "" {
		t.Fatalf("ListDeferred(pi_x) = %q next %q, want [evt_r1 evt_s1]", deferredKeys(events), next)
	}
	e.apply("evt_x_processing", "pi_x", evProcessing, "created")
	e.apply("evt_s1", "pi_x", evSucceeded, "processing")
	events, _ := e.listDeferred(x)
	if !slices.Equal(deferredKeys(events), []string{"evt_r1", "evt_s1"}) {
		t.Fatalf("ListDeferred(pi_x) after applying = %q, want [evt_r1 evt_s1]", deferredKeys(events))
	}
	if r1, s1 := events[0], events[1]; r1.Applied || r1.EntityState != "succeeded" || !s1.Applied || s1.EntityState != "succeeded" {
		t.Fatalf("ListDeferred(pi_x) = %+v, want evt_r1 not applied and evt_s1 applied, entity succeeded", events)
	}

	for _, other := range []tiers.ListDeferredParams{
		{Namespace: e.ns, Provider: "paypal", Page: tiers.Page{Size: 10}},
		{Namespace: e.ns + "-other", Provider: "stripe", Page: tiers.Page{Size: 10}},
		{Namespace: e.ns, Provider: "stripe", EntityID: "pi_none", Page: tiers.Page{Size: 10}},
	} {
		if events, next := e.listDeferred(other); len(events) != 0 || next != "" {
			t.Fatalf("ListDeferred(%+v) = %q, want nothing", other, deferredKeys(events))
		}
	}
}

// flipFirst changes a cursor's first character, which encodes the
// fingerprint of its listing.
func flipFirst(c string) string {
	if c[0] == 'A' {
		return "B" + c[1:]
	}
	return "A" + c[1:]
}

func testCountDeferred(t *testing.T, e *env) {
	type cutoffs = map[string]tiers.DeferredCutoffs
	count := func(c cutoffs, want tiers.DeferredCounts) {
		t.Helper()
		got, err := e.entities().CountDeferred(e.ctx(), c)
		if err != nil || got != want {
			t.Fatalf("CountDeferred(%v) = %+v, %v; want %+v", c, got, err, want)
		}
	}
	// Providers of this case only: CountDeferred counts the providers named.
	stripe, paypal := "stripe-"+randHex(4), "paypal-"+randHex(4)
	on := func(p tiers.ClaimParams, provider string) tiers.ClaimParams {
		p.Key.Provider = provider
		return p
	}
	count(nil, tiers.DeferredCounts{})
	count(cutoffs{stripe: {}, paypal: {}}, tiers.DeferredCounts{})
	settle := func(p tiers.ClaimParams) {
		t.Helper()
		res, err := e.store.Claim(e.ctx(), p)
		if err != nil || res.Outcome != tiers.OutcomeAcquired {
			t.Fatalf("Claim(%s) = %v, %v; want ACQUIRED", p.Key.Key, res.Outcome, err)
		}
		if _, _, err := e.store.Transition(e.ctx(), tiers.TransitionParams{Key: p.Key, Now: e.clk.Now(), Token: res.Record.Token,
			SecretHash: p.SecretHash, To: tiers.StateProcessing}); err != nil {
			t.Fatalf("Transition(%s, PROCESSING) = %v", p.Key.Key, err)
		}
		if _, _, err := e.store.Transition(e.ctx(), tiers.TransitionParams{Key: p.Key, Now: e.clk.Now(), Token: res.Record.Token,
			SecretHash: p.SecretHash, To: tiers.StateSettled}); err != nil {
			t.Fatalf("Transition(%s, SETTLED) = %v", p.Key.Key, err)
		}
	}
	decided := func(p tiers.ClaimParams, want tiers.Outcome) {
		t.Helper()
		if res, err := e.store.Claim(e.ctx(), p); err != nil || res.Outcome != want {
			t.Fatalf("Claim(%s) = %v, %v; want %v", p.Key.Key, res.Outcome, err, want)
		}
	}
	settle(on(e.event("evt_z_cancel", "pi_z", evCanceled), stripe))
	t0 := e.clk.Now()
	decided(on(e.event("evt_x", "pi_x", evRefunded), stripe), tiers.OutcomeDeferred)
	decided(on(e.event("evt_p", "pi_p", evRefunded), paypal), tiers.OutcomeDeferred)
	decided(on(e.event("evt_z", "pi_z", evSucceeded), stripe), tiers.OutcomeSuperseded)
	e.clk.Set(t0.Add(time.Hour))
	decided(on(e.event("evt_y", "pi_y", evRefunded), stripe), tiers.OutcomeDeferred)
	// Deferred again later: still lost by when it was first seen.
	decided(on(e.event("evt_x", "pi_x", evRefunded), stripe), tiers.OutcomeDeferred)

	// Deferred: stripe's evt_x (first seen at t0) and evt_y (t0+1h),
	// paypal's evt_p (t0).
	ms := time.Millisecond
	count(nil, tiers.DeferredCounts{})
	count(cutoffs{stripe: {Overdue: t0, Lost: t0}}, tiers.DeferredCounts{Deferred: 2}) // not before the cutoffs
	count(cutoffs{stripe: {Overdue: t0.Add(2 * time.Hour), Lost: t0.Add(ms)}}, tiers.DeferredCounts{Deferred: 2, Overdue: 2, Lost: 1})
	count(cutoffs{stripe: {Overdue: t0.Add(ms), Lost: t0.Add(2 * time.Hour)}, paypal: {Overdue: t0.Add(ms), Lost: t0.Add(ms)}},
		tiers.DeferredCounts{Deferred: 3, Overdue: 2, Lost: 3})

	settle(on(e.event("evt_x_processing", "pi_x", evProcessing), stripe))
	settle(on(e.event("evt_x_succeeded", "pi_x", evSucceeded), stripe))
	settle(on(e.event("evt_x", "pi_x", evRefunded), stripe))
	late := tiers.DeferredCutoffs{Overdue: t0.Add(2 * time.Hour), Lost: t0.Add(2 * time.Hour)}
	count(cutoffs{stripe: late}, tiers.DeferredCounts{Deferred: 1, Overdue: 1, Lost: 1})
	count(cutoffs{stripe: late, paypal: {}}, tiers.DeferredCounts{Deferred: 2, Overdue: 1, Lost: 1})
}

func testEntityRestart(t *testing.T, e *env) {
	a := e.acquire(e.event("evt_a", "pi_x", evProcessing), "created")
	e.ordered(e.event("evt_b", "pi_x", evCanceled), tiers.OutcomeDeferred, "created", evProcessing.EventType, 1)
	e.apply("evt_z", "pi_z", evProcessing, "created")
	e.clk.Advance(time.Second)
	e.ordered(e.event("evt_r", "pi_y", evRefunded), tiers.OutcomeDeferred, "created", "", 1)
	e.restart()

	e.clk.Advance(time.Second)
	e.ordered(e.event("evt_b", "pi_x", evCanceled), tiers.OutcomeDeferred, "created", evProcessing.EventType, 2)
	e.clk.Advance(time.Second)
	e.ordered(e.event("evt_r", "pi_y", evRefunded), tiers.OutcomeDeferred, "created", "", 2)
	e.wantEntity("pi_z", "processing", 1, "")
	e.wantEntity("pi_x", "created", 0, "evt_a")
	e.settle("evt_a", a)
	e.wantEntity("pi_x", "processing", 1, "")
	events, _ := e.listDeferred(tiers.ListDeferredParams{Namespace: e.ns, Provider: "stripe", Page: tiers.Page{Size: 10}})
	if !slices.Equal(deferredKeys(events), []string{"evt_r", "evt_b"}) || events[0].Count != 2 {
		t.Fatalf("ListDeferred after restart = %+v, want evt_r (twice) then evt_b", events)
	}
}
