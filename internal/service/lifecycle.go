package service

import (
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
)

// MaxEventTypeBytes bounds ClaimRequest.event_type.
const MaxEventTypeBytes = 255

// place finds the claim's place in an entity lifecycle of prov, recording
// violations on c. Fields named by the caller (entity_id and event_type,
// both or neither) override what the lifecycle rules read from a delivery;
// without them a delivery is placed by the rules, and an event_id is an
// ordinary claim. ok is false for an ordinary claim: no lifecycle of prov
// declares the event type, or the rules find none in the delivery. d is the
// request's delivery as the key rule read it (nil for an event_id).
func place(c *checker, prov *horizon.Provider, req *pb.ClaimRequest, d *horizon.Delivery) (pl horizon.Placement, ok bool) {
	entityID, eventType := req.GetEntityId(), req.GetEventType()
	switch {
	case prov.IsGroup() && (entityID != "" || eventType != ""):
		// A group has no lifecycles, and it answers for the duplicates of
		// several providers: ordering would need the member whose
		// lifecycle it is. Silently claiming it unordered would hide that.
		for _, f := range [...]struct{ name, v string }{{"entity_id", entityID}, {"event_type", eventType}} {
			if f.v != "" {
				c.add(f.name, "provider %s is a group (of %s), which has no lifecycles: claim the event with the member provider that declares it",
					quote(prov.Name), strings.Join(prov.Members, ", "))
			}
		}
		return horizon.Placement{}, false
	case entityID != "" || eventType != "":
		idOK := entityID != "" && c.text("entity_id", entityID, 1, MaxKeyBytes)
		typeOK := eventType != "" && c.text("event_type", eventType, 1, MaxEventTypeBytes)
		if entityID == "" {
			c.add("entity_id", "required with event_type (both or neither)")
		}
		if eventType == "" {
			c.add("event_type", "required with entity_id (both or neither)")
		}
		if !idOK || !typeOK {
			return horizon.Placement{}, false
		}
		return prov.PlaceEvent(entityID, eventType)
	case d != nil:
		pl, ok, err := prov.PlaceDelivery(d)
		if err != nil {
			c.add("delivery", "lifecycle rules: %v", err)
			return horizon.Placement{}, false
		}
		return pl, ok
	}
	return horizon.Placement{}, false
}

// entityEvent is the store's view of a placement.
func entityEvent(pl horizon.Placement) *tiers.EntityEvent {
	return &tiers.EntityEvent{
		Lifecycle: pl.Lifecycle.Name,
		EntityID:  pl.EntityID,
		EventType: pl.Event.EventType,
		Initial:   pl.Lifecycle.Initial(),
		From:      pl.Event.From,
		Wait:      pl.Event.Wait,
		To:        pl.Event.To,
	}
}

// pbEntityPosition renders where the entity stood when the claim was
// decided. pos is nil when the store did not order the claim (a DUPLICATE,
// IN_PROGRESS or PAYLOAD_MISMATCH is decided by the key alone): the answer
// still says which lifecycle the event belongs to, without a state.
func pbEntityPosition(pl horizon.Placement, outcome tiers.Outcome, pos *tiers.EntityPosition) *pb.EntityPosition {
	e := &pb.EntityPosition{
		Lifecycle: pl.Lifecycle.Name,
		EntityId:  pl.EntityID,
		EventType: pl.Event.EventType,
		LeadsTo:   pl.Event.To,
	}
	if pos != nil {
		e.State, e.BusyWith, e.Deferrals = pos.State, pos.BusyWith, pos.Deferrals
	}
	if outcome == tiers.OutcomeDeferred {
		e.Awaiting = append([]string(nil), pl.Event.From...)
	}
	return e
}

// Bounds of a DEFERRED answer's retry_after.
const (
	// retryBase is the bound d of a first deferral (answered 1–2s).
	retryBase = 2 * time.Second
	// retryCeiling is the longest retry_after ever answered.
	retryCeiling = time.Hour
	// retryHorizonShare: retry_after never exceeds RetryHorizon /
	// retryHorizonShare, so that a provider honouring it still has most of
	// its horizon for the retries that must carry the event once its
	// prerequisite arrives.
	retryHorizonShare = 16
	// retryFloor is the shortest retry_after: Retry-After counts whole
	// seconds, and a provider with a horizon of seconds still gets one.
	retryFloor = time.Second
)

// retryAfter is how long the provider should wait before redelivering an
// event deferred for the deferrals-th time (1 for the first):
//
//	ceiling = clamp(RetryHorizon/16, 1s, 1h)
//	d       = min(2s · 2^(deferrals-1), ceiling)
//	answer  = ⌈d/2 + random·d/2⌉s     (random in [0, 1): "equal jitter",
//	                                   rounded up to whole seconds, the
//	                                   unit of an HTTP Retry-After)
//
// It grows exponentially with each deferral of the event, and the jitter
// spreads the replays of many events deferred together (a burst of refunds
// before their captures) so they do not return at once. The ceiling keeps
// a provider that honours Retry-After from spending more than a sixteenth
// of its retry horizon on one wait, and never more than an hour. Providers
// that ignore Retry-After (Stripe retries on its own schedule) simply
// redeliver later; the answer is advice, never a promise.
func retryAfter(horizonDur time.Duration, deferrals uint32, random func() float64) time.Duration {
	ceiling := min(max(horizonDur/retryHorizonShare, retryFloor), retryCeiling)
	// 2s<<20 is weeks: past it the ceiling has long been reached, and the
	// shift cannot overflow.
	n := min(max(int(deferrals), 1)-1, 20)
	d := min(retryBase<<n, ceiling)
	d = d/2 + time.Duration(random()*float64(d/2))
	// Whole seconds, rounded up: what an HTTP Retry-After can say.
	return max((d + time.Second - 1).Truncate(time.Second), retryFloor)
}

// defaultRandom is Config.Random's default: the runtime's generator, safe for
// concurrent use. Jitter needs no secrecy.
func defaultRandom() float64 { return rand.Float64() }

func pbRetryAfter(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}
