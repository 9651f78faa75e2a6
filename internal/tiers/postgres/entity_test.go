package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// The payment lifecycle of these tests: new → created → processing →
// succeeded → refunded, and canceled from new or created. Wait lists what
// the horizon loader would compute from the graph.
var paymentEvents = map[string]tiers.EntityEvent{
	"created":    {EventType: "created", From: []string{"new"}, To: "created"},
	"canceled":   {EventType: "canceled", From: []string{"new", "created"}, To: "canceled"},
	"processing": {EventType: "processing", From: []string{"created"}, Wait: []string{"new"}, To: "processing"},
	"succeeded":  {EventType: "succeeded", From: []string{"processing"}, Wait: []string{"new", "created"}, To: "succeeded"},
	"refunded":   {EventType: "refunded", From: []string{"succeeded"}, Wait: []string{"new", "created", "processing"}, To: "refunded"},
}

// pay is the entity event of eventType for payment entity id.
func pay(id, eventType string) *tiers.EntityEvent {
	e, ok := paymentEvents[eventType]
	if !ok {
		panic("no payment event " + eventType)
	}
	e.Lifecycle, e.EntityID, e.Initial = "payment", id, "new"
	return &e
}

// entityParams is a claim of key k carrying eventType of payment id.
func (e *env) entityParams(k, id, eventType string) tiers.ClaimParams {
	p := e.params(k)
	p.Entity = pay(id, eventType)
	return p
}

// settle moves the record of k held with token through PROCESSING to
// SETTLED.
func (e *env) settle(k string, token uint64) {
	e.t.Helper()
	e.transition(k, token, tiers.StateProcessing)
	e.transition(k, token, tiers.StateSettled)
}

// entity reads payment id, failing the test when it cannot.
func (e *env) entity(id string) tiers.Entity {
	e.t.Helper()
	ent, err := e.store.GetEntity(e.ctx(), tiers.EntityKey{Namespace: "billing", Provider: "stripe", Lifecycle: "payment", EntityID: id})
	if err != nil {
		e.t.Fatalf("GetEntity(%s) error = %v", id, err)
	}
	return ent
}

// applied lists the event types applied to payment id, in order.
func (e *env) applied(id string) []string {
	e.t.Helper()
	var types []string
	for _, a := range e.entity(id).Applied {
		types = append(types, a.EventType)
	}
	return types
}

func wantOutcome(t testing.TB, what string, res tiers.ClaimResult, want tiers.Outcome) {
	t.Helper()
	if res.Outcome != want {
		t.Fatalf("%s = %v, want %v (result %+v)", what, res.Outcome, want, res)
	}
}

func TestEntityAdvancesOnSettleInOrder(t *testing.T) {
	e := newEnv(t)
	for i, ev := range []string{"created", "processing", "succeeded", "refunded"} {
		k := "evt_" + ev
		res := e.claim(e.entityParams(k, "pi_1", ev))
		wantOutcome(t, "Claim("+ev+")", res, tiers.OutcomeAcquired)
		if res.Entity == nil || res.Entity.State != paymentEvents[ev].From[0] {
			t.Fatalf("Claim(%s).Entity = %+v, want the state %s", ev, res.Entity, paymentEvents[ev].From[0])
		}
		if got := e.get(k); got == nil || got.Lifecycle != "payment" || got.EntityID != "pi_1" || got.EventType != ev {
			t.Fatalf("Get(%s) = %+v, want the record to name its entity event", k, got)
		}
		// Acquired, not yet settled: the entity has not moved.
		if ent := e.entity("pi_1"); ent.Version != uint64(i) || ent.BusyWith != k {
			t.Fatalf("entity while %s is owned = version %d, busy %q; want %d, %q", ev, ent.Version, ent.BusyWith, i, k)
		}
		e.settle(k, res.Record.Token)
	}
	ent := e.entity("pi_1")
	if ent.State != "refunded" || ent.Version != 4 || ent.BusyWith != "" {
		t.Fatalf("entity = %+v, want refunded at version 4, free", ent)
	}
	want := []tiers.AppliedEvent{
		{EventType: "created", Key: "evt_created", From: "new", To: "created", Token: 1},
		{EventType: "processing", Key: "evt_processing", From: "created", To: "processing", Token: 1},
		{EventType: "succeeded", Key: "evt_succeeded", From: "processing", To: "succeeded", Token: 1},
		{EventType: "refunded", Key: "evt_refunded", From: "succeeded", To: "refunded", Token: 1},
	}
	if diff := cmp.Diff(want, ent.Applied, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".AppliedAt" }, cmp.Ignore())); diff != "" {
		t.Errorf("applied events (-want +got):\n%s", diff)
	}
}

