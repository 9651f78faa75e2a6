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

// TestStoppedServerIsUnavailable stops a private server under an open Store:
// every operation must fail with an error wrapping tiers.ErrUnavailable
// before its context's deadline (fail closed, retryable), and serve again
// once the server is back.
func TestStoppedServerIsUnavailable(t *testing.T) {
	srv := testenv.StartPostgres(t, postgres.Migrate)
	s, err := postgres.New(context.Background(), postgres.Config{URL: srv.URL(), ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { s.Close() })
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
		{"Stats", func(ctx context.Context) error { _, _, err := s.Stats(ctx); return err }},
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
	// The pool may still hold connections of the old server: the first
	// calls may fail on them, then the pool reconnects.
	var rec tiers.Record
	for {
		rec, err = s.Get(ctx, k)
		if err == nil || !errors.Is(err, tiers.ErrUnavailable) {
			break
		}
	}
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
