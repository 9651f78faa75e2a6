package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// settleWorkers is how many keys Settle prepares at once.
const settleWorkers = 16

// Settle claims each of cfg's dup keys and, when it acquires one, moves it
// to PROCESSING and SETTLED with a small result, so that later claims of it
// are settled duplicates. A server without Transition (a baseline handler)
// keeps its claims as they are.
func Settle(ctx context.Context, cfg Config) error {
	cc, err := grpc.NewClient(cfg.Addrs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	c := pb.NewClaimServiceClient(cc)
	ctx = withToken(ctx, cfg.Token)
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range settleWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(cfg.DupKeys); i = next.Add(1) - 1 {
				key := cfg.DupPrefix + "-" + strconv.FormatInt(i, 10)
				if err := settleKey(ctx, c, cfg, key); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func settleKey(ctx context.Context, c pb.ClaimServiceClient, cfg Config, key string) error {
	claim, err := c.Claim(ctx, &pb.ClaimRequest{Namespace: cfg.Namespace, Provider: cfg.Provider,
		Key: &pb.ClaimRequest_EventId{EventId: key}, Holder: cfg.Holder})
	if err != nil {
		return fmt.Errorf("Claim(%q): %w", key, err)
	}
	if claim.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
		return nil // settled already (or held by someone else)
	}
	for _, to := range []pb.EventState{pb.EventState_EVENT_STATE_PROCESSING, pb.EventState_EVENT_STATE_SETTLED} {
		req := &pb.TransitionRequest{Namespace: cfg.Namespace, Provider: cfg.Provider, Key: key,
			FencingToken: claim.GetFencingToken(), LeaseSecret: claim.GetLeaseSecret(), To: to}
		if to == pb.EventState_EVENT_STATE_SETTLED {
			req.Result = []byte(`{"charge":"ch_` + key + `"}`)
		}
		if _, err := c.Transition(ctx, req); err != nil {
			if status.Code(err) == codes.Unimplemented {
				return nil
			}
			return fmt.Errorf("Transition(%q, %v): %w", key, to, err)
		}
	}
	return nil
}