// TestEntityStripeSequenceOutOfOrder replays the sequence: the
// refund first, then the capture chain, then a stale processing event.
// Every event is applied once, in lifecycle order.
func TestEntityStripeSequenceOutOfOrder(t *testing.T) {
	e := newEnv(t)
	// The refund arrives first: deferred, nothing owned, nothing stored.
	for n := uint32(1); n <= 2; n++ {
		res := e.claim(e.entityParams("evt_refund", "pi_2", "refunded"))
		wantOutcome(t, "Claim(refund first)", res, tiers.OutcomeDeferred)
		if res.Entity == nil || res.Entity.State != "new" || res.Entity.Deferrals != n || res.Entity.BusyWith != "" {
			t.Fatalf("Claim(refund first) #%d Entity = %+v, want state new, %d deferrals, not busy", n, res.Entity, n)
		}
		if res.Record.Token != 0 {
			t.Fatalf("Claim(refund first) issued token %d; DEFERRED issues none", res.Record.Token)
		}
	}
	if rec := e.get("evt_refund"); rec != nil {
		t.Fatalf("Get(evt_refund) after DEFERRED = %+v, want no record", rec)
	}
	if n, err := e.store.CountDeferred(e.ctx(), map[string]tiers.DeferredCutoffs{"stripe": {}}); err != nil || n.Deferred != 1 {
		t.Fatalf("CountDeferred() = %+v, %v; want 1 deferred", n, err)
	}
	for _, ev := range []string{"created", "processing", "succeeded"} {
		res := e.claim(e.entityParams("evt_"+ev, "pi_2", ev))
		wantOutcome(t, "Claim("+ev+")", res, tiers.OutcomeAcquired)
		e.settle("evt_"+ev, res.Record.Token)
	}
	// The provider's retry of the refund is the replay.
	res := e.claim(e.entityParams("evt_refund", "pi_2", "refunded"))
	wantOutcome(t, "Claim(refund retried)", res, tiers.OutcomeAcquired)
	if res.Reason != tiers.ReasonNew || res.Record.Token != 1 {
		t.Fatalf("Claim(refund retried) = %v token %d, want NEW token 1 (the deferrals wrote no record)", res.Reason, res.Record.Token)
	}
	e.settle("evt_refund", res.Record.Token)
	// A stale processing event, a second later: the entity is past it.
	e.clk.Advance(time.Second)
	res = e.claim(e.entityParams("evt_processing_stale", "pi_2", "processing"))
	wantOutcome(t, "Claim(stale processing)", res, tiers.OutcomeSuperseded)
	if res.Entity == nil || res.Entity.State != "refunded" {
		t.Fatalf("Claim(stale processing).Entity = %+v, want state refunded", res.Entity)
	}
	if diff := cmp.Diff([]string{"created", "processing", "succeeded", "refunded"}, e.applied("pi_2")); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	if n, err := e.store.CountDeferred(e.ctx(), map[string]tiers.DeferredCutoffs{"stripe": {}}); err != nil || n.Deferred != 0 {
		t.Fatalf("CountDeferred() after the refund applied = %+v, %v; want 0 deferred", n, err)
	}
	events, next, err := e.store.ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: "billing", Provider: "stripe"})
	if err != nil || next != "" || len(events) != 2 {
		t.Fatalf("ListDeferred() = %+v, %q, %v; want 2 events on one page", events, next, err)
	}
	stale, refund := events[0], events[1]
	if stale.Key != "evt_processing_stale" || !stale.Superseded || stale.Count != 1 || stale.Applied || stale.EntityState != "refunded" {
		t.Errorf("ListDeferred()[0] = %+v, want the superseded processing event", stale)
	}
	if refund.Key != "evt_refund" || refund.Superseded || refund.Count != 2 || !refund.Applied ||
		refund.EventType != "refunded" || !cmp.Equal(refund.Awaiting, []string{"succeeded"}) || !refund.FirstSeen.Before(refund.LastSeen.Add(time.Nanosecond)) {
		t.Errorf("ListDeferred()[1] = %+v, want the refund deferred twice, then applied", refund)
	}
}

