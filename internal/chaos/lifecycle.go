package chaos

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/textclip"
)

// Entity lifecycles under faults (the lifecycle scenarios of cmd/chaos).
//
// Callers deliver the events of many entities out of order, several times
// each, and act like handlers: Claim with entity_id and event_type; on
// ACQUIRED apply the event (an application, recorded by the Claim's answer)
// and settle it; on DEFERRED or IN_PROGRESS come back later as a new
// delivery (the provider's retry); on DUPLICATE or SUPERSEDED stop. The
// model of an entity is the chain of its applications in the order they
// were acquired: each one's from-state is the previous one's to-state. From
// the chain and the times of the settles, the model knows which state the
// entity was in at any instant, up to the window between a settle's first
// send and its first answer in which it committed; every entity state an
// answer reports is judged against that.

// Event is one event the lifecycle load delivers.
type Event struct {
	Key       string // the event id, the claim's key
	Lifecycle string
	EntityID  string
	EventType string
}

// ReadKind names an EntityService call.
type ReadKind uint8

// The EntityService calls a run records.
const (
	ReadEntity   ReadKind = iota + 1 // GetEntity
	ReadDeferred                     // ListDeferred of one entity
)

// EntityRead is one EntityService call about one entity, as a caller (or
// the final probe) made and saw it.
type EntityRead struct {
	Kind             ReadKind
	Replica          string
	Lifecycle        string
	EntityID         string
	Invoke, Complete int64
	Final            bool // after the load: what the entity converged to
	Code             codes.Code
	Message          string
	State            string // GetEntity
	Version          uint64
	BusyWith         string
	Applied          []AppliedRow
	Deferred         []DeferredRow // ListDeferred
	EntityNotFound   bool          // GetEntity answered NOT_FOUND/ENTITY_NOT_FOUND
}

// AppliedRow is one applied event of a GetEntity answer.
type AppliedRow struct {
	Key, EventType, From, To string
	Token                    uint64
}

// DeferredRow is one event of a ListDeferred answer.
type DeferredRow struct {
	Key, EventType, EntityState string
	Superseded, Applied, Ready  bool
	Count                       uint32
}

// Names of the lifecycle checks, as the report prints them.
const (
	CheckAppliedOnce = "applied-once"
	CheckEventEnds   = "applied-or-superseded"
	CheckOrder       = "lifecycle-order"
	CheckOrdered     = "ordered-answers"
	CheckReady       = "deferred-ready"
	CheckEntity      = "entity-converges"
)

// LifecycleChecks lists the lifecycle checks in report order, each with
// what it asserts.
var LifecycleChecks = []struct{ Name, Asserts string }{
	{CheckAppliedOnce, "no event was applied twice: at most one delivery of it was answered ACQUIRED (so at most one handler ran its side effect), and it appears at most once in GetEntity's applied list"},
	{CheckEventEnds, "once the faults stopped and the callers finished, every event was either applied and settled or answered SUPERSEDED, never both; the only other end allowed is an event still deferred in a state from which the lifecycle still allows it (what it waits for, such as a second payment_failed, was never sent), which is counted as waiting"},
	{CheckOrder, "the applications of an entity form one chain: each was acquired in a state its event may arrive in, that state is the one the previous application led to (the lifecycle's first state for the first), and no application was acquired before the previous one's settle was sent (one event at a time)"},
	{CheckOrdered, "every DEFERRED and SUPERSEDED answer is what the lifecycle says of the entity state it reports (SUPERSEDED: no state the event may arrive in is reachable; DEFERRED: one still is, or another event holds the entity, which defers whatever the state), and every state an answer reports was the entity's state at some instant of the call"},
	{CheckReady, "ListDeferred shows each deferred event as the model has it: the entity state it shows was current during the call, applied only once its settle was sent, and ready exactly when that state is one the event may arrive in; after the run no event is left deferred on any replica unless its entity's state still allows it (never one that is ready)"},
	{CheckEntity, "after the run GetEntity answers, on every replica, the model's state, version and applied events (key, from, to, token, in order), with no event holding the entity"},
}

// LifecycleInput is what a lifecycle run hands to CheckLifecycles.
type LifecycleInput struct {
	Ops        []Op
	Events     []Event
	Reads      []EntityRead
	Lifecycles map[string]*horizon.Lifecycle
	// Orphaned names keys held by an orphaned grant (Result.Orphaned): their
	// entities stay held until the lease ends, so their other events wait.
	Orphaned []string
	Replicas []string
}

