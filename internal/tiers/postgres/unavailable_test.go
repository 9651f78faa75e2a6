package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// stoppableStore is a Store on a private server the test may stop and
// start, with a short connect timeout.
func stoppableStore(t *testing.T) (*testenv.Server, *postgres.Store) {
	t.Helper()
	srv := testenv.StartPostgres(t, postgres.Migrate)
	s, err := postgres.New(context.Background(), postgres.Config{URL: srv.URL(), ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return srv, s
}

// TestStoppedServerIsUnavailable stops a private server under an open Store:
// every operation must fail with an error wrapping tiers.ErrUnavailable
// before its context's deadline (fail closed, retryable), and serve again
// once the server is back.
func TestStoppedServerIsUnavailable(t *testing.T) {
	srv, s := stoppableStore(t)
	clk := clock.NewFake(time.Now())
	k := key("evt_down")
	claim := tiers.ClaimParams{Key: k, Now: clk.Now(), Lease: lease, TTL: ttl, Holder: "pod-a", Salt: ownerSalt, SecretHash: ownerHash}
	if _, err := s.Claim(context.Background(), claim); err != nil {
		t.Fatalf("Claim(before stop) error = %v", err)
	}

	srv.Stop(t)

	ops := []struct {
		desc string
		call func(ctx context.Context) error
	}{
		{"Claim", func(ctx context.Context) error { _, err := s.Claim(ctx, claim); return err }},
		{"Transition", func(ctx context.Context) error {
			_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: k, Now: clk.Now(), Token: 1, SecretHash: ownerHash, To: tiers.StateProcessing})
			return err
		}},
		{"Renew", func(ctx context.Context) error {
			_, err := s.Renew(ctx, tiers.RenewParams{Key: k, Now: clk.Now(), Token: 1, SecretHash: ownerHash, Lease: lease})
			return err
		}},
		{"Release", func(ctx context.Context) error {
			_, err := s.Release(ctx, tiers.ReleaseParams{Key: k, Now: clk.Now(), Token: 1, SecretHash: ownerHash})
			return err
		}},
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, k); return err }},
		{"Ping", s.Ping},
		{"Prune", func(ctx context.Context) error { _, err := s.Prune(ctx, clk.Now(), 10); return err }},
		{"PruneEntities", func(ctx context.Context) error { _, err := s.PruneEntities(ctx, clk.Now(), 10); return err }},
		{"CountPrunable", func(ctx context.Context) error { _, err := s.CountPrunable(ctx, clk.Now()); return err }},
		{"GetEntity", func(ctx context.Context) error {
			_, err := s.GetEntity(ctx, tiers.EntityKey{Namespace: k.Namespace, Provider: k.Provider, Lifecycle: "payment", EntityID: "pi_1"})
			return err
		}},
		{"ListDeferred", func(ctx context.Context) error {
			_, _, err := s.ListDeferred(ctx, tiers.ListDeferredParams{Namespace: k.Namespace, Provider: k.Provider})
			return err
		}},
		{"CountDeferred", func(ctx context.Context) error { _, err := s.CountDeferred(ctx, nil); return err }},
		{"Stats", func(ctx context.Context) error { _, _, err := s.Stats(ctx); return err }},
		{"EstimatedStats", func(ctx context.Context) error { _, _, err := s.EstimatedStats(ctx); return err }},
		{"EnsureAuditPartitions", func(ctx context.Context) error { return s.EnsureAuditPartitions(ctx, clk.Now(), 1) }},
		{"Migrate", func(ctx context.Context) error { return postgres.Migrate(ctx, srv.URL()) }},
		{"New", func(ctx context.Context) error {
			s2, err := postgres.New(ctx, postgres.Config{URL: srv.URL()})
			if err == nil {
				s2.Close()
			}
			return err
		}},
	}
	const deadline = 10 * time.Second
	for _, op := range ops {
		t.Run(op.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			err := op.call(ctx)
			if !errors.Is(err, tiers.ErrUnavailable) {
				t.Fatalf("%s(server stopped) error = %v, want one wrapping tiers.ErrUnavailable", op.desc, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("%s(server stopped) returned after its context ended", op.desc)
			}
		})
	}

	srv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	// The pool's connections of the old server were retired when the
	// calls above found them lost (outage.go): the first call after the
	// restart is served on a new one.
	rec, err := s.Get(ctx, k)
	if err != nil || rec.Token != 1 {
		t.Fatalf("Get(after restart) = token %d, %v; want the record claimed before the stop", rec.Token, err)
	}
}

// TestCancelledContextPassesThrough: the caller giving up is not the
// database being unavailable.
func TestCancelledContextPassesThrough(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.store.Claim(ctx, e.params("evt_cancel"))
	if !errors.Is(err, context.Canceled) || errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("Claim(cancelled ctx) error = %v, want context.Canceled and not ErrUnavailable", err)
	}
	// Nothing was acquired by the cancelled call.
	res := e.claim(e.params("evt_cancel"))
	if res.Outcome != tiers.OutcomeAcquired || res.Reason != tiers.ReasonNew {
		t.Fatalf("Claim(after cancelled call) = %v/%v, want ACQUIRED/NEW", res.Outcome, res.Reason)
	}
}