// TestEntityFailedAndReleasedFree: FAILED and Release free the entity
// without moving it.
func TestEntityFailedAndReleasedFree(t *testing.T) {
	e := newEnv(t)
	a := e.claim(e.entityParams("evt_a", "pi_5", "created"))
	e.transition("evt_a", a.Record.Token, tiers.StateFailed)
	if ent := e.entity("pi_5"); ent.State != "new" || ent.BusyWith != "" || ent.Version != 0 {
		t.Fatalf("entity after FAILED = %+v, want new, free, version 0", ent)
	}
	// An entity once acquired exists from then on, even with nothing
	// applied: a later deferral does not delete it.
	wantOutcome(t, "Claim(processing early)", e.claim(e.entityParams("evt_early", "pi_5", "processing")), tiers.OutcomeDeferred)
	if ent := e.entity("pi_5"); ent.State != "new" || ent.Version != 0 {
		t.Fatalf("entity after a deferral = %+v, want it still there, new, version 0", ent)
	}
	b := e.claim(e.entityParams("evt_b", "pi_5", "created"))
	wantOutcome(t, "Claim(b after a failed)", b, tiers.OutcomeAcquired)
	if _, err := e.store.Release(e.ctx(), tiers.ReleaseParams{Key: key("evt_b"), Now: e.clk.Now(), Token: b.Record.Token, SecretHash: ownerHash}); err != nil {
		t.Fatalf("Release(b) error = %v", err)
	}
	if ent := e.entity("pi_5"); ent.State != "new" || ent.BusyWith != "" {
		t.Fatalf("entity after Release = %+v, want new, free", ent)
	}
	// Released again: a no-op, as without an entity.
	if _, err := e.store.Release(e.ctx(), tiers.ReleaseParams{Key: key("evt_b"), Now: e.clk.Now(), Token: b.Record.Token, SecretHash: ownerHash}); err != nil {
		t.Fatalf("Release(b) again error = %v", err)
	}
	c := e.claim(e.entityParams("evt_c", "pi_5", "canceled"))
	wantOutcome(t, "Claim(c after b released)", c, tiers.OutcomeAcquired)
	// The released key claimed again waits behind c.
	again := e.claim(e.entityParams("evt_b", "pi_5", "created"))
	wantOutcome(t, "Claim(b again)", again, tiers.OutcomeDeferred)
	if rec := e.get("evt_b"); rec == nil || !rec.Released || rec.Token != b.Record.Token || !cmp.Equal(again.Record, *rec) {
		t.Fatalf("b's record after a DEFERRED claim = %+v, answered %+v; want it released at token %d (the takeover rolled back), answered as it stands",
			rec, again.Record, b.Record.Token)
	}
	e.settle("evt_c", c.Record.Token)
	// Settling twice is a no-op and applies nothing twice.
	e.transition("evt_c", c.Record.Token, tiers.StateSettled)
	if diff := cmp.Diff([]string{"canceled"}, e.applied("pi_5")); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	wantOutcome(t, "Claim(b after c settled)", e.claim(e.entityParams("evt_b", "pi_5", "created")), tiers.OutcomeSuperseded)
}

