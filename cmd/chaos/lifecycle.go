package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/chaos"
	"github.com/claimd/claimd/internal/horizon"
)

// The lifecycle scenarios deliver the events of Stripe payment intents and
// charges, as the shipped providers.yaml declares their lifecycles, out of
// order and several times each (internal/chaos/lifecycle.go says what is
// checked).

// lifecycleProvider is the provider of the lifecycle scenarios: Stripe's
// lifecycles, copied node for node from the shipped registry, with the
// suite's hour-long lease (see providersYAML).
const lifecycleProvider = "chaos-stripe"

// lifecycleYAML returns the provider entry of lifecycleProvider, indented
// to sit under providersYAML's `providers:`.
func lifecycleYAML() (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(horizon.DefaultYAML(), &doc); err != nil {
		return "", err
	}
	stripe := mapValue(mapValue(doc.Content[0], "providers"), "stripe")
	lcs := mapValue(stripe, "lifecycles")
	if lcs == nil {
		return "", fmt.Errorf("the shipped providers.yaml declares no stripe lifecycles")
	}
	out, err := yaml.Marshal(map[string]any{lifecycleProvider: map[string]any{
		"retry_horizon": "72h", "margin": "12h", "lease": "1h", "max_lease": "1h",
		"key":         "json:id",
		"source":      "https://github.com/claimd/claimd/blob/main/cmd/chaos/lifecycle.go",
		"reviewed_on": "2026-11-01",
		"lifecycles":  lcs,
	}})
	if err != nil {
		return "", err
	}
	var b []byte
	for _, line := range splitLines(string(out)) {
		b = append(b, "  "+line+"\n"...)
	}
	return string(b), nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// lifecycles loads the lifecycles of lifecycleProvider from the registry
// file the replicas load.
func lifecycles(providers []byte) (map[string]*horizon.Lifecycle, error) {
	reg, err := horizon.Load("providers.yaml", providers)
	if err != nil {
		return nil, err
	}
	p, ok := reg.Lookup(lifecycleProvider)
	if !ok {
		return nil, fmt.Errorf("provider %s missing", lifecycleProvider)
	}
	out := map[string]*horizon.Lifecycle{}
	for _, l := range p.Lifecycles {
		out[l.Name] = l
	}
	return out, nil
}

// lifecycleLoad drives the events of many entities.
type lifecycleLoad struct {
	*load
	lcs      map[string]*horizon.Lifecycle
	names    []string // lifecycle names, in a fixed order
	readRate float64  // share of DEFERRED answers after which the caller reads ListDeferred

	mu     sync.Mutex
	events []chaos.Event
	reads  []chaos.EntityRead
	ents   []chaos.Event // one per entity (Key unused)
}

func newLifecycleLoad(cfg loadConfig, targets []*target, lcs map[string]*horizon.Lifecycle) *lifecycleLoad {
	l := &lifecycleLoad{load: newLoad(cfg, targets), lcs: lcs, readRate: 0.3}
	for _, n := range []string{"payment_intent", "charge"} {
		if lcs[n] != nil {
			l.names = append(l.names, n)
		}
	}
	return l
}

// run starts entities until stopKeys is done, then waits for every
// delivery to end or hard to be done.
func (l *lifecycleLoad) run(stopKeys, hard context.Context) {
	var wg sync.WaitGroup
	for range l.cfg.groups {
		wg.Go(func() {
			for stopKeys.Err() == nil {
				n := l.nextKey.Add(1)
				if int(n) > l.cfg.maxKeys {
					return
				}
				l.entity(hard, stopKeys, int(n))
			}
		})
	}
	wg.Wait()
}

// path is what the provider emits for one entity: a walk of its lifecycle
// from the first state along declared events, 1–6 events long (events that
// loop on a state, refunds and disputes, may repeat with ids of their own).
func (l *lifecycleLoad) path(lc *horizon.Lifecycle) []string {
	state := lc.Initial()
	var out []string
	for len(out) < 6 {
		var next []*horizon.LifecycleEvent
		for _, e := range lc.Events {
			for _, f := range e.From {
				if f == state {
					next = append(next, e)
				}
			}
		}
		if len(next) == 0 || (len(out) > 0 && rand.Float64() < 0.2) {
			break
		}
		e := next[rand.IntN(len(next))]
		out = append(out, e.EventType)
		state = e.To
	}
	return out
}

// entity plans one entity's events and delivers each of them 1–3 times
// (duplicates), every delivery starting at a random moment of the first
// 30 ms, so that they arrive in any order and race.
func (l *lifecycleLoad) entity(ctx, stop context.Context, n int) {
	name := l.names[n%len(l.names)]
	lc := l.lcs[name]
	entityID := fmt.Sprintf("%s-%s-%05d", l.cfg.prefix, name, n)
	var evs []chaos.Event
	for i, t := range l.path(lc) {
		evs = append(evs, chaos.Event{Key: fmt.Sprintf("%s-%05d-%d", l.cfg.prefix, n, i), Lifecycle: name, EntityID: entityID, EventType: t})
	}
	l.mu.Lock()
	l.events = append(l.events, evs...)
	l.ents = append(l.ents, chaos.Event{Lifecycle: name, EntityID: entityID})
	l.mu.Unlock()

	var wg sync.WaitGroup
	var unfinished atomic.Bool
	er := &entityRun{progress: time.Now()}
	for _, ev := range evs {
		for range 1 + rand.IntN(3) {
			client := int(l.clients.Add(1))
			er.running++
			wg.Go(func() {
				var waiting bool
				defer er.done(&waiting)
				pause(ctx, 0, 30*time.Millisecond) // out of order
				if !l.deliver(ctx, stop, client, ev, er, &waiting) && ctx.Err() != nil {
					unfinished.Store(true)
				}
			})
		}
	}
	wg.Wait()
	if unfinished.Load() {
		l.load.mu.Lock()
		for _, ev := range evs {
			l.load.unfinished = append(l.load.unfinished, ev.Key)
		}
		l.load.mu.Unlock()
	}
}

// deliver is a handler's view of one delivery of ev and the provider's
// retries of it: Claim with start (the record is PROCESSING at once); on
// ACQUIRED apply the event and settle it; on DEFERRED or IN_PROGRESS the
// provider delivers again later (a new attempt); on DUPLICATE or SUPERSEDED
// it is acknowledged. A failed call is retried with the same attempt_id.
// It returns true once the event's delivery ended as a handler's does.
func (l *lifecycleLoad) deliver(ctx, stop context.Context, client int, ev chaos.Event, er *entityRun, waiting *bool) bool {
	attempt := l.newAttempt(client)
	var lev *horizon.LifecycleEvent
	for _, e := range l.lcs[ev.Lifecycle].Events {
		if e.EventType == ev.EventType {
			lev = e
		}
	}
	for ctx.Err() == nil {
		t := l.pick()
		op, resp := l.claimEvent(ctx, t, client, ev, attempt, false)
		if op.Answered() {
			byState := op.Outcome == pb.Outcome_OUTCOME_DEFERRED && op.BusyWith == "" && chaos.OrderOf(lev, op.EntState) == chaos.OrderDefer
			moved := op.Outcome != pb.Outcome_OUTCOME_DEFERRED && op.Outcome != pb.Outcome_OUTCOME_IN_PROGRESS
			if er.answered(waiting, byState, moved) && stop.Err() != nil {
				// Nothing of the entity is in flight any more and none of
				// its events moved it for a while: what it waits for was
				// never sent, and the provider's retries end here. The
				// checks judge that the state still allows the event.
				return true
			}
		}
		switch {
		case !op.Answered():
			if !chaos.Retryable(op.Code) {
				return false
			}
			pause(ctx, 10*time.Millisecond, 40*time.Millisecond)
			continue // the same delivery retries its own call
		case op.Outcome == pb.Outcome_OUTCOME_DUPLICATE, op.Outcome == pb.Outcome_OUTCOME_SUPERSEDED:
			return true
		case op.Outcome == pb.Outcome_OUTCOME_ACQUIRED:
			// The application: the handler's side effect, from the state
			// the answer names (the checks judge it), then the settle.
			pause(ctx, time.Millisecond, 5*time.Millisecond)
			result := fmt.Sprintf("%s/t%d/c%d", ev.Key, resp.GetFencingToken(), client)
			return l.fenced(ctx, client, ev.Key, chaos.Op{Kind: chaos.KindTransition, Token: resp.GetFencingToken(),
				To: pb.EventState_EVENT_STATE_SETTLED, Result: result}, resp)
		case op.Outcome == pb.Outcome_OUTCOME_DEFERRED && rand.Float64() < l.readRate:
			// Someone looks at what waits (the on-call page).
			l.readDeferred(ctx, l.pick(), ev.Lifecycle, ev.EntityID, false)
		}
		// DEFERRED or IN_PROGRESS: the provider's retry, sooner than
		// retry_after so that a run sees many (Stripe ignores it anyway).
		pause(ctx, 20*time.Millisecond, 80*time.Millisecond)
		attempt = l.newAttempt(client)
	}
	return false
}

// entityRun is what the deliveries of one entity know of each other, so
// that the provider's retries of an event that waits for an event never
// sent end once nothing else of the entity moves (its retry horizon, made
// short).
type entityRun struct {
	mu       sync.Mutex
	running  int       // deliveries not ended
	waiting  int       // of them, those last answered DEFERRED by the entity's state
	progress time.Time // the last answer that moved or ended an event
}

// quiet is how long an entity must not move before the retries of its
// waiting events end.
const quiet = time.Second

// answered records a delivery's answer: waiting (DEFERRED by the
// entity's state) sets *mine, the delivery's own mark; moved (ACQUIRED,
// DUPLICATE, SUPERSEDED) is progress. It reports whether every delivery
// still running waits and nothing moved for quiet.
func (er *entityRun) answered(mine *bool, waiting, moved bool) bool {
	er.mu.Lock()
	defer er.mu.Unlock()
	if waiting != *mine {
		*mine = waiting
		if waiting {
			er.waiting++
		} else {
			er.waiting--
		}
	}
	if moved {
		er.progress = time.Now()
	}
	return waiting && er.waiting == er.running && time.Since(er.progress) > quiet
}

// done ends a delivery.
func (er *entityRun) done(mine *bool) {
	er.mu.Lock()
	defer er.mu.Unlock()
	if *mine {
		er.waiting--
	}
	er.running--
	er.progress = time.Now()
}

// claimEvent sends one Claim of ev and records it.
func (l *lifecycleLoad) claimEvent(ctx context.Context, t *target, client int, ev chaos.Event, attempt string, probe bool) (chaos.Op, *pb.ClaimResponse) {
	op := chaos.Op{Client: client, Key: ev.Key, Replica: t.name, Kind: chaos.KindClaim, AttemptID: attempt, Probe: probe,
		Start: true, Lifecycle: ev.Lifecycle, EntityID: ev.EntityID, EventType: ev.EventType}
	d := l.deadline()
	if probe {
		d = l.cfg.callTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	op.Deadline = int64(d)
	op.Invoke = time.Now().UnixNano()
	resp, err := t.c.Claim(cctx, &pb.ClaimRequest{
		Namespace: namespace, Provider: lifecycleProvider,
		Key:       &pb.ClaimRequest_EventId{EventId: ev.Key},
		Holder:    attempt,
		AttemptId: attempt,
		EntityId:  ev.EntityID, EventType: ev.EventType,
		Start: true,
	})
	op.Complete = time.Now().UnixNano()
	fillErr(&op, err)
	op.Cutoff = err != nil && cutoff(ctx)
	if err == nil {
		op.Outcome, op.Reason, op.AckToken = resp.GetOutcome(), resp.GetReason(), resp.GetFencingToken()
		op.AckResult, op.AckHolder, op.AckState, op.ServedBy = string(resp.GetResult()), resp.GetHolder(), resp.GetState(), resp.GetServedBy()
		op.EntState, op.BusyWith = resp.GetEntity().GetState(), resp.GetEntity().GetBusyWith()
	}
	op.ID = l.h.Add(op)
	return op, resp
}

// readDeferred calls ListDeferred for one entity and records the answer.
func (l *lifecycleLoad) readDeferred(ctx context.Context, t *target, lifecycle, entityID string, final bool) chaos.EntityRead {
	r := chaos.EntityRead{Kind: chaos.ReadDeferred, Replica: t.name, Lifecycle: lifecycle, EntityID: entityID, Final: final}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.callTimeout)
	defer cancel()
	r.Invoke = time.Now().UnixNano()
	resp, err := t.ent.ListDeferred(cctx, &pb.ListDeferredRequest{Namespace: namespace, Provider: lifecycleProvider, EntityId: entityID, PageSize: 1000})
	r.Complete = time.Now().UnixNano()
	r.Code, r.Message = status.Code(err), status.Convert(err).Message()
	for _, d := range resp.GetEvents() {
		r.Deferred = append(r.Deferred, chaos.DeferredRow{Key: d.GetKey(), EventType: d.GetEventType(), EntityState: d.GetEntityState(),
			Superseded: d.GetSuperseded(), Applied: d.GetApplied(), Ready: d.GetReady(), Count: d.GetCount()})
	}
	l.addRead(r)
	return r
}

// getEntity calls GetEntity and records the answer.
func (l *lifecycleLoad) getEntity(ctx context.Context, t *target, lifecycle, entityID string, final bool) chaos.EntityRead {
	r := chaos.EntityRead{Kind: chaos.ReadEntity, Replica: t.name, Lifecycle: lifecycle, EntityID: entityID, Final: final}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.callTimeout)
	defer cancel()
	r.Invoke = time.Now().UnixNano()
	resp, err := t.ent.GetEntity(cctx, &pb.GetEntityRequest{Namespace: namespace, Provider: lifecycleProvider, Lifecycle: lifecycle, EntityId: entityID})
	r.Complete = time.Now().UnixNano()
	var info chaos.Op
	fillErr(&info, err)
	r.Code, r.Message = info.Code, info.Message
	if r.Code == codes.NotFound && info.ErrReason == pb.ErrorReason_ENTITY_NOT_FOUND.String() {
		r.EntityNotFound = true
	}
	if e := resp.GetEntity(); e != nil {
		r.State, r.Version, r.BusyWith = e.GetState(), e.GetVersion(), e.GetBusyWith()
		for _, a := range e.GetApplied() {
			r.Applied = append(r.Applied, chaos.AppliedRow{Key: a.GetKey(), EventType: a.GetEventType(), From: a.GetFromState(), To: a.GetToState(), Token: a.GetFencingToken()})
		}
	}
	l.addRead(r)
	return r
}