// TestStoppedServerDuringLifecycle: with the server stopped, a lifecycle
// claim and the settle of the entity's holder fail closed (ErrUnavailable)
// and leave nothing behind: once it is back, the holder settles, the entity
// advances once, and the other event's retry is ordered as if the failed
// calls never happened, neither DUPLICATE nor stuck behind a holder.
func TestStoppedServerDuringLifecycle(t *testing.T) {
	srv, s := stoppableStore(t)
	clk := clock.NewFake(time.Now())
	claim := func(k, eventType string) tiers.ClaimParams {
		return tiers.ClaimParams{Key: key(k), Now: clk.Now(), Lease: lease, TTL: ttl, Holder: "pod-a",
			Salt: ownerSalt, SecretHash: ownerHash, Entity: pay("pi_down", eventType)}
	}
	settle := func(ctx context.Context) error {
		_, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_created"), Now: clk.Now(), Token: 1,
			SecretHash: ownerHash, To: tiers.StateSettled, Result: []byte("done")})
		return err
	}
	ctx := context.Background()
	a, err := s.Claim(ctx, claim("evt_created", "created"))
	if err != nil || a.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim(created) = %v, %v; want ACQUIRED", a.Outcome, err)
	}
	if _, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_created"), Now: clk.Now(), Token: 1,
		SecretHash: ownerHash, To: tiers.StateProcessing}); err != nil {
		t.Fatal(err)
	}

	srv.Stop(t)
	const deadline = 10 * time.Second
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	if _, err := s.Claim(dctx, claim("evt_processing", "processing")); !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("Claim(lifecycle, server stopped) error = %v, want ErrUnavailable", err)
	}
	if err := settle(dctx); !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("Transition(→SETTLED of the entity's holder, server stopped) error = %v, want ErrUnavailable", err)
	}
	if dctx.Err() != nil {
		t.Fatal("the calls returned after their context ended")
	}

	srv.Start(t)
	rctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	// The first calls may meet the pool's connections to the old server.
	for err = settle(rctx); errors.Is(err, tiers.ErrUnavailable); err = settle(rctx) {
	}
	if err != nil {
		t.Fatalf("Transition(→SETTLED) after the restart error = %v", err)
	}
	res, err := s.Claim(rctx, claim("evt_processing", "processing"))
	if err != nil || res.Outcome != tiers.OutcomeAcquired || res.Reason != tiers.ReasonNew || res.Entity.State != "created" {
		t.Fatalf("Claim(processing) after the restart = %+v, %v; want ACQUIRED/NEW from created", res, err)
	}
	ent, err := s.GetEntity(rctx, tiers.EntityKey{Namespace: "billing", Provider: "stripe", Lifecycle: "payment", EntityID: "pi_down"})
	if err != nil || ent.Version != 1 || ent.BusyWith != "evt_processing" {
		t.Fatalf("GetEntity after the restart = %+v, %v; want one event applied, held by evt_processing", ent, err)
	}
	if events, _, err := s.ListDeferred(rctx, tiers.ListDeferredParams{Namespace: "billing", Provider: "stripe"}); err != nil || len(events) != 0 {
		t.Fatalf("ListDeferred after the restart = %+v, %v; want nothing: the failed claim recorded no deferral", events, err)
	}
}

// TestEntityClaimCommittedUnheard: a lifecycle claim whose commit the
// caller never heard of (the connection died after COMMIT) holds its key
// and its entity like any acquisition. Its retry is IN_PROGRESS, never
// DUPLICATE, and once its lease ends the retry takes the key and the
// entity over: the entity is never stuck behind a holder that vanished.
func TestEntityClaimCommittedUnheard(t *testing.T) {
	e := newEnv(t)
	p := e.entityParams("evt_c", "pi_unheard", "created")
	e.claim(p) // the answer that was lost
	retry := e.entityParams("evt_c", "pi_unheard", "created")
	retry.Holder = "pod-b"
	if res := e.claim(retry); res.Outcome != tiers.OutcomeInProgress || res.Entity.State != "new" {
		t.Fatalf("Claim(retry, lease running) = %v %+v, want IN_PROGRESS in state new", res.Outcome, res.Entity)
	}
	other := e.entityParams("evt_x", "pi_unheard", "canceled")
	if res := e.claim(other); res.Outcome != tiers.OutcomeDeferred || res.Entity.BusyWith != "created" {
		t.Fatalf("Claim(another event, lease running) = %v %+v, want DEFERRED behind created", res.Outcome, res.Entity)
	}
	e.clk.Advance(lease)
	retry.Now = e.clk.Now()
	res := e.claim(retry)
	if res.Outcome != tiers.OutcomeAcquired || res.Reason != tiers.ReasonLeaseExpired || res.Record.Token != 2 {
		t.Fatalf("Claim(retry after the lease) = %v/%v token %d, want ACQUIRED/LEASE_EXPIRED token 2", res.Outcome, res.Reason, res.Record.Token)
	}
	e.settle("evt_c", res.Record.Token)
	if got := e.applied("pi_unheard"); len(got) != 1 || got[0] != "created" {
		t.Fatalf("applied = %v, want [created]", got)
	}
}