// TestEntityRaceOneWinner: 64 events of one entity, each able to proceed
// from its state, claim at once: exactly one acquires. While its owner
// settles, all of them claim again: whatever acquires then does so from the
// state the settle reached, never from the first one, and the entity's
// history is one chain in which no state was left twice.
func TestEntityRaceOneWinner(t *testing.T) {
	e := newEnv(t)
	const n = 64
	types := []string{"created", "canceled"}
	claimAll := func() []tiers.ClaimResult {
		results := make([]tiers.ClaimResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p := e.entityParams(fmt.Sprintf("evt_%02d", i), "pi_race", types[i%2])
				p.Holder = fmt.Sprintf("pod-%d", i)
				results[i], errs[i] = e.store.Claim(context.Background(), p)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("Claim #%d error = %v", i, err)
			}
		}
		return results
	}
	settle := func(i int, token uint64) error {
		for _, to := range []tiers.State{tiers.StateProcessing, tiers.StateSettled} {
			if _, _, err := e.store.Transition(context.Background(), tiers.TransitionParams{Key: key(fmt.Sprintf("evt_%02d", i)),
				Now: e.clk.Now(), Token: token, SecretHash: ownerHash, To: to, Result: []byte("r")}); err != nil {
				return err
			}
		}
		return nil
	}
	winner := -1
	for i, res := range claimAll() {
		switch res.Outcome {
		case tiers.OutcomeAcquired:
			if winner >= 0 {
				t.Fatalf("claims #%d and #%d both ACQUIRED events of one entity in state new", winner, i)
			}
			winner = i
		case tiers.OutcomeDeferred:
			if res.Entity.BusyWith == "" {
				t.Errorf("claim #%d DEFERRED in state %s without a busy holder", i, res.Entity.State)
			}
		default:
			t.Fatalf("claim #%d = %v, want ACQUIRED or DEFERRED", i, res.Outcome)
		}
	}
	if winner < 0 {
		t.Fatal("no claim ACQUIRED")
	}
	settled := make(chan error, 1)
	go func() { settled <- settle(winner, 1) }()
	second := -1
	for i, res := range claimAll() {
		if i == winner || res.Outcome != tiers.OutcomeAcquired {
			continue
		}
		if res.Entity.State == "new" || second >= 0 {
			t.Fatalf("claim #%d ACQUIRED from %s (second winner so far: %d) while #%d held or settled the entity", i, res.Entity.State, second, winner)
		}
		second = i
		defer func() {
			if err := settle(i, res.Record.Token); err != nil {
				t.Errorf("settling #%d: %v", i, err)
			}
			checkChain(t, e.entity("pi_race"), 2)
		}()
	}
	if err := <-settled; err != nil {
		t.Fatalf("settling the winner: %v", err)
	}
	checkChain(t, e.entity("pi_race"), 1)
}

// checkChain checks that ent applied want events, the first from its
// initial state and each from the state the one before led to.
func checkChain(t *testing.T, ent tiers.Entity, want int) {
	t.Helper()
	if ent.Version != uint64(want) || len(ent.Applied) != want {
		t.Fatalf("entity version %d with %d applied events, want %d", ent.Version, len(ent.Applied), want)
	}
	from := "new"
	for i, a := range ent.Applied {
		if a.From != from {
			t.Fatalf("applied event %d (%s) from %s, want from %s", i, a.EventType, a.From, from)
		}
		from = a.To
	}
	if ent.State != from {
		t.Fatalf("entity state %s, want %s", ent.State, from)
	}
}

// TestEntitySettleRaceAfterLease: the owner whose lease ran out and the
// event that took the entity over settle at once, on 32 entities together:
// only the current holder advances each.
func TestEntitySettleRaceAfterLease(t *testing.T) {
	e := newEnv(t)
	const n = 32
	var wg sync.WaitGroup
	stale := make([]error, n)
	fresh := make([]error, n)
	for i := range n {
		id := fmt.Sprintf("pi_%02d", i)
		ka, kb := "a_"+id, "b_"+id
		a := e.claim(e.entityParams(ka, id, "created"))
		e.transition(ka, a.Record.Token, tiers.StateProcessing)
		p := e.entityParams(kb, id, "canceled")
		p.Now = e.clk.Now().Add(lease)
		b, err := e.store.Claim(e.ctx(), p)
		if err != nil || b.Outcome != tiers.OutcomeAcquired {
			t.Fatalf("Claim(%s after %s's lease) = %v, %v", kb, ka, b.Outcome, err)
		}
		if _, _, err := e.store.Transition(e.ctx(), tiers.TransitionParams{Key: key(kb), Now: p.Now, Token: b.Record.Token, SecretHash: ownerHash, To: tiers.StateProcessing}); err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _, stale[i] = e.store.Transition(context.Background(), tiers.TransitionParams{Key: key(ka), Now: p.Now, Token: a.Record.Token, SecretHash: ownerHash, To: tiers.StateSettled, Result: []byte("a")})
		}()
		go func() {
			defer wg.Done()
			_, _, fresh[i] = e.store.Transition(context.Background(), tiers.TransitionParams{Key: key(kb), Now: p.Now, Token: b.Record.Token, SecretHash: ownerHash, To: tiers.StateSettled, Result: []byte("b")})
		}()
	}
	wg.Wait()
	for i := range n {
		id := fmt.Sprintf("pi_%02d", i)
		if !errors.Is(stale[i], tiers.ErrStaleToken) || fresh[i] != nil {
			t.Errorf("%s: stale owner's settle = %v (want ErrStaleToken), holder's = %v (want nil)", id, stale[i], fresh[i])
		}
		if got := e.applied(id); !cmp.Equal(got, []string{"canceled"}) {
			t.Errorf("%s applied %v, want [canceled]", id, got)
		}
	}
}

