package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// Phases of the load in TestClaimsAfterAnOutage. An operation counts in
// the phase it began and ended in; one that spans a change (in flight as
// the server stops or starts) counts in none.
const (
	phaseWarm int32 = iota
	phaseStopping
	phaseDown
	phaseStarting
	phaseUp
	phases
)

// outageLoad runs a bounded number of claimers against svc, each looping
// over new keys: Claim (start), and Transition to SETTLED when acquired.
type outageLoad struct {
	phase atomic.Int32
	mu    sync.Mutex
	ops   [phases]int
	errs  [phases][]error
	stop  chan struct{}
	done  sync.WaitGroup
}

func startOutageLoad(t *testing.T, svc *Service, claimers int) *outageLoad {
	l := &outageLoad{stop: make(chan struct{})}
	var seq atomic.Int64
	for range claimers {
		l.done.Go(func() {
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ph := l.phase.Load()
				err := l.op(svc, fmt.Sprintf("evt_outage_%d", seq.Add(1)))
				if l.phase.Load() != ph {
					continue
				}
				l.mu.Lock()
				l.ops[ph]++
				if err != nil {
					l.errs[ph] = append(l.errs[ph], err)
				}
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

func (l *outageLoad) op(svc *Service, event string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := svc.Claim(ctx, claimReq(func(r *pb.ClaimRequest) {
		r.Key = &pb.ClaimRequest_EventId{EventId: event}
		r.Start = true
	}))
	if err != nil || resp.Outcome != pb.Outcome_OUTCOME_ACQUIRED {
		return err
	}
	_, err = svc.Transition(ctx, &pb.TransitionRequest{Namespace: "billing", Provider: "stripe", Key: event,
		FencingToken: resp.FencingToken, LeaseSecret: resp.LeaseSecret, To: pb.EventState_EVENT_STATE_SETTLED, Result: []byte("ok")})
	return err
}

func (l *outageLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.done.Wait()
}

// count returns how many operations phase ph saw, and their errors.
func (l *outageLoad) count(ph int32) (int, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops[ph], append([]error(nil), l.errs[ph]...)
}

// waitOps polls until phase ph has seen n operations, for at most d.
func (l *outageLoad) waitOps(t *testing.T, ph int32, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if got, _ := l.count(ph); got >= n {
			return
		}
		if time.Now().After(deadline) {
			got, _ := l.count(ph)
			t.Fatalf("phase %d saw %d operations in %v, want %d", ph, got, d, n)
		}
		<-tick.C
	}
}

// answers polls ping, a call straight to the server, until it succeeds.
func answers(t *testing.T, what string, ping func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := ping(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer 30s after its start: %v", what, err)
		}
	}
}

// TestClaimsAfterAnOutage restarts PostgreSQL, then Redis, under the
// Claims and Transitions of 8 claimers on the production pair, and counts
// the errors once each server answers again: none (issue 34). While
// PostgreSQL is down every claim fails closed, UNAVAILABLE; while Redis
// is down claims are decided by PostgreSQL alone and none fails.
func TestClaimsAfterAnOutage(t *testing.T) {
	pgSrv := testenv.StartPostgres(t, postgres.Migrate)
	rdSrv := testenv.StartRedis(t)
	ctx := context.Background()
	pg, err := postgres.New(ctx, postgres.Config{URL: pgSrv.URL(), ConnectTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := redis.New(ctx, redis.Config{URL: rdSrv.URL()})
	if err != nil {
		pg.Close()
		t.Fatal(err)
	}
	store := twotier.New(rd, pg, twotier.Config{})
	t.Cleanup(func() { store.Close() })
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	svc := New(Config{Store: store, Registry: reg, Clock: clock.Real{}, StoreTimeout: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	pgPing := func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, pgSrv.URL())
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx)
	}
	rdPing := func(ctx context.Context) error {
		opts, err := goredis.ParseURL(rdSrv.URL())
		if err != nil {
			return err
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	for _, tc := range []struct {
		desc string
		srv  *testenv.Server
		ping func(context.Context) error
		// downFails: every operation while the server is down fails
		// UNAVAILABLE (the durable tier); otherwise none fails (the fast
		// tier, which claims do without).
		downFails bool
	}{
		{"postgres", pgSrv, pgPing, true},
		{"redis", rdSrv, rdPing, false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			load := startOutageLoad(t, svc, 8)
			load.waitOps(t, phaseWarm, 100, 30*time.Second)
			load.phase.Store(phaseStopping)
			tc.srv.Stop(t)
			load.phase.Store(phaseDown)
			load.waitOps(t, phaseDown, 50, 30*time.Second)
			load.phase.Store(phaseStarting)
			tc.srv.Start(t)
			answers(t, tc.desc, tc.ping)
			load.phase.Store(phaseUp)
			load.waitOps(t, phaseUp, 400, 60*time.Second)
			load.end()

			if n, errs := load.count(phaseWarm); len(errs) != 0 {
				t.Errorf("%d of %d operations failed before the restart, first: %v", len(errs), n, errs[0])
			}
			n, errs := load.count(phaseDown)
			switch {
			case tc.downFails && len(errs) != n:
				t.Errorf("%d of %d operations succeeded with %s down, want every one to fail closed", n-len(errs), n, tc.desc)
			case !tc.downFails && len(errs) != 0:
				t.Errorf("%d of %d operations failed with %s down, first: %v; want PostgreSQL to decide them all", len(errs), n, tc.desc, errs[0])
			}
			for _, err := range errs {
				if status.Code(err) != codes.Unavailable {
					t.Errorf("with %s down: error %v, want UNAVAILABLE", tc.desc, err)
					break
				}
			}
			n, errs = load.count(phaseUp)
			if len(errs) != 0 {
				t.Errorf("%d of %d operations failed after %s answered again, first: %v; want none", len(errs), n, tc.desc, errs[0])
			}
			t.Logf("%s: %d operations while down, %d after it answered again", tc.desc, load.ops[phaseDown], n)
		})
	}
}
