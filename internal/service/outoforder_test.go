package service

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// TestStripeOutOfOrderOverGRPC delivers a Stripe charge's events out of
// order through the gRPC API, against a real store: the refund before the
// charge succeeded (DEFERRED, nothing written), the success (ACQUIRED,
// settled: the charge advances), the refund's retry (ACQUIRED, settled), and
// a stale charge.pending (SUPERSEDED). The entity then shows both events
// applied in lifecycle order, and ListDeferred the deferral as applied. It
// runs on SQLite alone, on the embedded pair, and on real Redis in front of
// real PostgreSQL.
func TestStripeOutOfOrderOverGRPC(t *testing.T) {
	for name, open := range map[string]func(*testing.T) tiers.Store{"sqlite": durableOnly, "embedded": embedded, "redis+postgres": production} {
		t.Run(name, func(t *testing.T) { stripeOutOfOrder(t, open(t)) })
	}
}

// production opens the production pair: Redis in front of PostgreSQL, both
// real servers started by testenv.
func production(t *testing.T) tiers.Store {
	t.Helper()
	return productionOn(t, testenv.Postgres(t, postgres.Migrate))
}

// productionOn is production on the PostgreSQL database at url.
func productionOn(t *testing.T, url string) tiers.Store {
	t.Helper()
	ctx := context.Background()
	pg, err := postgres.New(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := redis.New(ctx, redis.Config{URL: testenv.Redis(t)})
	if err != nil {
		pg.Close()
		t.Fatal(err)
	}
	s := twotier.New(rd, pg, twotier.Config{})
	t.Cleanup(func() { s.Close() })
	return s
}

func stripeOutOfOrder(t *testing.T, store tiers.Store) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	svc := newTestService(t, store, clk)
	svc.cfg.Random = func() float64 { return 0 } // the least jitter: retry_after is exactly half its bound
	conn := dialConn(t, svc)
	claims, entities := pb.NewClaimServiceClient(conn), pb.NewEntityServiceClient(conn)
	ctx := context.Background()
	deliver := func(evt, typ string) *pb.ClaimResponse {
		t.Helper()
		resp, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: stripeDelivery(evt, typ, "ch_1")})
		if err != nil {
			t.Fatalf("Claim(%s %s) error = %v", evt, typ, err)
		}
		return resp
	}
	settle := func(r *pb.ClaimResponse) {
		t.Helper()
		if r.State != pb.EventState_EVENT_STATE_PROCESSING {
			if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: r.Key,
				FencingToken: r.FencingToken, LeaseSecret: r.LeaseSecret, To: pb.EventState_EVENT_STATE_PROCESSING}); err != nil {
				t.Fatalf("Transition(%s, PROCESSING) error = %v", r.Key, err)
			}
		}
		if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: r.Key,
			FencingToken: r.FencingToken, LeaseSecret: r.LeaseSecret, To: pb.EventState_EVENT_STATE_SETTLED, Result: []byte("ok")}); err != nil {
			t.Fatalf("Transition(%s, SETTLED) error = %v", r.Key, err)
		}
	}
	position := func(state string, awaiting []string, leadsTo, eventType string, deferrals uint32) *pb.EntityPosition {
		return &pb.EntityPosition{Lifecycle: "charge", EntityId: "ch_1", EventType: eventType, State: state, Awaiting: awaiting, LeadsTo: leadsTo, Deferrals: deferrals}
	}

	// 1. The refund arrives first: the charge is new, the refund waits for
	// succeeded. Nothing is owned and no record is written.
	refund := deliver("evt_refund", "charge.refunded")
	if refund.Outcome != pb.Outcome_OUTCOME_DEFERRED || refund.FencingToken != 0 || refund.LeaseSecret != nil {
		t.Fatalf("Claim(refund first) = %v token %d, want DEFERRED without a token", refund.Outcome, refund.FencingToken)
	}
	if diff := cmp.Diff(position("new", []string{"succeeded"}, "succeeded", "charge.refunded", 1), refund.Entity, protocmp.Transform()); diff != "" {
		t.Errorf("Claim(refund first).entity (-want +got):\n%s", diff)
	}
	if got := refund.GetRetryAfter().AsDuration(); got != time.Second {
		t.Errorf("Claim(refund first).retry_after = %v, want 1s (first deferral, least jitter)", got)
	}
	if _, err := claims.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_refund"}); codeOf(err) != codes.NotFound {
		t.Errorf("Get(evt_refund) after DEFERRED error = %v, want NotFound (a deferral writes no record)", err)
	}
	clk.Advance(time.Second)
	again := deliver("evt_refund", "charge.refunded")
	if again.Outcome != pb.Outcome_OUTCOME_DEFERRED || again.GetEntity().GetDeferrals() != 2 || again.GetRetryAfter().AsDuration() != 2*time.Second {
		t.Errorf("Claim(refund, second time) = %v deferrals %d retry_after %v, want DEFERRED 2 2s", again.Outcome, again.GetEntity().GetDeferrals(), again.GetRetryAfter().AsDuration())
	}

	// 2. The success arrives and is applied: the charge is succeeded.
	clk.Advance(time.Second)
	succeeded := deliver("evt_succeeded", "charge.succeeded")
	if succeeded.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim(charge.succeeded) = %v, want ACQUIRED", succeeded.Outcome)
	}
	if diff := cmp.Diff(position("new", nil, "succeeded", "charge.succeeded", 0), succeeded.Entity, protocmp.Transform()); diff != "" {
		t.Errorf("Claim(charge.succeeded).entity (-want +got):\n%s", diff)
	}
	settle(succeeded)

	// The deferral is ready: the charge reached a state the refund awaits.
	list, err := entities.ListDeferred(ctx, &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe"})
	if err != nil || len(list.Events) != 1 || !list.Events[0].Ready || list.Events[0].Applied || list.Events[0].Count != 2 {
		t.Errorf("ListDeferred() after the success = %v, %v, want the refund, ready, not applied, count 2", list, err)
	}

	// 3. The provider's retry of the refund is the replay: applied.
	clk.Advance(time.Minute)
	retry := deliver("evt_refund", "charge.refunded")
	if retry.Outcome != pb.Outcome_OUTCOME_ACQUIRED || retry.GetEntity().GetState() != "succeeded" {
		t.Fatalf("Claim(refund retry) = %v entity %v, want ACQUIRED, charge succeeded", retry.Outcome, retry.Entity)
	}
	settle(retry)

	// 4. A stale charge.pending: the charge can never be new again.
	stale := deliver("evt_pending", "charge.pending")
	if stale.Outcome != pb.Outcome_OUTCOME_SUPERSEDED || stale.RetryAfter != nil || stale.FencingToken != 0 {
		t.Fatalf("Claim(stale charge.pending) = %v, want SUPERSEDED without retry_after or token", stale)
	}
	if stale.GetEntity().GetState() != "succeeded" {
		t.Errorf("Claim(stale charge.pending).entity.state = %q, want succeeded", stale.GetEntity().GetState())
	}

	// The charge: both events applied once, in lifecycle order.
	got, err := entities.GetEntity(ctx, &pb.GetEntityRequest{Namespace: "billing", Provider: "stripe", Lifecycle: "charge", EntityId: "ch_1"})
	if err != nil {
		t.Fatalf("GetEntity(ch_1) error = %v", err)
	}
	e := got.Entity
	if e.State != "succeeded" || e.Version != 2 || e.BusyWith != "" || len(e.Applied) != 2 {
		t.Fatalf("GetEntity(ch_1) = %v, want succeeded, version 2, free, two events applied", e)
	}
	for i, want := range []*pb.AppliedEvent{
		{EventType: "charge.succeeded", Key: "evt_succeeded", FromState: "new", ToState: "succeeded", FencingToken: 1},
		{EventType: "charge.refunded", Key: "evt_refund", FromState: "succeeded", ToState: "succeeded", FencingToken: 1},
	} {
		if diff := cmp.Diff(want, e.Applied[i], protocmp.Transform(), protocmp.IgnoreFields(&pb.AppliedEvent{}, "applied_at")); diff != "" {
			t.Errorf("applied[%d] (-want +got):\n%s", i, diff)
		}
	}
	// The records carry their place in the lifecycle.
	rec, err := claims.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_refund"})
	if err != nil || rec.Record.Lifecycle != "charge" || rec.Record.EntityId != "ch_1" || rec.Record.EventType != "charge.refunded" {
		t.Errorf("Get(evt_refund) = %v, %v, want the record of charge ch_1's charge.refunded", rec, err)
	}

	// ListDeferred: the refund's deferral is applied, the stale event
	// superseded; neither is ready or lost.
	list, err = entities.ListDeferred(ctx, &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe", EntityId: "ch_1"})
	if err != nil {
		t.Fatalf("ListDeferred(ch_1) error = %v", err)
	}
	byKey := map[string]*pb.DeferredEvent{}
	for _, d := range list.Events {
		byKey[d.Key] = d
	}
	if d := byKey["evt_refund"]; d == nil || !d.Applied || d.Superseded || d.Ready || d.Lost || d.Count != 2 ||
		!d.FirstSeenAt.AsTime().Equal(t0) || !d.HorizonEndsAt.AsTime().Equal(t0.Add(72*time.Hour)) {
		t.Errorf("ListDeferred: evt_refund = %v, want applied, count 2, first seen %v, horizon ends 72h later", d, t0)
	}
	if d := byKey["evt_pending"]; d == nil || !d.Superseded || d.Applied || d.Ready || d.Lost {
		t.Errorf("ListDeferred: evt_pending = %v, want superseded", d)
	}
	if len(list.Events) != 2 {
		t.Errorf("ListDeferred(ch_1) = %d events, want 2", len(list.Events))
	}
}

// TestDeferredPastTheHorizonIsLost: a deferral whose prerequisite never
// came is lost once its provider's retry horizon has passed, and not
// before.
func TestDeferredPastTheHorizonIsLost(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	conn := dialConn(t, newTestService(t, durableOnly(t), clk))
	claims, entities := pb.NewClaimServiceClient(conn), pb.NewEntityServiceClient(conn)
	ctx := context.Background()
	if r, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_r"},
		EntityId: "ch_9", EventType: "charge.refunded"}); err != nil || r.Outcome != pb.Outcome_OUTCOME_DEFERRED {
		t.Fatalf("Claim(refund of ch_9) = %v, %v, want DEFERRED", r, err)
	}
	for _, tc := range []struct {
		at   time.Duration
		lost bool
	}{{71 * time.Hour, false}, {72*time.Hour + time.Second, true}} {
		clk.Set(t0.Add(tc.at))
		list, err := entities.ListDeferred(ctx, &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe"})
		if err != nil || len(list.Events) != 1 {
			t.Fatalf("ListDeferred() at +%v = %v, %v", tc.at, list, err)
		}
		if d := list.Events[0]; d.Lost != tc.lost || d.Ready || d.EntityState != "new" {
			t.Errorf("ListDeferred() at +%v: %v, want lost=%v, not ready, entity new", tc.at, d, tc.lost)
		}
	}
	if _, err := entities.GetEntity(ctx, &pb.GetEntityRequest{Namespace: "billing", Provider: "stripe", Lifecycle: "charge", EntityId: "ch_none"}); codeOf(err) != codes.NotFound {
		t.Errorf("GetEntity(never seen) error = %v, want NotFound", err)
	}
}

