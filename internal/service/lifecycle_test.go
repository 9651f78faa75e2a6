package service

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
)

// answeringStore answers every Claim with res and keeps the params of the
// last one, so tests see what the service asked of the store.
type answeringStore struct {
	tiers.Store
	res   tiers.ClaimResult
	mu    sync.Mutex
	calls int
	last  tiers.ClaimParams
}

func (s *answeringStore) Claim(_ context.Context, p tiers.ClaimParams) (tiers.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.last = p
	res := s.res
	res.Record.Key = p.Key
	return res, nil
}

func (s *answeringStore) params() (tiers.ClaimParams, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.calls
}

// stripeDelivery is a raw Stripe event of type typ about object id.
func stripeDelivery(evt, typ, id string) *pb.ClaimRequest_Delivery {
	body := `{"id":"` + evt + `","type":"` + typ + `","data":{"object":{"id":"` + id + `","object":"charge"}}}`
	return &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: []byte(body)}}
}

func TestClaimPlacement(t *testing.T) {
	refunded := &tiers.EntityEvent{Lifecycle: "charge", EntityID: "ch_1", EventType: "charge.refunded", Initial: "new",
		From: []string{"succeeded"}, Wait: []string{"new", "pending"}, To: "succeeded"}
	tests := []struct {
		desc  string
		mod   func(*pb.ClaimRequest)
		want  *tiers.EntityEvent
		start bool
	}{
		{"event_id alone is an ordinary claim", nil, nil, false},
		{"event_id with entity_id and event_type", func(r *pb.ClaimRequest) { r.EntityId, r.EventType = "ch_1", "charge.refunded" }, refunded, false},
		{"an event type no lifecycle declares is an ordinary claim", func(r *pb.ClaimRequest) { r.EntityId, r.EventType = "ch_1", "charge.updated" }, nil, false},
		{"a delivery is placed by the lifecycle rules", func(r *pb.ClaimRequest) { r.Key = stripeDelivery("evt_1", "charge.refunded", "ch_1") }, refunded, false},
		{"entity_id and event_type override the delivery", func(r *pb.ClaimRequest) {
			r.Key = stripeDelivery("evt_1", "charge.pending", "ch_9")
			r.EntityId, r.EventType = "ch_1", "charge.refunded"
		}, refunded, false},
		{"a delivery of an undeclared type is an ordinary claim", func(r *pb.ClaimRequest) { r.Key = stripeDelivery("evt_1", "customer.created", "cus_1") }, nil, false},
		{"start is passed on", func(r *pb.ClaimRequest) { r.Start = true }, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			store := &answeringStore{res: tiers.ClaimResult{Outcome: tiers.OutcomeDuplicate, ServedBy: tiers.TierDurable}}
			svc := newTestService(t, store, clock.NewFake(time.Now()))
			if _, err := svc.Claim(context.Background(), claimReq(tc.mod)); err != nil {
				t.Fatalf("Claim() error = %v", err)
			}
			p, _ := store.params()
			if diff := cmp.Diff(tc.want, p.Entity); diff != "" {
				t.Errorf("ClaimParams.Entity (-want +got):\n%s", diff)
			}
			if p.Start != tc.start {
				t.Errorf("ClaimParams.Start = %v, want %v", p.Start, tc.start)
			}
		})
	}
}