// LifecycleResult is what CheckLifecycles found.
type LifecycleResult struct {
	Violations                            []Violation
	Entities, Events, Applied, Superseded int
	// Waiting counts events neither applied nor superseded at the end, in
	// a state from which the lifecycle still allows them: what they wait
	// for (a second payment_failed, say) was never sent.
	Waiting         int
	DeferredAnswers int // Claims answered DEFERRED
	ReadyRows       int // ListDeferred rows seen ready (during the run)
	Reads           int // EntityService calls
	// HeldByOrphan names entities held at the end by an orphaned grant;
	// Excused names the keys whose convergence violations that explains.
	HeldByOrphan []string
	Excused      map[string]bool
}

// application is one event applied: a delivery answered ACQUIRED whose
// handler then applied it, and the settle that ended it.
type application struct {
	op *Op
	// settleLo is the first send of the settle (the earliest it may have
	// committed), settleHi its first OK answer (the latest); MaxInt64 when
	// never sent or never answered.
	settleLo, settleHi int64
	to                 string
}

// entityModel is one entity's events and chain.
type entityModel struct {
	lc      *horizon.Lifecycle
	id      string
	events  map[string]Event // by key
	chain   []*application   // in acquisition order
	ops     []*Op            // its claims
	reads   []*EntityRead
	orphan  string // an orphaned key of the entity, if any
	initial string
}

// CheckLifecycles runs the lifecycle checks.
func CheckLifecycles(in LifecycleInput) LifecycleResult {
	res := LifecycleResult{Excused: map[string]bool{}}
	add := func(v ...Violation) { res.Violations = append(res.Violations, v...) }
	orphaned := map[string]bool{}
	for _, k := range in.Orphaned {
		orphaned[k] = true
	}
	entities := map[string]*entityModel{}
	eventOf := map[string]Event{}
	id := func(lc, e string) string { return lc + "/" + e }
	for _, ev := range in.Events {
		eventOf[ev.Key] = ev
		m := entities[id(ev.Lifecycle, ev.EntityID)]
		if m == nil {
			lc := in.Lifecycles[ev.Lifecycle]
			if lc == nil {
				add(Violation{CheckOrder, ev.Key, "unknown lifecycle " + ev.Lifecycle})
				continue
			}
			m = &entityModel{lc: lc, id: ev.EntityID, events: map[string]Event{}, initial: lc.Initial()}
			entities[id(ev.Lifecycle, ev.EntityID)] = m
		}
		m.events[ev.Key] = ev
		if orphaned[ev.Key] {
			m.orphan = ev.Key
		}
	}
	res.Entities, res.Events = len(entities), len(in.Events)

	// Settles by (key, token): the window in which each committed.
	type kt struct {
		key   string
		token uint64
	}
	settleLo, settleHi := map[kt]int64{}, map[kt]int64{}
	for i := range in.Ops {
		o := &in.Ops[i]
		if o.Kind != KindTransition || o.To != pb.EventState_EVENT_STATE_SETTLED {
			continue
		}
		k := kt{o.Key, o.Token}
		if lo, ok := settleLo[k]; !ok || o.Invoke < lo {
			settleLo[k] = o.Invoke
		}
		if o.Code == codes.OK {
			if hi, ok := settleHi[k]; !ok || o.Complete < hi {
				settleHi[k] = o.Complete
			}
		}
	}
	orMax := func(m map[kt]int64, k kt) int64 {
		if v, ok := m[k]; ok {
			return v
		}
		return math.MaxInt64
	}

	// Every claim of an event, and the applications among them.
	for i := range in.Ops {
		o := &in.Ops[i]
		ev, ok := eventOf[o.Key]
		if !ok || o.Kind != KindClaim {
			continue
		}
		m := entities[id(ev.Lifecycle, ev.EntityID)]
		if m == nil {
			continue
		}
		m.ops = append(m.ops, o)
		if o.Code != codes.OK {
			continue
		}
		switch o.Outcome {
		case pb.Outcome_OUTCOME_ACQUIRED:
			if o.Probe {
				add(Violation{CheckEventEnds, o.Key, fmt.Sprintf("the final probe on %s was answered ACQUIRED in %s: the event was still waiting to be applied after the run", o.Replica, o.EntState)})
				continue
			}
			k := kt{o.Key, o.AckToken}
			to := ""
			if e := lifecycleEvent(m.lc, ev.EventType); e != nil {
				to = e.To
			}
			m.chain = append(m.chain, &application{op: o, settleLo: orMax(settleLo, k), settleHi: orMax(settleHi, k), to: to})
			res.Applied++
		case pb.Outcome_OUTCOME_DEFERRED:
			if !o.Probe {
				res.DeferredAnswers++
			}
		}
	}
	for i := range in.Reads {
		r := &in.Reads[i]
		res.Reads++
		if m := entities[id(r.Lifecycle, r.EntityID)]; m != nil {
			m.reads = append(m.reads, r)
		}
	}

	names := make([]string, 0, len(entities))
	for k := range entities {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		m := entities[name]
		sort.SliceStable(m.chain, func(i, j int) bool { return m.chain[i].op.Complete < m.chain[j].op.Complete })
		heldByOrphan := m.orphan != "" && m.finalBusyWith(in.Replicas) == m.orphan
		if heldByOrphan {
			res.HeldByOrphan = append(res.HeldByOrphan, name)
			for k := range m.events {
				res.Excused[k] = true
			}
		}
		add(m.checkAppliedOnce()...)
		ends, superseded, waiting := m.checkEnds(heldByOrphan)
		res.Superseded += superseded
		res.Waiting += waiting
		add(ends...)
		add(m.checkChain()...)
		add(m.checkAnswers()...)
		v, ready := m.checkDeferred(heldByOrphan, in.Replicas)
		res.ReadyRows += ready
		add(v...)
		add(m.checkEntity(heldByOrphan, in.Replicas)...)
	}
	return res
}