func codeOf(err error) codes.Code { c, _ := errorInfo(err); return c }

// TestListDeferredPages: page_size bounds a page, next_page_token fetches
// the next one, the last page has none, and a token the store did not make
// is INVALID_ARGUMENT on page_token.
func TestListDeferredPages(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	conn := dialConn(t, newTestService(t, durableOnly(t), clk))
	claims, entities := pb.NewClaimServiceClient(conn), pb.NewEntityServiceClient(conn)
	ctx := context.Background()
	for _, id := range []string{"ch_a", "ch_b", "ch_c"} {
		clk.Advance(time.Second)
		if r, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_refund_" + id},
			EntityId: id, EventType: "charge.refunded"}); err != nil || r.Outcome != pb.Outcome_OUTCOME_DEFERRED {
			t.Fatalf("Claim(refund of %s) = %v, %v, want DEFERRED", id, r, err)
		}
	}
	var keys []string
	token := ""
	for page := 0; ; page++ {
		resp, err := entities.ListDeferred(ctx, &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe", PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatalf("ListDeferred(page %d) error = %v", page, err)
		}
		if len(resp.Events) > 2 {
			t.Fatalf("ListDeferred(page_size 2) = %d events", len(resp.Events))
		}
		for _, e := range resp.Events {
			keys = append(keys, e.Key)
		}
		if token = resp.NextPageToken; token == "" || page > 3 {
			break
		}
	}
	// Newest last seen first.
	if want := []string{"evt_refund_ch_c", "evt_refund_ch_b", "evt_refund_ch_a"}; !cmp.Equal(keys, want) {
		t.Errorf("ListDeferred pages = %v, want %v", keys, want)
	}
	_, err := entities.ListDeferred(ctx, &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe", PageToken: "not a cursor"})
	if code, field, _ := fieldOf(err); code != codes.InvalidArgument || field != "ListDeferredRequest.page_token" {
		t.Errorf("ListDeferred(page_token not a cursor) error = %v, want InvalidArgument on ListDeferredRequest.page_token", err)
	}
}

