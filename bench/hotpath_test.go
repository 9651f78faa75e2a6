// Package bench holds the harness of make bench (cmd/benchrun and the
// servers it measures) and, in this file, the go test benchmarks of the hot
// paths of a claim, from the pure decision to a gRPC round trip, so that
// -benchmem shows the allocations each layer adds. The benchmarks of the
// backends' own round trips (Lua scripts, SQL statements) and of key
// derivation live beside their code:
//
//	go test -run '^$' -bench . -benchmem -count 10 ./bench ./internal/... | tee new.txt
//	benchstat old.txt new.txt
package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const (
	benchTTL   = 84 * time.Hour
	benchLease = 60 * time.Second
)

func benchKey(k string) tiers.Key { return tiers.Key{Namespace: "bench", Provider: "stripe", Key: k} }

// BenchmarkDecide measures the state machine alone, on the three records a
// claim meets most: none, a settled one, one under a live lease.
func BenchmarkDecide(b *testing.B) {
	now := clock.NewFake(time.Now()).Now()
	p := tiers.ClaimParams{Key: benchKey("evt_1"), Now: now, Lease: benchLease, TTL: benchTTL, Holder: "pod-b"}
	settled := tiers.NewRecord(p)
	settled.State, settled.Result = tiers.StateSettled, []byte(`{"charge":"ch_1"}`)
	live := tiers.NewRecord(p)
	live.Holder = "pod-a"
	for _, bc := range []struct {
		name string
		cur  *tiers.Record
		want tiers.Outcome
	}{{"absent", nil, tiers.OutcomeAcquired}, {"settled", &settled, tiers.OutcomeDuplicate}, {"live-lease", &live, tiers.OutcomeInProgress}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res, _, _ := tiers.Decide(bc.cur, p); res.Outcome != bc.want {
					b.Fatalf("Decide(%s) = %v, want %v", bc.name, res.Outcome, bc.want)
				}
			}
		})
	}
}

// embedded opens the embedded pair (memory in front of SQLite) in a
// directory of its own.
func embedded(b *testing.B) tiers.Store {
	b.Helper()
	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "claimd.db")})
	if err != nil {
		b.Fatal(err)
	}
	s := twotier.New(memory.New(memory.Config{}), lite, twotier.Config{})
	b.Cleanup(func() { s.Close() })
	return s
}

// settle claims k and settles it with a result.
func settle(b *testing.B, s tiers.Store, k tiers.Key, now time.Time) {
	b.Helper()
	ctx := context.Background()
	hash := bytes.Repeat([]byte{1}, tiers.SecretHashBytes) // the owner's; the service would derive it
	res, err := s.Claim(ctx, tiers.ClaimParams{Key: k, Now: now, Lease: benchLease, TTL: benchTTL, Holder: "pod-a",
		Salt: make([]byte, tiers.SaltBytes), SecretHash: hash})
	if err != nil {
		b.Fatal(err)
	}
	for _, to := range []tiers.State{tiers.StateProcessing, tiers.StateSettled} {
		var result []byte
		if to.Terminal() {
			result = []byte(`{"charge":"ch_1"}`)
		}
		if _, _, err := s.Transition(ctx, tiers.TransitionParams{Key: k, Now: now, Token: res.Record.Token, SecretHash: hash, To: to, Result: result}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLocalDuplicate measures a duplicate of a settled key answered by
// the process-local cache (DESIGN §3 step 1): no network hop.
func BenchmarkLocalDuplicate(b *testing.B) {
	s := embedded(b)
	now := clock.NewFake(time.Now()).Now()
	k := benchKey("evt_settled")
	settle(b, s, k, now)
	p := tiers.ClaimParams{Key: k, Now: now, Lease: benchLease, TTL: benchTTL, Holder: "pod-b"}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, err := s.Claim(ctx, p); err != nil || res.ServedBy != tiers.TierLocal {
				b.Errorf("Claim(%q) = %v from %v, %v; want DUPLICATE from LOCAL", k.Key, res.Outcome, res.ServedBy, err)
				return
			}
		}
	})
}