// Excuse drops the convergence violations of keys whose entity is held by
// an orphaned grant (r.Excused): its events wait for a lease that outlives
// the run, reported as held by an orphan instead.
func (r LifecycleResult) Excuse(vs []Violation) []Violation {
	out := vs[:0:0]
	for _, v := range vs {
		if v.Check == CheckConverge && r.Excused[v.Key] {
			continue
		}
		out = append(out, v)
	}
	return out
}

func lifecycleEvent(lc *horizon.Lifecycle, eventType string) *horizon.LifecycleEvent {
	for _, e := range lc.Events {
		if e.EventType == eventType {
			return e
		}
	}
	return nil
}

// finalBusyWith is what every replica's final GetEntity says holds the
// entity, or "" when they disagree or none was read.
func (m *entityModel) finalBusyWith(replicas []string) string {
	busy := map[string]string{}
	for _, r := range m.reads {
		if r.Final && r.Kind == ReadEntity && r.Code == codes.OK {
			busy[r.Replica] = r.BusyWith
		}
	}
	out := ""
	for i, rep := range replicas {
		b, ok := busy[rep]
		if !ok || (i > 0 && b != out) {
			return ""
		}
		out = b
	}
	return out
}

func (m *entityModel) checkAppliedOnce() []Violation {
	var out []Violation
	attempts := map[string][]string{}
	for _, a := range m.chain {
		attempts[a.op.Key] = append(attempts[a.op.Key], fmt.Sprintf("%s t%d (c%d on %s)", a.op.AttemptID, a.op.AckToken, a.op.Client, a.op.Replica))
	}
	for k, as := range attempts {
		if len(as) > 1 {
			out = append(out, Violation{CheckAppliedOnce, k, fmt.Sprintf("%d deliveries were answered ACQUIRED and applied: %s", len(as), strings.Join(as, ", "))})
		}
	}
	for _, r := range m.reads {
		if r.Kind != ReadEntity || r.Code != codes.OK {
			continue
		}
		seen := map[string]bool{}
		for _, a := range r.Applied {
			if seen[a.Key] {
				out = append(out, Violation{CheckAppliedOnce, a.Key, fmt.Sprintf("GetEntity on %s lists it twice among %s's applied events", r.Replica, m.id)})
			}
			seen[a.Key] = true
		}
	}
	return out
}

