package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/chaos"
)

// loadConfig shapes the load of one scenario.
type loadConfig struct {
	prefix      string        // key prefix, unique to the scenario
	groups      int           // keys in flight at once
	racers      int           // callers racing on each key
	maxKeys     int           // stop starting keys after this many
	releaseRate float64       // share of owners that give the key back instead of settling
	callTimeout time.Duration // the deadline of an ordinary call
	provider    string        // of every call; "" is provider
}

// load drives callers through the whole lifecycle of many keys and records
// every call they make.
type load struct {
	cfg     loadConfig
	targets []*target
	h       *chaos.History

	// short, while set, gives each call a deadline this short at most
	// (nanoseconds): replies are lost after the server committed.
	short atomic.Int64

	nextKey  atomic.Int64
	attempts atomic.Int64
	clients  atomic.Int64

	mu         sync.Mutex
	unfinished []string
}

func newLoad(cfg loadConfig, targets []*target) *load {
	if cfg.provider == "" {
		cfg.provider = provider
	}
	return &load{cfg: cfg, targets: targets, h: &chaos.History{}}
}

// run starts keys until stopKeys is done, then waits for every key's
// callers to finish or for hard to be done (those keys are unfinished).
func (l *load) run(stopKeys, hard context.Context) {
	var wg sync.WaitGroup
	for range l.cfg.groups {
		wg.Go(func() {
			for stopKeys.Err() == nil {
				n := l.nextKey.Add(1)
				if int(n) > l.cfg.maxKeys {
					return
				}
				l.key(hard, fmt.Sprintf("%s-%05d", l.cfg.prefix, n))
			}
		})
	}
	wg.Wait()
}

// keys is how many keys the load started.
func (l *load) keys() int { return min(int(l.nextKey.Load()), l.cfg.maxKeys) }

// key races cfg.racers callers on one key until each has seen it settled.
func (l *load) key(ctx context.Context, key string) {
	var wg sync.WaitGroup
	var unfinished atomic.Bool
	for range l.cfg.racers {
		client := int(l.clients.Add(1))
		wg.Go(func() {
			if !l.caller(ctx, client, key) && ctx.Err() != nil {
				unfinished.Store(true)
			}
		})
	}
	wg.Wait()
	if unfinished.Load() {
		l.mu.Lock()
		l.unfinished = append(l.unfinished, key)
		l.mu.Unlock()
	}
}

func (l *load) newAttempt(client int) string {
	return fmt.Sprintf("c%d-a%d", client, l.attempts.Add(1))
}

// caller is one webhook handler's view of a key: each delivery claims with
// an attempt_id of its own, retries its own failed calls with the same one,
// and answers IN_PROGRESS by waiting for the provider's next delivery (a new
// attempt). It returns true once it saw the key settled (or settled it),
// false when it stopped early (ctx done, or an answer that ends the run of
// this caller; the checks report it).
func (l *load) caller(ctx context.Context, client int, key string) bool {
	attempt := l.newAttempt(client)
	for ctx.Err() == nil {
		op, resp := l.claim(ctx, client, key, attempt, false)
		switch {
		case !op.Answered():
			if !chaos.Retryable(op.Code) {
				return false
			}
			pause(ctx, 10*time.Millisecond, 40*time.Millisecond)
			continue // the same delivery retries its own call
		case op.Outcome == pb.Outcome_OUTCOME_DUPLICATE:
			return true
		case op.Outcome == pb.Outcome_OUTCOME_ACQUIRED:
			released, ok := l.own(ctx, client, key, resp)
			if !ok {
				return false
			}
			if !released {
				return true
			}
		}
		// IN_PROGRESS (or the key given back): the provider delivers again later.
		pause(ctx, 5*time.Millisecond, 25*time.Millisecond)
		attempt = l.newAttempt(client)
	}
	return false
}

// own is the owner's work: PROCESSING, the side effect, then SETTLED with a
// result — or, at releaseRate, Release (the side effect did not happen).
// Each fenced call is retried with the same token until it is answered.
//
// grant is kept whole: its lease_secret goes with the token on every fenced
// call (see call).
func (l *load) own(ctx context.Context, client int, key string, grant *pb.ClaimResponse) (released, ok bool) {
	token := grant.GetFencingToken()
	if !l.fenced(ctx, client, key, chaos.Op{Kind: chaos.KindTransition, Token: token, To: pb.EventState_EVENT_STATE_PROCESSING}, grant) {
		return false, false
	}
	pause(ctx, time.Millisecond, 5*time.Millisecond) // the side effect
	if rand.Float64() < l.cfg.releaseRate {
		return true, l.fenced(ctx, client, key, chaos.Op{Kind: chaos.KindRelease, Token: token}, grant)
	}
	result := fmt.Sprintf("%s/t%d/c%d", key, token, client)
	return false, l.fenced(ctx, client, key, chaos.Op{Kind: chaos.KindTransition, Token: token, To: pb.EventState_EVENT_STATE_SETTLED, Result: result}, grant)
}