func TestListDeferredPagesNewestFirst(t *testing.T) {
	e := newEnv(t)
	var want []string
	for i := range 5 {
		k := fmt.Sprintf("evt_%d", i)
		p := e.entityParams(k, "pi_page", "succeeded")
		wantOutcome(t, "Claim("+k+")", e.claim(p), tiers.OutcomeDeferred)
		want = append([]string{k}, want...)
		e.clk.Advance(time.Second)
	}
	// Two keys deferred at one instant: the key breaks the tie.
	for _, k := range []string{"evt_tie_a", "evt_tie_b"} {
		wantOutcome(t, "Claim("+k+")", e.claim(e.entityParams(k, "pi_page", "refunded")), tiers.OutcomeDeferred)
	}
	want = append([]string{"evt_tie_b", "evt_tie_a"}, want...)
	wantOutcome(t, "Claim(other entity)", e.claim(e.entityParams("evt_other", "pi_other", "processing")), tiers.OutcomeDeferred)
	e.clk.Advance(time.Second)
	// Deferred again: it moves to the front.
	wantOutcome(t, "Claim(evt_0 again)", e.claim(e.entityParams("evt_0", "pi_page", "succeeded")), tiers.OutcomeDeferred)
	want = append([]string{"evt_0"}, want[:len(want)-1]...)

	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("ListDeferred never ended")
		}
		events, next, err := e.store.ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: "billing", Provider: "stripe", EntityID: "pi_page", Page: tiers.Page{Size: 2, After: after}})
		if err != nil {
			t.Fatalf("ListDeferred(after %q) error = %v", after, err)
		}
		if len(events) > 2 {
			t.Fatalf("ListDeferred(limit 2) returned %d", len(events))
		}
		for _, ev := range events {
			got = append(got, ev.Key)
		}
		if next == "" {
			break
		}
		after = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys over all pages (-want +got):\n%s", diff)
	}
	all, _, err := e.store.ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: "billing", Provider: "stripe"})
	if err != nil || len(all) != len(want)+1 {
		t.Fatalf("ListDeferred(provider) = %d events, %v; want %d", len(all), err, len(want)+1)
	}
	if all[0].Key != "evt_0" || all[0].Count != 2 {
		t.Errorf("ListDeferred(provider)[0] = %+v, want evt_0 seen twice", all[0])
	}
	if _, _, err := e.store.ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: "billing", Provider: "stripe", Page: tiers.Page{After: "not a cursor!"}}); !errors.Is(err, tiers.ErrInvalidCursor) {
		t.Errorf("ListDeferred(malformed cursor) error = %v, want ErrInvalidCursor", err)
	}
	if other, _, err := e.store.ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: "billing", Provider: "github"}); err != nil || len(other) != 0 {
		t.Errorf("ListDeferred(another provider) = %v, %v; want none", other, err)
	}
}

// TestPruneEntities: entities and deferral rows go once every window of
// theirs is over, applied events with their entity (counted); newer ones
// stay.
func TestPruneEntities(t *testing.T) {
	e := newEnv(t)
	res := e.claim(e.entityParams("evt_old", "pi_old", "created"))
	e.settle("evt_old", res.Record.Token)
	wantOutcome(t, "Claim(old deferred)", e.claim(e.entityParams("evt_old_d", "pi_old", "succeeded")), tiers.OutcomeDeferred)
	e.clk.Advance(ttl / 2)
	res = e.claim(e.entityParams("evt_new", "pi_new", "created"))
	e.settle("evt_new", res.Record.Token)
	wantOutcome(t, "Claim(new deferred)", e.claim(e.entityParams("evt_new_d", "pi_new", "succeeded")), tiers.OutcomeDeferred)

	cutoff := e.clk.Now().Add(ttl/2 + time.Second) // past the old windows, within the new
	n, err := e.store.Prune(e.ctx(), cutoff, 100)
	if err != nil || n != 1 {
		t.Fatalf("Prune() = %d, %v; want 1 (the old claim record)", n, err)
	}
	pruned, err := e.store.PruneEntities(e.ctx(), cutoff, 100)
	if want := (tiers.Pruned{Entities: 1, EntityEvents: 1, Deferrals: 1}); err != nil || pruned != want {
		t.Fatalf("PruneEntities() = %+v, %v; want %+v (pi_old, its event, evt_old_d)", pruned, err, want)
	}
	if _, err := e.store.GetEntity(e.ctx(), tiers.EntityKey{Namespace: "billing", Provider: "stripe", Lifecycle: "payment", EntityID: "pi_old"}); !errors.Is(err, tiers.ErrEntityNotFound) {
		t.Errorf("GetEntity(pi_old) after prune error = %v, want ErrEntityNotFound", err)
	}
	if diff := cmp.Diff([]string{"created"}, e.applied("pi_new")); diff != "" {
		t.Errorf("pi_new applied after prune (-want +got):\n%s", diff)
	}
	events, _, err := e.store.ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: "billing", Provider: "stripe"})
	if err != nil || len(events) != 1 || events[0].Key != "evt_new_d" {
		t.Errorf("ListDeferred() after prune = %+v, %v; want only evt_new_d", events, err)
	}
	var orphans int
	if err := e.db.QueryRow(e.ctx(), `SELECT count(*) FROM entity_events WHERE entity_id = 'pi_old'`).Scan(&orphans); err != nil || orphans != 0 {
		t.Errorf("applied events of the pruned entity = %d, %v; want 0", orphans, err)
	}
}