// checkEnds: every event applied (and settled) or superseded, not both.
func (m *entityModel) checkEnds(heldByOrphan bool) (out []Violation, superseded, waiting int) {
	applied := map[string]*application{}
	for _, a := range m.chain {
		applied[a.op.Key] = a
	}
	sup := map[string]*Op{}
	for _, o := range m.ops {
		if o.Code == codes.OK && o.Outcome == pb.Outcome_OUTCOME_SUPERSEDED && sup[o.Key] == nil {
			sup[o.Key] = o
		}
	}
	for _, k := range sortedEventKeys(m.events) {
		a, s := applied[k], sup[k]
		if s != nil {
			superseded++
		}
		switch {
		case a != nil && s != nil:
			out = append(out, Violation{CheckEventEnds, k, fmt.Sprintf("applied (t%d, c%d) and answered SUPERSEDED in %s (c%d on %s)", a.op.AckToken, a.op.Client, s.EntState, s.Client, s.Replica)})
		case a != nil && a.settleHi == math.MaxInt64:
			if !heldByOrphan {
				out = append(out, Violation{CheckEventEnds, k, fmt.Sprintf("applied (t%d, c%d) but its settle was never answered", a.op.AckToken, a.op.Client)})
			}
		case a == nil && s == nil && !heldByOrphan:
			if e := lifecycleEvent(m.lc, m.events[k].EventType); e != nil && OrderOf(e, m.finalState()) == OrderDefer {
				waiting++ // what it waits for was never sent: allowed, counted
				continue
			}
			out = append(out, Violation{CheckEventEnds, k, fmt.Sprintf("neither applied nor superseded (%s of %s, which ended in %q); last answer: %s", m.events[k].EventType, m.id, m.finalState(), m.lastAnswer(k))})
		}
	}
	return out, superseded, waiting
}

// finalState is the state the model's chain ends in.
func (m *entityModel) finalState() string {
	if len(m.chain) == 0 {
		return m.initial
	}
	return m.chain[len(m.chain)-1].to
}

func (m *entityModel) lastAnswer(key string) string {
	var last *Op
	for _, o := range m.ops {
		if o.Key == key && !o.Probe && (last == nil || o.Invoke > last.Invoke) {
			last = o
		}
	}
	if last == nil {
		return "never delivered"
	}
	return last.String()
}

// checkChain: the applications of the entity in acquisition order.
func (m *entityModel) checkChain() []Violation {
	var out []Violation
	state := m.initial
	for i, a := range m.chain {
		ev := m.events[a.op.Key]
		e := lifecycleEvent(m.lc, ev.EventType)
		from := a.op.EntState
		switch {
		case e == nil:
			out = append(out, Violation{CheckOrder, a.op.Key, "event type " + ev.EventType + " is not in lifecycle " + m.lc.Name})
		case from != state:
			out = append(out, Violation{CheckOrder, a.op.Key, fmt.Sprintf("%s of %s was applied from %q; the model's entity stood in %q (application %d)", ev.EventType, m.id, from, state, i+1)})
		case !slices.Contains(e.From, from):
			out = append(out, Violation{CheckOrder, a.op.Key, fmt.Sprintf("%s of %s was applied in %q, which it may not arrive in (from %v)", ev.EventType, m.id, from, e.From)})
		}
		if i > 0 {
			prev := m.chain[i-1]
			if a.op.Complete < prev.settleLo {
				out = append(out, Violation{CheckOrder, a.op.Key, fmt.Sprintf("%s of %s was acquired (c%d) before %s's settle was sent: two events held the entity at once", ev.EventType, m.id, a.op.Client, m.events[prev.op.Key].EventType)})
			}
		}
		state = a.to
	}
	return out
}

// current reports whether the entity stood in state at some instant of
// [inv, comp]: state k of the chain (0: the initial state) begins when the
// k-th application's settle committed and ends when the next one's did.
func (m *entityModel) current(state string, inv, comp int64) bool {
	for k := 0; k <= len(m.chain); k++ {
		s, begin := m.initial, int64(math.MinInt64)
		if k > 0 {
			s, begin = m.chain[k-1].to, m.chain[k-1].settleLo
		}
		end := int64(math.MaxInt64)
		if k < len(m.chain) {
			end = m.chain[k].settleHi
		}
		if s == state && begin <= comp && end >= inv {
			return true
		}
	}
	return false
}

