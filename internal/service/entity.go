package service

import (
	"context"
	"slices"
	"time"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
)

// Bounds of ListDeferred's paging.
const (
	// DefaultPageSize is the page of a ListDeferredRequest without page_size.
	DefaultPageSize = 100
	// MaxPageSize is the largest page_size.
	MaxPageSize = 1000
	// MaxPageTokenBytes bounds page_token: a store's cursor is a position,
	// not a payload.
	MaxPageTokenBytes = 512
)

// entities returns the store's entity reads, or errNoEntities when the
// store keeps none.
func (s *Service) entities() (tiers.Entities, error) {
	e, ok := s.cfg.Store.(tiers.Entities)
	if !ok {
		return nil, errNoEntities
	}
	return e, nil
}

// ListDeferred implements EntityService.ListDeferred.
func (s *Service) ListDeferred(ctx context.Context, req *pb.ListDeferredRequest) (*pb.ListDeferredResponse, error) {
	start := time.Now()
	r := &Request{Method: "ListDeferred", Namespace: req.GetNamespace(), Provider: req.GetProvider()}
	p, prov, err := s.validateListDeferred(req)
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Known, r.EntityID = prov.Name, true, p.EntityID
	ents, err := s.entities()
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	events, next, err := ents.ListDeferred(sctx, p)
	if err != nil {
		return nil, s.finish(ctx, r, start, storeErr(ctx, err))
	}
	now := s.cfg.Clock.Now()
	resp := &pb.ListDeferredResponse{NextPageToken: next}
	for _, e := range events {
		resp.Events = append(resp.Events, pbDeferredEvent(e, prov.RetryHorizon, now))
	}
	_ = s.finish(ctx, r, start, nil)
	return resp, nil
}

func (s *Service) validateListDeferred(req *pb.ListDeferredRequest) (tiers.ListDeferredParams, *horizon.Provider, error) {
	c := &checker{msg: "ListDeferredRequest"}
	c.namespace(req.GetNamespace())
	c.provider(req.GetProvider())
	if id := req.GetEntityId(); id != "" {
		c.key("entity_id", id)
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		c.add("page_size", "%d exceeds the maximum of %d", req.GetPageSize(), MaxPageSize)
	}
	if tok := req.GetPageToken(); tok != "" {
		c.text("page_token", tok, 1, MaxPageTokenBytes)
	}
	if err := c.err(); err != nil {
		return tiers.ListDeferredParams{}, nil, err
	}
	prov, err := s.lookup("ListDeferredRequest.provider", req.GetProvider())
	if err != nil {
		return tiers.ListDeferredParams{}, nil, err
	}
	return tiers.ListDeferredParams{
		Namespace: req.GetNamespace(), Provider: prov.Name, EntityID: req.GetEntityId(),
		Page: tiers.Page{Size: size, After: req.GetPageToken()},
	}, prov, nil
}

// pbDeferredEvent renders e as of now for a provider whose retry horizon is
// horizonDur.
//
// ready: the event was deferred, is not applied, and its entity now stands
// in a state the event may arrive in, so the provider's next retry applies
// it. lost: the event was deferred, is not applied, and its provider's
// retries, counted from the first delivery, are over: nobody will send it
// again unless asked. A superseded event is neither: it was acknowledged on
// purpose and will never apply.
func pbDeferredEvent(e tiers.DeferredEvent, horizonDur time.Duration, now time.Time) *pb.DeferredEvent {
	ends := e.FirstSeen.Add(horizonDur)
	waiting := !e.Superseded && !e.Applied
	return &pb.DeferredEvent{
		Lifecycle:     e.Lifecycle,
		EntityId:      e.EntityID,
		EventType:     e.EventType,
		Key:           e.Key,
		Superseded:    e.Superseded,
		Count:         e.Count,
		FirstSeenAt:   ts(e.FirstSeen),
		LastSeenAt:    ts(e.LastSeen),
		EntityState:   e.EntityState,
		Awaiting:      e.Awaiting,
		Ready:         waiting && slices.Contains(e.Awaiting, e.EntityState),
		Applied:       e.Applied,
		Lost:          waiting && now.After(ends),
		HorizonEndsAt: ts(ends),
	}
}

// GetEntity implements EntityService.GetEntity.
func (s *Service) GetEntity(ctx context.Context, req *pb.GetEntityRequest) (*pb.GetEntityResponse, error) {
	start := time.Now()
	r := &Request{Method: "GetEntity", Namespace: req.GetNamespace(), Provider: req.GetProvider(), EntityID: req.GetEntityId()}
	k, err := s.validateGetEntity(req)
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Known, r.Lifecycle = k.Provider, true, k.Lifecycle
	ents, err := s.entities()
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	e, err := ents.GetEntity(sctx, k)
	if err != nil {
		return nil, s.finish(ctx, r, start, storeErr(ctx, err))
	}
	r.EntityState = e.State
	_ = s.finish(ctx, r, start, nil)
	return &pb.GetEntityResponse{Entity: pbEntity(e)}, nil
}

func (s *Service) validateGetEntity(req *pb.GetEntityRequest) (tiers.EntityKey, error) {
	c := &checker{msg: "GetEntityRequest"}
	c.namespace(req.GetNamespace())
	c.provider(req.GetProvider())
	c.text("lifecycle", req.GetLifecycle(), 1, MaxKeyBytes)
	c.key("entity_id", req.GetEntityId())
	if err := c.err(); err != nil {
		return tiers.EntityKey{}, err
	}
	prov, err := s.lookup("GetEntityRequest.provider", req.GetProvider())
	if err != nil {
		return tiers.EntityKey{}, err
	}
	l, ok := prov.Lifecycle(req.GetLifecycle())
	if !ok {
		return tiers.EntityKey{}, &lifecycleNotFound{field: "GetEntityRequest.lifecycle", provider: prov.Name, name: req.GetLifecycle()}
	}
	return tiers.EntityKey{Namespace: req.GetNamespace(), Provider: prov.Name, Lifecycle: l.Name, EntityID: req.GetEntityId()}, nil
}

func pbEntity(e tiers.Entity) *pb.Entity {
	out := &pb.Entity{
		Namespace: e.Namespace,
		Provider:  e.Provider,
		Lifecycle: e.Lifecycle,
		EntityId:  e.EntityID,
		State:     e.State,
		Version:   e.Version,
		UpdatedAt: ts(e.UpdatedAt),
		BusyWith:  e.BusyWith,
	}
	for _, a := range e.Applied {
		out.Applied = append(out.Applied, &pb.AppliedEvent{
			EventType:    a.EventType,
			Key:          a.Key,
			FromState:    a.From,
			ToState:      a.To,
			FencingToken: a.Token,
			AppliedAt:    ts(a.AppliedAt),
		})
	}
	return out
}