// TestRacingEventsOneEntity: charge.succeeded and charge.failed of one
// charge claimed at once, over gRPC on the embedded pair: one acquires the
// charge, the other is DEFERRED busy with it; once the winner settles, the
// loser's retry is SUPERSEDED (the charge cannot be new or pending again),
// so exactly one of them is ever applied.
func TestRacingEventsOneEntity(t *testing.T) {
	for round := range 10 {
		clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		conn := dialConn(t, newTestService(t, embedded(t), clk))
		claims, entities := pb.NewClaimServiceClient(conn), pb.NewEntityServiceClient(conn)
		ctx := context.Background()
		types := []string{"charge.succeeded", "charge.failed"}
		answers := make([]*pb.ClaimResponse, len(types))
		errs := make(chan error, len(types))
		for i, typ := range types {
			go func() {
				var err error
				answers[i], err = claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe",
					Key: stripeDelivery("evt_"+typ, typ, "ch_race")})
				errs <- err
			}()
		}
		for range types {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: Claim error = %v", round, err)
			}
		}
		winner, loser := answers[0], answers[1]
		if loser.Outcome == pb.Outcome_OUTCOME_ACQUIRED {
			winner, loser = loser, winner
		}
		if winner.Outcome != pb.Outcome_OUTCOME_ACQUIRED || loser.Outcome != pb.Outcome_OUTCOME_DEFERRED ||
			loser.GetEntity().GetBusyWith() != winner.GetEntity().GetEventType() {
			t.Fatalf("round %d: racing claims = %v and %v (busy_with %q), want one ACQUIRED, the other DEFERRED busy with it",
				round, winner.Outcome, loser.Outcome, loser.GetEntity().GetBusyWith())
		}
		for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
			if _, err := claims.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: winner.Key,
				FencingToken: winner.FencingToken, LeaseSecret: winner.LeaseSecret, To: to}); err != nil {
				t.Fatalf("round %d: Transition(%s, %v) error = %v", round, winner.Key, to, err)
			}
		}
		retry, err := claims.Claim(ctx, &pb.ClaimRequest{Namespace: "billing", Provider: "stripe",
			Key: stripeDelivery(loser.Key, loser.GetEntity().GetEventType(), "ch_race")})
		if err != nil || retry.Outcome != pb.Outcome_OUTCOME_SUPERSEDED {
			t.Fatalf("round %d: retry of the loser = %v, %v, want SUPERSEDED", round, retry, err)
		}
		got, err := entities.GetEntity(ctx, &pb.GetEntityRequest{Namespace: "billing", Provider: "stripe", Lifecycle: "charge", EntityId: "ch_race"})
		if err != nil || got.Entity.Version != 1 || len(got.Entity.Applied) != 1 || got.Entity.Applied[0].Key != winner.Key {
			t.Fatalf("round %d: GetEntity = %v, %v, want only %s applied", round, got, err, winner.Key)
		}
	}
}