func newService(b *testing.B, s tiers.Store) *service.Service {
	b.Helper()
	reg, err := horizon.Default()
	if err != nil {
		b.Fatal(err)
	}
	return service.New(service.Config{Store: s, Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
}

// BenchmarkServiceDuplicate measures the service's own work on a local
// duplicate (validation, registry lookup, response): the handler a gRPC call
// runs, without the transport.
func BenchmarkServiceDuplicate(b *testing.B) {
	s := embedded(b)
	settle(b, s, benchKey("evt_settled"), time.Now())
	svc := newService(b, s)
	req := &pb.ClaimRequest{Namespace: "bench", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_settled"}, Holder: "pod-b"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if resp, err := svc.Claim(ctx, req); err != nil || resp.GetOutcome() != pb.Outcome_OUTCOME_DUPLICATE {
			b.Fatalf("Claim(%q) = %v, %v; want DUPLICATE", "evt_settled", resp.GetOutcome(), err)
		}
	}
}

// dupResponse is what claimd answers for a settled duplicate, every field
// set, so that the no-op handler's codec does the same work.
var dupResponse = &pb.ClaimResponse{
	Outcome:         pb.Outcome_OUTCOME_DUPLICATE,
	Key:             "evt_settled",
	KeySource:       pb.KeySource_KEY_SOURCE_EVENT_ID,
	FencingToken:    1,
	State:           pb.EventState_EVENT_STATE_SETTLED,
	LeaseExpiresAt:  timestamppb.Now(),
	WindowExpiresAt: timestamppb.Now(),
	Ttl:             durationpb.New(benchTTL),
	Attempt:         1,
	FirstSeenAt:     timestamppb.Now(),
	Result:          []byte(`{"charge":"ch_1"}`),
	ServedBy:        pb.Tier_TIER_LOCAL,
	Holder:          "pod-a",
}

// noop answers every Claim with a fixed response: the transport's cost.
type noop struct {
	pb.UnimplementedClaimServiceServer
	resp *pb.ClaimResponse
}

func (n *noop) Claim(context.Context, *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	return n.resp, nil
}

// serve serves srv on a loopback port and returns a client connected to it.
func serve(b *testing.B, register func(*grpc.Server)) *grpc.ClientConn {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return cc
}

// BenchmarkGRPCDuplicate compares a gRPC round trip over loopback to the
// no-op handler with one to claimd's service answering a local duplicate:
// the in-process counterpart of the "duplicates ≥ 0.8× no-op" target
// (client and server share the process here).
func BenchmarkGRPCDuplicate(b *testing.B) {
	s := embedded(b)
	settle(b, s, benchKey("evt_settled"), time.Now())
	svc := newService(b, s)
	for _, bc := range []struct {
		name     string
		register func(*grpc.Server)
	}{
		{"noop", func(srv *grpc.Server) { pb.RegisterClaimServiceServer(srv, &noop{resp: dupResponse}) }},
		{"claimd", func(srv *grpc.Server) { svc.Register(srv) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cc := serve(b, bc.register)
			req := &pb.ClaimRequest{Namespace: "bench", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_settled"}, Holder: "pod-b"}
			b.SetParallelism(25) // 50 callers on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(p *testing.PB) {
				resp := &pb.ClaimResponse{}
				for p.Next() {
					if err := cc.Invoke(context.Background(), pb.ClaimService_Claim_FullMethodName, req, resp); err != nil {
						b.Errorf("Claim: %v", err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkProductionNewKeys measures first claims through the production
// tiers (Redis in front of a PostgreSQL with synchronous commit) from 50
// concurrent callers: the fast-tier reservation (the pending marker, which
// stays as the new record's copy) and the group-committed insert.
func BenchmarkProductionNewKeys(b *testing.B) {
	ctx := context.Background()
	pgSrv := testenv.StartPostgresWith(b, testenv.Options{Durable: true}, postgres.Migrate)
	pg, err := postgres.New(ctx, postgres.Config{URL: pgSrv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	rd, err := redis.New(ctx, redis.Config{URL: testenv.Redis(b), KeyPrefix: "bench" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"})
	if err != nil {
		b.Fatal(err)
	}
	s := twotier.New(rd, pg, twotier.Config{})
	b.Cleanup(func() { s.Close() })
	base := tiers.ClaimParams{Key: benchKey(""), Now: clock.NewFake(time.Now()).Now(), Lease: benchLease, TTL: benchTTL, Holder: "pod-a"}
	var seq atomic.Int64
	b.SetParallelism(25)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		p := base
		for pb.Next() {
			p.Key.Key = "evt_" + strconv.FormatInt(seq.Add(1), 10)
			if res, err := s.Claim(ctx, p); err != nil || res.Outcome != tiers.OutcomeAcquired {
				b.Errorf("Claim(%q) = %v, %v; want ACQUIRED", p.Key.Key, res.Outcome, err)
				return
			}
		}
	})
}

// BenchmarkProductionLifecycle measures whole events through the service
// on the production tiers (Redis in front of a PostgreSQL with synchronous
// commit), 50 concurrent callers: Claim, Transition to PROCESSING,
// Transition to SETTLED with a small result (sub-benchmark start: Claim with
// start, then SETTLED), each with the Redis coalescer and without it
// (-unpipelined). cpu-µs/event is this process's CPU (the service and both
// tier clients: claimd's own share without gRPC), from getrusage.
func BenchmarkProductionLifecycle(b *testing.B) {
	ctx := context.Background()
	pgSrv := testenv.StartPostgresWith(b, testenv.Options{Durable: true}, postgres.Migrate)
	pg, err := postgres.New(ctx, postgres.Config{URL: pgSrv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	for _, variant := range []struct {
		name              string
		start, noPipeline bool
	}{{"three-rpcs", false, false}, {"three-rpcs-unpipelined", false, true}, {"start", true, false}, {"start-unpipelined", true, true}} {
		start := variant.start
		rd, err := redis.New(ctx, redis.Config{URL: testenv.Redis(b), NoPipelining: variant.noPipeline,
			KeyPrefix: "bench" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"})
		if err != nil {
			b.Fatal(err)
		}
		s := twotier.New(rd, pg, twotier.Config{})
		svc := newService(b, s)
		b.Run(variant.name, func(b *testing.B) {
			b.SetParallelism(25)
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			b.RunParallel(func(pbt *testing.PB) {
				req := &pb.ClaimRequest{Namespace: "bench", Provider: "stripe", Holder: "pod-a", Start: start}
				for pbt.Next() {
					id := "evt_" + strconv.FormatInt(seq.Add(1), 10)
					req.Key = &pb.ClaimRequest_EventId{EventId: id}
					resp, err := svc.Claim(ctx, req)
					if err != nil || resp.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
						b.Errorf("Claim(%q) = %v, %v; want ACQUIRED", id, resp.GetOutcome(), err)
						return
					}
					tr := &pb.TransitionRequest{Namespace: "bench", Provider: "stripe", Key: resp.GetKey(),
						FencingToken: resp.GetFencingToken(), LeaseSecret: resp.GetLeaseSecret()}
					if !start {
						tr.To = pb.EventState_EVENT_STATE_PROCESSING
						if _, err := svc.Transition(ctx, tr); err != nil {
							b.Errorf("Transition(%q, PROCESSING) = %v", id, err)
							return
						}
					}
					tr.To, tr.Result = pb.EventState_EVENT_STATE_SETTLED, []byte(`{"charge":"ch_`+id+`"}`)
					if _, err := svc.Transition(ctx, tr); err != nil {
						b.Errorf("Transition(%q, SETTLED) = %v", id, err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/event")
		})
		rd.Close() // not s.Close: the PostgreSQL store serves the next variant
	}
	pg.Close()
}

// processCPU is the CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
