// Command naive serves idempotency.v1.ClaimService with the handler teams
// write by hand, the peer claimd must beat: per request, one go-redis
// SET NX EX on the key and, when it was set, one pgx
// INSERT … ON CONFLICT DO NOTHING, each in its own round trip and (for
// PostgreSQL) its own commit. Both clients keep their library defaults
// (pgxpool: max(4, NumCPU) connections; go-redis: 10 per CPU), as a
// hand-written handler would.
//
// It knows nothing of leases, fencing or payloads: a key set in Redis is a
// DUPLICATE, a key inserted is ACQUIRED. Transition is one UPDATE of the
// row's state (and, to a terminal state, its result), in its own commit:
// the lifecycle scenario's Claim → PROCESSING → SETTLED written the obvious
// way, SET NX + INSERT, then two UPDATEs. A Claim with start inserts the row
// in PROCESSING.
//
//	naive --listen 127.0.0.1:50062 --redis-url redis://… --postgres-url postgres://…
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// ttl is Stripe's window in claimd's registry (72h horizon + 12h margin), so
// both servers keep keys equally long.
const ttl = 84 * time.Hour

const schema = `CREATE TABLE IF NOT EXISTS naive_claims (
    namespace     text        NOT NULL,
    provider      text        NOT NULL,
    key           text        NOT NULL,
    state         smallint    NOT NULL DEFAULT 1,
    result        bytea,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, provider, key)
)`

const (
	insertSQL = `INSERT INTO naive_claims (namespace, provider, key, state) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`
	updateSQL = `UPDATE naive_claims SET state = $4, result = $5, updated_at = now() WHERE namespace = $1 AND provider = $2 AND key = $3`
)

func main() {
	listen := flag.String("listen", "127.0.0.1:50062", "gRPC listen address")
	redisURL := flag.String("redis-url", "", "Redis URL")
	pgURL := flag.String("postgres-url", "", "PostgreSQL URL")
	flag.Parse()
	if err := run(*listen, *redisURL, *pgURL); err != nil {
		fmt.Fprintln(os.Stderr, "naive:", err)
		os.Exit(1)
	}
}

func run(listen, redisURL, pgURL string) error {
	if redisURL == "" || pgURL == "" {
		return errors.New("--redis-url and --postgres-url are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	opts, err := goredis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	rdb := goredis.NewClient(opts)
	defer rdb.Close()
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create table: %w", err)
	}

	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pb.RegisterClaimServiceServer(srv, &handler{rdb: rdb, pool: pool})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(lis)
}

type handler struct {
	pb.UnimplementedClaimServiceServer
	rdb  *goredis.Client
	pool *pgxpool.Pool
}

// Claim is SET NX EX, then INSERT … ON CONFLICT DO NOTHING when the key was
// new to Redis. A failed insert deletes the Redis key again so that the
// provider's retry is not taken for a duplicate.
func (h *handler) Claim(ctx context.Context, req *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	ns, provider, key := req.GetNamespace(), req.GetProvider(), req.GetEventId()
	if ns == "" || provider == "" || key == "" {
		return nil, status.Error(codes.InvalidArgument, "namespace, provider and event_id are required")
	}
	rkey := "naive:" + ns + ":" + provider + ":" + key
	set, err := h.rdb.SetNX(ctx, rkey, "1", ttl).Result()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "redis: %v", err)
	}
	resp := &pb.ClaimResponse{Key: key, KeySource: pb.KeySource_KEY_SOURCE_EVENT_ID, Ttl: durationpb.New(ttl)}
	if !set {
		resp.Outcome = pb.Outcome_OUTCOME_DUPLICATE
		resp.ServedBy = pb.Tier_TIER_FAST
		return resp, nil
	}
	state := pb.EventState_EVENT_STATE_RECEIVED
	if req.GetStart() {
		state = pb.EventState_EVENT_STATE_PROCESSING
	}
	tag, err := h.pool.Exec(ctx, insertSQL, ns, provider, key, int16(state))
	if err != nil {
		h.rdb.Del(context.WithoutCancel(ctx), rkey)
		return nil, status.Errorf(codes.Unavailable, "postgres: %v", err)
	}
	resp.ServedBy = pb.Tier_TIER_DURABLE
	if tag.RowsAffected() == 0 {
		resp.Outcome = pb.Outcome_OUTCOME_DUPLICATE
		return resp, nil
	}
	resp.Outcome = pb.Outcome_OUTCOME_ACQUIRED
	resp.Reason = pb.Reason_REASON_NEW
	resp.FencingToken = 1
	resp.State = state
	resp.Attempt = 1
	return resp, nil
}

// Transition is one UPDATE of the key's state (and result): no fencing, no
// check of the state machine, as a hand-written handler does it.
func (h *handler) Transition(ctx context.Context, req *pb.TransitionRequest) (*pb.TransitionResponse, error) {
	ns, provider, key := req.GetNamespace(), req.GetProvider(), req.GetKey()
	if ns == "" || provider == "" || key == "" || req.GetTo() == pb.EventState_EVENT_STATE_UNSPECIFIED {
		return nil, status.Error(codes.InvalidArgument, "namespace, provider, key and to are required")
	}
	tag, err := h.pool.Exec(ctx, updateSQL, ns, provider, key, int16(req.GetTo()), req.GetResult())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "postgres: %v", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, status.Error(codes.NotFound, "no such key")
	}
	return &pb.TransitionResponse{Changed: true}, nil
}