// TestEntityAuditRows: a DEFERRED or SUPERSEDED claim is audited with its
// outcome and no record (state and token 0: none was written), and the
// acquisition it rolled back left no ACQUIRED row.
func TestEntityAuditRows(t *testing.T) {
	e := newEnv(t)
	wantOutcome(t, "Claim(succeeded first)", e.claim(e.entityParams("evt_s", "pi_audit", "succeeded")), tiers.OutcomeDeferred)
	res := e.claim(e.entityParams("evt_c", "pi_audit", "created"))
	e.settle("evt_c", res.Record.Token)
	wantOutcome(t, "Claim(created again, another key)", e.claim(e.entityParams("evt_c2", "pi_audit", "created")), tiers.OutcomeSuperseded)
	wantOutcome(t, "Claim(canceled, from created)", e.claim(e.entityParams("evt_x", "pi_audit", "canceled")), tiers.OutcomeAcquired)
	outcome := func(o tiers.Outcome) *int16 { v := int16(o); return &v }
	reason := func(r tiers.Reason) *int16 { v := int16(r); return &v }
	for k, want := range map[string][]auditRow{
		"evt_s":  {{Op: "claim", Outcome: outcome(tiers.OutcomeDeferred), Holder: "pod-a"}},
		"evt_c2": {{Op: "claim", Outcome: outcome(tiers.OutcomeSuperseded), Holder: "pod-a"}},
		"evt_x": {{Op: "claim", Outcome: outcome(tiers.OutcomeAcquired), Reason: reason(tiers.ReasonNew),
			State: int16(tiers.StateReceived), Token: 1, Holder: "pod-a"}},
	} {
		if diff := cmp.Diff(want, e.audit(k)); diff != "" {
			t.Errorf("audit_log of %s (-want +got):\n%s", k, diff)
		}
	}
}

// TestUpgradeKeepsRecordsWithoutEntities: a record written before
// migration 0004 reads back after it as a record of no entity, and settles.
func TestUpgradeKeepsRecordsWithoutEntities(t *testing.T) {
	url := freshDatabase(t)
	ctx := context.Background()
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, url: url, store: s, clk: clock.NewFake(time.Now())}
	res := e.claim(e.params("evt_v3"))
	e.transition("evt_v3", res.Record.Token, tiers.StateProcessing)
	s.Close()
	backToSchema3(t, url)
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatalf("Migrate(schema 3) error = %v", err)
	}
	if e.store, err = postgres.New(ctx, postgres.Config{URL: url}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	if rec := e.get("evt_v3"); rec == nil || rec.State != tiers.StateProcessing || rec.Lifecycle != "" || rec.EntityID != "" || rec.EventType != "" {
		t.Fatalf("Get(schema-3 record) = %+v, want PROCESSING with no entity", rec)
	}
	if rec := e.transition("evt_v3", res.Record.Token, tiers.StateSettled); rec.State != tiers.StateSettled {
		t.Fatalf("Transition(schema-3 record →SETTLED) state = %v", rec.State)
	}
}