// checkAnswers: DEFERRED and SUPERSEDED agree with the lifecycle, and the
// state each answer reports was current during the call.
func (m *entityModel) checkAnswers() []Violation {
	var out []Violation
	for _, o := range m.ops {
		if o.Code != codes.OK {
			continue
		}
		e := lifecycleEvent(m.lc, m.events[o.Key].EventType)
		if e == nil {
			continue
		}
		switch o.Outcome {
		case pb.Outcome_OUTCOME_ACQUIRED, pb.Outcome_OUTCOME_DEFERRED, pb.Outcome_OUTCOME_SUPERSEDED:
		default:
			continue
		}
		if o.EntState == "" {
			out = append(out, Violation{CheckOrdered, o.Key, fmt.Sprintf("c%d on %s: %s names no entity state", o.Client, o.Replica, o.AnswerString())})
			continue
		}
		if !m.current(o.EntState, o.Invoke, o.Complete) {
			out = append(out, Violation{CheckOrdered, o.Key, fmt.Sprintf("c%d on %s: %s, but %s was not in %q at any instant of the call", o.Client, o.Replica, o.AnswerString(), m.id, o.EntState)})
		}
		order := OrderOf(e, o.EntState)
		switch o.Outcome {
		case pb.Outcome_OUTCOME_SUPERSEDED:
			if order != OrderSupersede {
				out = append(out, Violation{CheckOrdered, o.Key, fmt.Sprintf("c%d on %s: SUPERSEDED in %q, from which %s may still arrive", o.Client, o.Replica, o.EntState, e.EventType)})
			}
		case pb.Outcome_OUTCOME_DEFERRED:
			// Another event holding the entity defers whatever the state.
			if o.BusyWith == "" && order != OrderDefer {
				out = append(out, Violation{CheckOrdered, o.Key, fmt.Sprintf("c%d on %s: DEFERRED in %q with no other event holding %s, where the lifecycle says %s", o.Client, o.Replica, o.EntState, m.id, orderName(order))})
			}
		}
	}
	return out
}

// checkDeferred judges ListDeferred reads; it returns how many rows of the
// run's reads were ready.
func (m *entityModel) checkDeferred(heldByOrphan bool, replicas []string) ([]Violation, int) {
	var out []Violation
	ready := 0
	appliedAt := map[string]*application{}
	for _, a := range m.chain {
		appliedAt[a.op.Key] = a
	}
	finalOn := map[string]bool{}
	for _, r := range m.reads {
		if r.Kind != ReadDeferred || r.Code != codes.OK {
			continue
		}
		if r.Final {
			finalOn[r.Replica] = true
		}
		for _, d := range r.Deferred {
			ev, ok := m.events[d.Key]
			if !ok {
				out = append(out, Violation{CheckReady, d.Key, fmt.Sprintf("ListDeferred of %s on %s lists an event of another entity", m.id, r.Replica)})
				continue
			}
			e := lifecycleEvent(m.lc, ev.EventType)
			if d.Ready && !r.Final {
				ready++
			}
			if !m.current(d.EntityState, r.Invoke, r.Complete) {
				out = append(out, Violation{CheckReady, d.Key, fmt.Sprintf("ListDeferred on %s showed %s in %q, not its state at any instant of the call", r.Replica, m.id, d.EntityState)})
			}
			a := appliedAt[d.Key]
			switch {
			case d.Applied && (a == nil || a.settleLo > r.Complete):
				out = append(out, Violation{CheckReady, d.Key, fmt.Sprintf("ListDeferred on %s showed it applied before its settle was sent", r.Replica)})
			case !d.Applied && !d.Superseded && a != nil && a.settleHi < r.Invoke:
				out = append(out, Violation{CheckReady, d.Key, fmt.Sprintf("ListDeferred on %s showed it not applied after its settle was answered", r.Replica)})
			}
			want := !d.Superseded && !d.Applied && e != nil && slices.Contains(e.From, d.EntityState)
			if d.Ready != want {
				out = append(out, Violation{CheckReady, d.Key, fmt.Sprintf("ListDeferred on %s: ready=%v in %q (applied=%v, superseded=%v)", r.Replica, d.Ready, d.EntityState, d.Applied, d.Superseded)})
			}
			if r.Final && !d.Applied && !d.Superseded && !heldByOrphan && (e == nil || OrderOf(e, d.EntityState) != OrderDefer) {
				out = append(out, Violation{CheckReady, d.Key, fmt.Sprintf("after the run ListDeferred on %s still shows %s deferred and not applied (ready=%v, entity in %q, %d deliveries)", r.Replica, ev.EventType, d.Ready, d.EntityState, d.Count)})
			}
		}
	}
	deferredOnce := false
	for _, o := range m.ops {
		if o.Code == codes.OK && (o.Outcome == pb.Outcome_OUTCOME_DEFERRED || o.Outcome == pb.Outcome_OUTCOME_SUPERSEDED) {
			deferredOnce = true
		}
	}
	if deferredOnce {
		for _, rep := range replicas {
			if !finalOn[rep] {
				out = append(out, Violation{CheckReady, m.id, "no final ListDeferred answered on " + rep})
			}
		}
	}
	return out, ready
}