func (l *lifecycleLoad) addRead(r chaos.EntityRead) {
	l.mu.Lock()
	l.reads = append(l.reads, r)
	l.mu.Unlock()
}

// probe reads every entity on every replica (GetEntity, ListDeferred),
// then claims every event on every replica as a fresh delivery. The reads
// come first: a probe of an event still waiting would acquire it. A failed
// read or claim, or an IN_PROGRESS, is asked again for a short while.
func (l *lifecycleLoad) probe(ctx context.Context, direct []*target) {
	l.mu.Lock()
	ents, evs := append([]chaos.Event(nil), l.ents...), append([]chaos.Event(nil), l.events...)
	l.mu.Unlock()
	parallel(ctx, len(ents), func(i int) {
		e := ents[i]
		for _, t := range direct {
			for try := 0; ; try++ {
				r := l.getEntity(ctx, t, e.Lifecycle, e.EntityID, true)
				if r.Code == codes.OK || r.EntityNotFound || try >= 20 || ctx.Err() != nil {
					break
				}
				sleep(ctx, 100*time.Millisecond) // polling for a replica still reconnecting
			}
			for try := 0; ; try++ {
				r := l.readDeferred(ctx, t, e.Lifecycle, e.EntityID, true)
				if r.Code == codes.OK || try >= 20 || ctx.Err() != nil {
					break
				}
				sleep(ctx, 100*time.Millisecond)
			}
		}
	})
	parallel(ctx, len(evs), func(i int) {
		ev := evs[i]
		for _, t := range direct {
			client := int(l.clients.Add(1))
			for try := 0; ; try++ {
				op, _ := l.claimEvent(ctx, t, client, ev, fmt.Sprintf("probe-%s-%d-%d", t.name, client, try), true)
				busy := !op.Answered() || op.Outcome == pb.Outcome_OUTCOME_IN_PROGRESS
				if !busy || try >= 20 || ctx.Err() != nil {
					break
				}
				sleep(ctx, 100*time.Millisecond) // polling for convergence
			}
		}
	})
}

// parallel runs f(0..n-1) on 8 goroutines.
func parallel(ctx context.Context, n int, f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				f(i)
			}
		})
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
}
