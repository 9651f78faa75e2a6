package service

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
)

// The tiers enums share the proto enums' numbers (pinned by
// TestEnumNumbersMatch), so conversion is a cast.

func pbState(s tiers.State) pb.EventState  { return pb.EventState(s) }
func pbOutcome(o tiers.Outcome) pb.Outcome { return pb.Outcome(o) }
func pbReason(r tiers.Reason) pb.Reason    { return pb.Reason(r) }
func pbTier(t tiers.Tier) pb.Tier          { return pb.Tier(t) }

func pbKeySource(s horizon.KeySource) pb.KeySource {
	switch s {
	case horizon.KeySourceEventID:
		return pb.KeySource_KEY_SOURCE_EVENT_ID
	case horizon.KeySourceHeader:
		return pb.KeySource_KEY_SOURCE_HEADER
	case horizon.KeySourceBodyField:
		return pb.KeySource_KEY_SOURCE_BODY_FIELD
	case horizon.KeySourceBodyHash:
		return pb.KeySource_KEY_SOURCE_BODY_HASH
	}
	return pb.KeySource_KEY_SOURCE_UNSPECIFIED
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// timestamps renders up to four times as timestamppb.Timestamps allocated
// together (one allocation for an answer's times instead of one each); a
// zero time is nil.
func timestamps(ts ...time.Time) (out [4]*timestamppb.Timestamp) {
	vals := make([]timestamppb.Timestamp, len(ts))
	for i, t := range ts {
		if !t.IsZero() {
			vals[i].Seconds, vals[i].Nanos = t.Unix(), int32(t.Nanosecond())
			out[i] = &vals[i]
		}
	}
	return out
}

// pbRecord renders r for Get and the fenced writes' answers. Salt and
// SecretHash stay on the server: the Record message has no field for them.
func pbRecord(r tiers.Record) *pb.Record {
	t := timestamps(r.FirstSeenAt, r.LeaseExpiresAt, r.WindowExpiresAt, r.UpdatedAt)
	return &pb.Record{
		Namespace:       r.Key.Namespace,
		Provider:        r.Key.Provider,
		Key:             r.Key.Key,
		State:           pbState(r.State),
		FencingToken:    r.Token,
		Holder:          r.Holder,
		Attempt:         r.Attempt,
		Released:        r.Released,
		FirstSeenAt:     t[0],
		LeaseExpiresAt:  t[1],
		WindowExpiresAt: t[2],
		UpdatedAt:       t[3],
		PayloadSha256:   r.PayloadHash,
		Result:          r.Result,
		Lifecycle:       r.Lifecycle,
		EntityId:        r.EntityID,
		EventType:       r.EventType,
	}
}

// pbClaimResponse renders res; secret is the owner's lease secret, set for
// ACQUIRED only.
func pbClaimResponse(res tiers.ClaimResult, key string, src horizon.KeySource, ttl time.Duration, secret []byte) *pb.ClaimResponse {
	r := res.Record
	// The token and secret are for the owner only: a duplicate or a waiter
	// has no use for them, and the secret would let it release or settle
	// someone else's claim. (The token alone is no capability: Get shows it.)
	var token uint64
	if res.Outcome == tiers.OutcomeAcquired {
		token = r.Token
	} else {
		secret = nil
	}
	t := timestamps(r.LeaseExpiresAt, r.WindowExpiresAt, r.FirstSeenAt)
	return &pb.ClaimResponse{
		Outcome:         pbOutcome(res.Outcome),
		Reason:          pbReason(res.Reason),
		Key:             key,
		KeySource:       pbKeySource(src),
		FencingToken:    token,
		State:           pbState(r.State),
		LeaseExpiresAt:  t[0],
		WindowExpiresAt: t[1],
		Ttl:             durationpb.New(ttl),
		Attempt:         r.Attempt,
		FirstSeenAt:     t[2],
		Result:          r.Result,
		ServedBy:        pbTier(res.ServedBy),
		Holder:          r.Holder,
		LeaseSecret:     secret,
	}
}

func pbProvider(p *horizon.Provider, overdue bool) *pb.Provider {
	return &pb.Provider{
		Name:          p.Name,
		RetryHorizon:  durationpb.New(p.RetryHorizon),
		Margin:        durationpb.New(p.Margin),
		Ttl:           durationpb.New(p.TTL),
		Lease:         durationpb.New(p.Lease),
		MaxLease:      durationpb.New(p.MaxLease),
		KeyRule:       p.KeyRule,
		Source:        p.Source,
		ReviewedOn:    p.ReviewedOn.Format(time.DateOnly),
		ReviewOverdue: overdue,
		Members:       p.Members,
		Lifecycles:    pbLifecycles(p.Lifecycles),
	}
}

// pbLifecycles converts a provider's lifecycles; nil for none. Wait is not
// part of the API: a client computes nothing from it, the server decides.
func pbLifecycles(ls []*horizon.Lifecycle) []*pb.Lifecycle {
	var out []*pb.Lifecycle
	for _, l := range ls {
		pl := &pb.Lifecycle{
			Name:          l.Name,
			EntityRule:    l.EntityRule,
			EventTypeRule: l.EventTypeRule,
			States:        l.States,
			Source:        l.Source,
		}
		for _, e := range l.Events {
			pl.Events = append(pl.Events, &pb.LifecycleEvent{
				EventType:  e.EventType,
				FromStates: e.From,
				ToState:    e.To,
				EntityRule: e.EntityRule,
			})
		}
		out = append(out, pl)
	}
	return out
}