// backToSchema3 undoes migrations 0004 and later in the default schema of
// url, as a binary before lifecycles left it.
func backToSchema3(t *testing.T, url string) {
	t.Helper()
	for _, q := range []string{
		`ALTER TABLE audit_log DROP COLUMN principal, DROP COLUMN transport, DROP COLUMN effect_recovered`,
		`ALTER TABLE claims DROP COLUMN lifecycle, DROP COLUMN entity_id, DROP COLUMN event_type, DROP COLUMN entity_to`,
		`DROP TABLE entity_events, entities, deferrals`,
		`DELETE FROM claimd_schema_migrations WHERE version > 3`,
	} {
		if _, err := openDB(t, url, postgres.DefaultSchema).Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestMigrateEntitiesOnPartitionedClaims: a deployment whose claims were
// hash-partitioned before migration 0004 gets the entity columns on every
// partition, and lifecycle claims work on it.
func TestMigrateEntitiesOnPartitionedClaims(t *testing.T) {
	url := freshDatabase(t)
	ctx := context.Background()
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	backToSchema3(t, url)
	if err := postgres.PartitionClaims(ctx, postgres.Config{URL: url}, 4); err != nil {
		t.Fatalf("PartitionClaims(schema 3) error = %v", err)
	}
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatalf("Migrate(partitioned schema 3) error = %v", err)
	}
	db := openDB(t, url, postgres.DefaultSchema)
	var partitions, withColumns int
	if err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE (
			SELECT count(*) FROM pg_attribute a WHERE a.attrelid = i.inhrelid AND NOT a.attisdropped
			  AND a.attname IN ('lifecycle', 'entity_id', 'event_type', 'entity_to')) = 4)
		FROM pg_inherits i WHERE i.inhparent = 'claims'::regclass`).Scan(&partitions, &withColumns); err != nil {
		t.Fatal(err)
	}
	if partitions != 4 || withColumns != 4 {
		t.Fatalf("%d of %d claims partitions have the entity columns, want 4 of 4", withColumns, partitions)
	}
	s, err := postgres.New(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, url: url, store: s, clk: clock.NewFake(time.Now())}
	t.Cleanup(func() { e.store.Close() })
	wantOutcome(t, "Claim(processing first)", e.claim(e.entityParams("evt_p", "pi_part", "processing")), tiers.OutcomeDeferred)
	res := e.claim(e.entityParams("evt_c", "pi_part", "created"))
	e.settle("evt_c", res.Record.Token)
	res = e.claim(e.entityParams("evt_p", "pi_part", "processing"))
	wantOutcome(t, "Claim(processing after created)", res, tiers.OutcomeAcquired)
	e.settle("evt_p", res.Record.Token)
	if diff := cmp.Diff([]string{"created", "processing"}, e.applied("pi_part")); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
}

// TestStepInsideEntitySettle: Config.Step (the fault suite's crash points)
// is called before and after the entity row's update of a settle, both
// inside its transaction: at either step another connection still reads
// the entity as it was. No other write calls it.
func TestStepInsideEntitySettle(t *testing.T) {
	type seen struct {
		Step, Key, State string
		Version          uint64
	}
	var steps []seen
	url := testenv.Postgres(t, postgres.Migrate)
	var s *postgres.Store
	s, err := postgres.New(context.Background(), postgres.Config{URL: url, Step: func(step string, k tiers.Key) {
		ent, err := s.GetEntity(context.Background(), tiers.EntityKey{Namespace: "billing", Provider: "stripe", Lifecycle: "payment", EntityID: "pay_1"})
		if err != nil {
			t.Errorf("GetEntity at %s: %v", step, err)
		}
		steps = append(steps, seen{step, k.Key, ent.State, ent.Version})
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := &env{t: t, url: url, store: s, db: openDB(t, url, postgres.DefaultSchema), clk: clock.NewFake(time.Now())}

	plain := e.claim(e.params("evt_plain"))
	e.settle("evt_plain", plain.Record.Token)
	c := e.claim(e.entityParams("evt_c", "pay_1", "created"))
	e.transition("evt_c", c.Record.Token, tiers.StateProcessing)
	if len(steps) != 0 {
		t.Fatalf("steps before the entity settle: %v", steps)
	}
	e.transition("evt_c", c.Record.Token, tiers.StateSettled)
	want := []seen{{"entity-settle-before", "evt_c", "new", 0}, {"entity-settle-after", "evt_c", "new", 0}}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	if ent := e.entity("pay_1"); ent.State != "created" || ent.Version != 1 {
		t.Errorf("after the commit: %s version %d, want created version 1", ent.State, ent.Version)
	}
}