// checkEntity compares every replica's final GetEntity with the model.
func (m *entityModel) checkEntity(heldByOrphan bool, replicas []string) []Violation {
	var out []Violation
	want := make([]AppliedRow, 0, len(m.chain))
	state := m.initial
	for _, a := range m.chain {
		want = append(want, AppliedRow{Key: a.op.Key, EventType: m.events[a.op.Key].EventType, From: a.op.EntState, To: a.to, Token: a.op.AckToken})
		state = a.to
	}
	last := map[string]*EntityRead{}
	for _, r := range m.reads {
		if r.Kind == ReadEntity && r.Final {
			last[r.Replica] = r
		}
	}
	for _, rep := range replicas {
		r := last[rep]
		switch {
		case r == nil:
			out = append(out, Violation{CheckEntity, m.id, "no final GetEntity on " + rep})
			continue
		case r.EntityNotFound:
			if len(m.chain) > 0 {
				out = append(out, Violation{CheckEntity, m.id, fmt.Sprintf("GetEntity on %s: not found, with %d events applied", rep, len(m.chain))})
			}
			continue
		case r.Code != codes.OK:
			out = append(out, Violation{CheckEntity, m.id, fmt.Sprintf("GetEntity on %s failed: %s %s", rep, r.Code, textclip.Cut(r.Message, maxReport))})
			continue
		}
		var diffs []string
		if r.State != state {
			diffs = append(diffs, fmt.Sprintf("state %q, model %q", r.State, state))
		}
		if r.Version != uint64(len(m.chain)) {
			diffs = append(diffs, fmt.Sprintf("version %d, model %d", r.Version, len(m.chain)))
		}
		if r.BusyWith != "" && !heldByOrphan {
			diffs = append(diffs, "busy with "+r.BusyWith)
		}
		if !slices.Equal(r.Applied, want) {
			diffs = append(diffs, fmt.Sprintf("applied %s, model %s", appliedString(r.Applied), appliedString(want)))
		}
		if len(diffs) > 0 {
			out = append(out, Violation{CheckEntity, m.id, fmt.Sprintf("GetEntity on %s: %s", rep, strings.Join(diffs, "; "))})
		}
	}
	return out
}

func orderName(o Order) string {
	switch o {
	case OrderProceed:
		return "proceed"
	case OrderDefer:
		return "defer"
	}
	return "supersede"
}

// Order is what a lifecycle says of an event arriving while its entity is
// in a state and no other event of the entity is owned (claim.proto,
// Lifecycles): the model's own statement of the rule.
type Order uint8

// The three answers of a lifecycle.
const (
	OrderProceed   Order = iota + 1 // the event may arrive in the state
	OrderDefer                      // it may not, but a state it may arrive in is still reachable
	OrderSupersede                  // no such state is reachable any more
)

// OrderOf decides e against an entity in state.
func OrderOf(e *horizon.LifecycleEvent, state string) Order {
	switch {
	case slices.Contains(e.From, state):
		return OrderProceed
	case slices.Contains(e.Wait, state):
		return OrderDefer
	}
	return OrderSupersede
}

func appliedString(rows []AppliedRow) string {
	parts := make([]string, len(rows))
	for i, a := range rows {
		parts[i] = fmt.Sprintf("%s(%s→%s t%d)", a.Key, a.From, a.To, a.Token)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func sortedEventKeys(m map[string]Event) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