func TestClaimEntityValidation(t *testing.T) {
	long := strings.Repeat("e", 256)
	tests := []struct {
		desc, field, descMatch string
		mod                    func(*pb.ClaimRequest)
	}{
		{"entity_id without event_type", "ClaimRequest.event_type", "required with entity_id", func(r *pb.ClaimRequest) { r.EntityId = "ch_1" }},
		{"event_type without entity_id", "ClaimRequest.entity_id", "required with event_type", func(r *pb.ClaimRequest) { r.EventType = "charge.refunded" }},
		{"entity_id too long", "ClaimRequest.entity_id", "256 bytes exceeds the maximum of 255", func(r *pb.ClaimRequest) { r.EntityId, r.EventType = long, "charge.refunded" }},
		{"entity_id control character", "ClaimRequest.entity_id", "control character", func(r *pb.ClaimRequest) { r.EntityId, r.EventType = "ch\n1", "charge.refunded" }},
		{"entity_id invalid UTF-8", "ClaimRequest.entity_id", "UTF-8", func(r *pb.ClaimRequest) { r.EntityId, r.EventType = "ch\xff", "charge.refunded" }},
		{"event_type too long", "ClaimRequest.event_type", "256 bytes exceeds the maximum of 255", func(r *pb.ClaimRequest) { r.EntityId, r.EventType = "ch_1", long }},
		{"event_type control character", "ClaimRequest.event_type", "control character", func(r *pb.ClaimRequest) { r.EntityId, r.EventType = "ch_1", "charge\x00refunded" }},
		{"delivery with a malformed entity id", "ClaimRequest.delivery", "entity id", func(r *pb.ClaimRequest) {
			r.Key = stripeDelivery("evt_1", "charge.refunded", "ch\\u0001")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			store := &answeringStore{}
			svc := newTestService(t, store, clock.NewFake(time.Now()))
			_, err := svc.Claim(context.Background(), claimReq(tc.mod))
			code, field, desc := fieldOf(err)
			if code != codes.InvalidArgument || field != tc.field || !strings.Contains(desc, tc.descMatch) {
				t.Errorf("Claim(%s) = %v %s %q, want InvalidArgument %s containing %q", tc.desc, code, field, desc, tc.field, tc.descMatch)
			}
			if _, calls := store.params(); calls != 0 {
				t.Errorf("Claim(%s) reached the store", tc.desc)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	const stripe, twilio = 72 * time.Hour, 15 * time.Second
	tests := []struct {
		desc      string
		horizon   time.Duration
		deferrals uint32
		random    float64
		want      time.Duration
	}{
		{"first deferral, least jitter", stripe, 1, 0, time.Second},
		{"first deferral, most jitter", stripe, 1, 0.999999, 2 * time.Second},
		{"a fraction of a second rounds up", stripe, 1, 0.2, 2 * time.Second},
		{"doubles with each deferral", stripe, 2, 0, 2 * time.Second},
		{"tenth deferral", stripe, 10, 0, 512 * time.Second},
		{"capped at one hour", stripe, 30, 0.999999, time.Hour},
		{"capped at a sixteenth of the horizon", 8 * time.Hour, 30, 0.999999, 30 * time.Minute},
		{"a horizon of seconds still gets the floor", twilio, 5, 0.5, time.Second},
		{"deferrals unknown count as the first", stripe, 0, 0, time.Second},
		{"no overflow however many deferrals", stripe, 1 << 31, 0, 30 * time.Minute},
	}
	for _, tc := range tests {
		got := retryAfter(tc.horizon, tc.deferrals, func() float64 { return tc.random })
		if got != tc.want {
			t.Errorf("retryAfter(%s: %v, %d, %v) = %v, want %v", tc.desc, tc.horizon, tc.deferrals, tc.random, got, tc.want)
		}
	}
}

func TestDeferredAnswer(t *testing.T) {
	store := &answeringStore{res: tiers.ClaimResult{
		Outcome: tiers.OutcomeDeferred, ServedBy: tiers.TierDurable,
		Record: tiers.Record{Token: 7, Salt: make([]byte, tiers.SaltBytes)},
		Entity: &tiers.EntityPosition{State: "pending", Deferrals: 3},
	}}
	svc, logs := loggedService(t, store)
	svc.cfg.Random = func() float64 { return 0.5 }
	resp, err := svc.Claim(context.Background(), claimReq(func(r *pb.ClaimRequest) {
		r.Key = stripeDelivery("evt_r", "charge.refunded", "ch_1")
	}))
	if err != nil {
		t.Fatalf("Claim() error = %v", err)
	}
	if resp.Outcome != pb.Outcome_OUTCOME_DEFERRED || resp.FencingToken != 0 || resp.LeaseSecret != nil {
		t.Errorf("Claim() = %v token %d secret %x, want DEFERRED with neither token nor secret", resp.Outcome, resp.FencingToken, resp.LeaseSecret)
	}
	// Third deferral: d = 8s, answer = 4s + 0.5·4s.
	if got := resp.GetRetryAfter().AsDuration(); got != 6*time.Second {
		t.Errorf("retry_after = %v, want 6s", got)
	}
	want := &pb.EntityPosition{Lifecycle: "charge", EntityId: "ch_1", EventType: "charge.refunded", State: "pending",
		Awaiting: []string{"succeeded"}, LeadsTo: "succeeded", Deferrals: 3}
	if diff := cmp.Diff(want.String(), resp.GetEntity().String()); diff != "" {
		t.Errorf("entity (-want +got):\n%s", diff)
	}
	line := logs.String()
	for _, want := range []string{`"outcome":"DEFERRED"`, `"state_transition_rejected":true`, `"lifecycle":"charge"`, `"entity_id":"ch_1"`,
		`"event_type":"charge.refunded"`, `"entity_state":"pending"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %s lacks %s", line, want)
		}
	}

	// SUPERSEDED: no retry_after, nothing awaited, still rejected in the log.
	store.res.Outcome, store.res.Entity = tiers.OutcomeSuperseded, &tiers.EntityPosition{State: "failed"}
	resp, err = svc.Claim(context.Background(), claimReq(func(r *pb.ClaimRequest) {
		r.Key = stripeDelivery("evt_s", "charge.refunded", "ch_2")
	}))
	if err != nil {
		t.Fatalf("Claim() error = %v", err)
	}
	if resp.Outcome != pb.Outcome_OUTCOME_SUPERSEDED || resp.RetryAfter != nil || len(resp.GetEntity().GetAwaiting()) != 0 || resp.GetEntity().GetState() != "failed" {
		t.Errorf("Claim() = %v, want SUPERSEDED in state failed without retry_after or awaiting", resp)
	}
	if n := strings.Count(logs.String(), `"state_transition_rejected":true`); n != 2 {
		t.Errorf("state_transition_rejected=true on %d lines, want 2", n)
	}

	// An ordinary claim says nothing of entities.
	store.res.Outcome, store.res.Entity = tiers.OutcomeDuplicate, nil
	resp, err = svc.Claim(context.Background(), claimReq(nil))
	if err != nil || resp.Entity != nil || resp.RetryAfter != nil {
		t.Errorf("ordinary Claim() = %v, %v, want no entity and no retry_after", resp, err)
	}
}

// fakeEntities answers the EntityService reads with fixed values, so the
// service's rendering (ready, lost, horizon) is tested alone; the stores'
// own answers are tierstest's.
type fakeEntities struct {
	tiers.Store
	events []tiers.DeferredEvent
	got    tiers.ListDeferredParams
	entity tiers.Entity
	err    error
}

func (f *fakeEntities) GetEntity(_ context.Context, k tiers.EntityKey) (tiers.Entity, error) {
	if f.err != nil {
		return tiers.Entity{}, f.err
	}
	e := f.entity
	e.EntityKey = k
	return e, nil
}

func (f *fakeEntities) ListDeferred(_ context.Context, p tiers.ListDeferredParams) ([]tiers.DeferredEvent, string, error) {
	f.got = p
	return f.events, "cursor-2", f.err
}

func (f *fakeEntities) CountDeferred(context.Context, map[string]tiers.DeferredCutoffs) (tiers.DeferredCounts, error) {
	return tiers.DeferredCounts{}, nil
}

func TestListDeferredRendering(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ev := func(mod func(*tiers.DeferredEvent)) tiers.DeferredEvent {
		e := tiers.DeferredEvent{Lifecycle: "charge", EntityID: "ch_1", EventType: "charge.refunded", Key: "evt_r",
			Count: 2, FirstSeen: now.Add(-time.Hour), LastSeen: now.Add(-time.Minute), Awaiting: []string{"succeeded"}, EntityState: "pending"}
		mod(&e)
		return e
	}
	store := &fakeEntities{events: []tiers.DeferredEvent{
		ev(func(*tiers.DeferredEvent) {}),                                                                     // waiting
		ev(func(e *tiers.DeferredEvent) { e.EntityState = "succeeded" }),                                      // ready
		ev(func(e *tiers.DeferredEvent) { e.EntityState, e.Applied = "succeeded", true }),                     // applied: not ready
		ev(func(e *tiers.DeferredEvent) { e.FirstSeen = now.Add(-73 * time.Hour) }),                           // lost
		ev(func(e *tiers.DeferredEvent) { e.FirstSeen, e.Applied = now.Add(-73*time.Hour), true }),            // applied: not lost
		ev(func(e *tiers.DeferredEvent) { e.FirstSeen, e.Superseded = now.Add(-73*time.Hour), true }),         // superseded: neither
		ev(func(e *tiers.DeferredEvent) { e.EntityState, e.Superseded = "succeeded", true }),                  // superseded: never ready
		ev(func(e *tiers.DeferredEvent) { e.FirstSeen = now.Add(-72 * time.Hour) }),                           // the horizon's last instant: not lost yet
		ev(func(e *tiers.DeferredEvent) { e.FirstSeen = now.Add(-72*time.Hour - time.Nanosecond) }),           // just past it
		ev(func(e *tiers.DeferredEvent) { e.EntityState, e.FirstSeen = "succeeded", now.Add(-80*time.Hour) }), // ready and lost
	}}
	svc := newTestService(t, store, clock.NewFake(now))
	resp, err := svc.ListDeferred(context.Background(), &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe", EntityId: "ch_1", PageToken: "cursor-1"})
	if err != nil {
		t.Fatalf("ListDeferred() error = %v", err)
	}
	if want := (tiers.ListDeferredParams{Namespace: "billing", Provider: "stripe", EntityID: "ch_1", Page: tiers.Page{Size: DefaultPageSize, After: "cursor-1"}}); store.got != want {
		t.Errorf("store asked %+v, want %+v", store.got, want)
	}
	if resp.NextPageToken != "cursor-2" {
		t.Errorf("next_page_token = %q, want the store's cursor", resp.NextPageToken)
	}
	want := []struct{ ready, lost bool }{{false, false}, {true, false}, {false, false}, {false, true}, {false, false}, {false, false}, {false, false}, {false, false}, {false, true}, {true, true}}
	for i, e := range resp.Events {
		if e.Ready != want[i].ready || e.Lost != want[i].lost {
			t.Errorf("event %d (%+v): ready %v lost %v, want %v %v", i, store.events[i], e.Ready, e.Lost, want[i].ready, want[i].lost)
		}
		if got, w := e.HorizonEndsAt.AsTime(), store.events[i].FirstSeen.Add(72*time.Hour); !got.Equal(w) {
			t.Errorf("event %d horizon_ends_at = %v, want first seen + 72h = %v", i, got, w)
		}
	}
	if len(resp.Events) != len(want) {
		t.Fatalf("%d events, want %d", len(resp.Events), len(want))
	}
}

func TestEntityServiceErrors(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("x", 256)
	list := func(mod func(*pb.ListDeferredRequest)) *pb.ListDeferredRequest {
		r := &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe"}
		mod(r)
		return r
	}
	get := func(mod func(*pb.GetEntityRequest)) *pb.GetEntityRequest {
		r := &pb.GetEntityRequest{Namespace: "billing", Provider: "stripe", Lifecycle: "charge", EntityId: "ch_1"}
		mod(r)
		return r
	}
	tests := []struct {
		desc   string
		store  tiers.Store
		call   func(*Service) error
		code   codes.Code
		reason string
		field  string
	}{
		{"ListDeferred namespace missing", &fakeEntities{}, func(s *Service) error {
			_, err := s.ListDeferred(ctx, list(func(r *pb.ListDeferredRequest) { r.Namespace = "" }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "ListDeferredRequest.namespace"},
		{"ListDeferred provider missing", &fakeEntities{}, func(s *Service) error {
			_, err := s.ListDeferred(ctx, list(func(r *pb.ListDeferredRequest) { r.Provider = "" }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "ListDeferredRequest.provider"},
		{"ListDeferred page_size over the maximum", &fakeEntities{}, func(s *Service) error {
			_, err := s.ListDeferred(ctx, list(func(r *pb.ListDeferredRequest) { r.PageSize = 1001 }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "ListDeferredRequest.page_size"},
		{"ListDeferred page_token too long", &fakeEntities{}, func(s *Service) error {
			_, err := s.ListDeferred(ctx, list(func(r *pb.ListDeferredRequest) { r.PageToken = strings.Repeat("c", 513) }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "ListDeferredRequest.page_token"},
		{"ListDeferred entity_id too long", &fakeEntities{}, func(s *Service) error {
			_, err := s.ListDeferred(ctx, list(func(r *pb.ListDeferredRequest) { r.EntityId = long }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "ListDeferredRequest.entity_id"},
		{"ListDeferred unknown provider", &fakeEntities{}, func(s *Service) error {
			_, err := s.ListDeferred(ctx, list(func(r *pb.ListDeferredRequest) { r.Provider = "nope" }))
			return err
		}, codes.NotFound, ReasonProviderNotFound, ""},
		{"ListDeferred on a store without entities", &answeringStore{}, func(s *Service) error {
			_, err := s.ListDeferred(ctx, list(func(*pb.ListDeferredRequest) {}))
			return err
		}, codes.Unimplemented, "UNIMPLEMENTED", ""},
		{"GetEntity lifecycle missing", &fakeEntities{}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(r *pb.GetEntityRequest) { r.Lifecycle = "" }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "GetEntityRequest.lifecycle"},
		{"GetEntity entity_id missing", &fakeEntities{}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(r *pb.GetEntityRequest) { r.EntityId = "" }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "GetEntityRequest.entity_id"},
		{"GetEntity entity_id control character", &fakeEntities{}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(r *pb.GetEntityRequest) { r.EntityId = "ch\x7f" }))
			return err
		}, codes.InvalidArgument, ReasonInvalidArgument, "GetEntityRequest.entity_id"},
		{"GetEntity unknown provider", &fakeEntities{}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(r *pb.GetEntityRequest) { r.Provider = "nope" }))
			return err
		}, codes.NotFound, ReasonProviderNotFound, ""},
		{"GetEntity lifecycle the provider does not declare", &fakeEntities{}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(r *pb.GetEntityRequest) { r.Lifecycle = "subscription" }))
			return err
		}, codes.NotFound, pb.ErrorReason_LIFECYCLE_NOT_FOUND.String(), ""},
		{"GetEntity of a provider without lifecycles", &fakeEntities{}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(r *pb.GetEntityRequest) { r.Provider = "twilio" }))
			return err
		}, codes.NotFound, pb.ErrorReason_LIFECYCLE_NOT_FOUND.String(), ""},
		{"GetEntity of an entity never seen", &fakeEntities{err: tiers.ErrEntityNotFound}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(*pb.GetEntityRequest) {}))
			return err
		}, codes.NotFound, pb.ErrorReason_ENTITY_NOT_FOUND.String(), ""},
		{"GetEntity with the durable tier down", &fakeEntities{err: tiers.Unavailable("sqlite", context.DeadlineExceeded)}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(*pb.GetEntityRequest) {}))
			return err
		}, codes.Unavailable, ReasonDurableUnavailable, ""},
		{"GetEntity on a store without entities", &answeringStore{}, func(s *Service) error {
			_, err := s.GetEntity(ctx, get(func(*pb.GetEntityRequest) {}))
			return err
		}, codes.Unimplemented, "UNIMPLEMENTED", ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			svc := newTestService(t, tc.store, clock.NewFake(time.Now()))
			err := tc.call(svc)
			code, ei := errorInfo(err)
			reason := codeName(code)
			if ei != nil {
				reason = ei.Reason
			}
			if code != tc.code || reason != tc.reason {
				t.Errorf("%s: error = %v (%s), want %v %s", tc.desc, err, reason, tc.code, tc.reason)
			}
			if tc.field != "" {
				if _, field, _ := fieldOf(err); field != tc.field {
					t.Errorf("%s: field = %q, want %q", tc.desc, field, tc.field)
				}
			}
			if f, ok := tc.store.(*fakeEntities); ok && code == codes.InvalidArgument && f.got != (tiers.ListDeferredParams{}) {
				t.Errorf("%s: refused input reached the store", tc.desc)
			}
		})
	}
}

// The registry's Stripe charge lifecycle is what these tests assume.
func TestStripeChargeLifecycleShape(t *testing.T) {
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	stripe, _ := reg.Lookup("stripe")
	pl, ok := stripe.PlaceEvent("ch_1", "charge.refunded")
	if !ok || pl.Lifecycle.Name != "charge" || pl.Lifecycle.Initial() != "new" || !cmp.Equal(pl.Event.Wait, []string{"new", "pending"}) {
		t.Fatalf("stripe charge.refunded placement = %+v %+v, ok %v", pl.Lifecycle, pl.Event, ok)
	}
}