// fenced sends req until it is answered; ok is false when the answer (or a
// non-retryable failure) was not the one an owner expects.
func (l *load) fenced(ctx context.Context, client int, key string, req chaos.Op, grant *pb.ClaimResponse) bool {
	for ctx.Err() == nil {
		op := l.call(ctx, client, key, req, grant)
		if op.Answered() {
			return op.Code == codes.OK
		}
		if !chaos.Retryable(op.Code) {
			return false
		}
		pause(ctx, 10*time.Millisecond, 40*time.Millisecond)
	}
	return false
}

// pick chooses the replica of one call: calls spread over every replica, so
// a retry usually lands on another one.
func (l *load) pick() *target { return l.targets[rand.IntN(len(l.targets))] }

// deadline is the call's timeout: ordinary, or during the short-deadline
// fault a random one short enough that replies are lost after commit.
func (l *load) deadline() time.Duration {
	if s := l.short.Load(); s > 0 {
		return time.Duration(100_000 + rand.Int64N(s))
	}
	return l.cfg.callTimeout
}

// claim sends one Claim and records it.
func (l *load) claim(ctx context.Context, client int, key, attempt string, probe bool) (chaos.Op, *pb.ClaimResponse) {
	return l.claimOn(ctx, l.pick(), client, key, attempt, probe)
}

func (l *load) claimOn(ctx context.Context, t *target, client int, key, attempt string, probe bool) (chaos.Op, *pb.ClaimResponse) {
	op := chaos.Op{Client: client, Key: key, Replica: t.name, Kind: chaos.KindClaim, AttemptID: attempt, Probe: probe}
	d := l.deadline()
	if probe {
		d = l.cfg.callTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	op.Deadline = int64(d)
	op.Invoke = time.Now().UnixNano()
	resp, err := t.c.Claim(cctx, &pb.ClaimRequest{
		Namespace: namespace, Provider: l.cfg.provider,
		Key:       &pb.ClaimRequest_EventId{EventId: key},
		Holder:    attempt, // the holder names the delivery: an IN_PROGRESS says whose
		AttemptId: attempt,
	})
	op.Complete = time.Now().UnixNano()
	fillErr(&op, err)
	op.Cutoff = err != nil && cutoff(ctx)
	if err == nil {
		op.Outcome, op.Reason, op.AckToken = resp.GetOutcome(), resp.GetReason(), resp.GetFencingToken()
		op.AckResult, op.AckHolder, op.AckState, op.ServedBy = string(resp.GetResult()), resp.GetHolder(), resp.GetState(), resp.GetServedBy()
	}
	op.ID = l.h.Add(op)
	return op, resp
}

// call sends one fenced call (Transition or Release) for the owner of grant
// and records it.
// grant is the owner's ACQUIRED answer, kept whole: every fenced call
// presents its fencing_token and lease_secret.
func (l *load) call(ctx context.Context, client int, key string, req chaos.Op, grant *pb.ClaimResponse) chaos.Op {
	t := l.pick()
	op := req
	op.Client, op.Key, op.Replica = client, key, t.name
	d := l.deadline()
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	op.Deadline = int64(d)
	var rec *pb.Record
	var err error
	op.Invoke = time.Now().UnixNano()
	switch req.Kind {
	case chaos.KindTransition:
		var resp *pb.TransitionResponse
		resp, err = t.c.Transition(cctx, &pb.TransitionRequest{
			Namespace: namespace, Provider: l.cfg.provider, Key: key,
			FencingToken: req.Token, To: req.To, Result: []byte(req.Result),
			LeaseSecret: grant.GetLeaseSecret(), // the owner's capability, with the token
		})
		rec, op.Changed = resp.GetRecord(), resp.GetChanged()
	case chaos.KindRelease:
		var resp *pb.ReleaseResponse
		resp, err = t.c.Release(cctx, &pb.ReleaseRequest{
			Namespace: namespace, Provider: l.cfg.provider, Key: key, FencingToken: req.Token,
			LeaseSecret: grant.GetLeaseSecret(), // the owner's capability, with the token
		})
		rec = resp.GetRecord()
	}
	op.Complete = time.Now().UnixNano()
	fillErr(&op, err)
	op.Cutoff = err != nil && cutoff(ctx)
	if err == nil {
		op.AckToken, op.AckState, op.AckResult, op.Released = rec.GetFencingToken(), rec.GetState(), string(rec.GetResult()), rec.GetReleased()
	}
	op.ID = l.h.Add(op)
	return op
}

// fillErr records a call's error: its code, ErrorInfo reason and message.
func fillErr(op *chaos.Op, err error) {
	if err == nil {
		op.Code = codes.OK
		return
	}
	st, ok := status.FromError(err)
	if !ok {
		op.Code, op.Message = codes.Unknown, err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			op.Code = codes.DeadlineExceeded
		}
		return
	}
	op.Code, op.Message = st.Code(), st.Message()
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			op.ErrReason = info.GetReason()
		}
	}
}

// pause sleeps a random time in [lo, hi): a client's backoff or the time a
// side effect takes, not a stand-in for synchronisation.
func pause(ctx context.Context, lo, hi time.Duration) {
	t := time.NewTimer(lo + time.Duration(rand.Int64N(int64(hi-lo))))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// cutoff reports whether the run's own bound (ctx) has ended: a call that
// failed then was cut off by the suite, not failed by the server. The
// deadline is compared too, because a call's own timer may fire at the
// same instant before ctx's.
func cutoff(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
