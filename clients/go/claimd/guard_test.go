package claimd_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimd/claimd/clients/go/claimd"
	"github.com/claimd/claimd/clients/go/claimdtest"
	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// effects counts side effects and remembers the claims fn was given.
type effects struct {
	mu     sync.Mutex
	claims []claimd.Claim
}

func (e *effects) record(c claimd.Claim) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.claims = append(e.claims, c)
	return len(e.claims)
}

func (e *effects) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.claims)
}

// succeed is a GuardFunc whose side effect is counting itself.
func (e *effects) succeed(ctx context.Context, c claimd.Claim) ([]byte, error) {
	n := e.record(c)
	return []byte(fmt.Sprintf(`{"charge":"ch_%d"}`, n)), nil
}

// summary is the part of an Outcome the tests compare.
type summary struct {
	Status      int
	Body        string
	Disposition claimd.Disposition
	Ran         bool
}

func sum(o claimd.Outcome) summary {
	return summary{o.Status, string(o.Body), o.Disposition, o.Ran}
}

func stripe(id string) claimd.ClaimRequest {
	return claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id}
}

func TestGuardDuplicateDelivery(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	var fx effects

	want := []summary{
		{Status: 200, Body: `{"charge":"ch_1"}`, Disposition: claimd.Settled, Ran: true},
		{Status: 200, Body: `{"charge":"ch_1"}`, Disposition: claimd.Duplicate},
		{Status: 200, Body: `{"charge":"ch_1"}`, Disposition: claimd.Duplicate},
	}
	for i, w := range want {
		out := c.Guard(ctx, stripe(id), fx.succeed)
		if diff := cmp.Diff(w, sum(out)); diff != "" {
			t.Fatalf("delivery %d: Guard(%q) mismatch (-want +got):\n%s (err %v)", i+1, id, diff, out.Err)
		}
	}
	if n := fx.count(); n != 1 {
		t.Errorf("side effects for %q = %d, want 1", id, n)
	}
	rec, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
	if err != nil || rec.GetState() != claimd.StateSettled || string(rec.GetResult()) != `{"charge":"ch_1"}` {
		t.Errorf("Get(%q) = %v, %v; want SETTLED with the handler's result", id, rec, err)
	}
}

// TestGuardConcurrentDeliveries sends 20 deliveries of one event at once.
// The handler that wins holds on until every other delivery has been
// answered, so all 19 must meet its live lease.
func TestGuardConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	const n = 20
	var (
		fx     effects
		others sync.WaitGroup
		outs   = make(chan claimd.Outcome, n)
	)
	others.Add(n - 1)
	othersDone := make(chan struct{})
	go func() { others.Wait(); close(othersDone) }()
	fn := func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
		fx.record(cl)
		select {
		case <-othersDone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("done"), nil
	}
	for range n {
		go func() {
			out := c.Guard(ctx, stripe(id), fn)
			if !out.Ran {
				others.Done()
			}
			outs <- out
		}()
	}
	got := map[claimd.Disposition]int{}
	for range n {
		out := <-outs
		got[out.Disposition]++
		if out.Disposition == claimd.InProgress && (out.Status != http.StatusConflict || out.RetryAfter < time.Second) {
			t.Errorf("in-progress outcome = %d with Retry-After %v, want 409 with at least 1s", out.Status, out.RetryAfter)
		}
	}
	if diff := cmp.Diff(map[claimd.Disposition]int{claimd.Settled: 1, claimd.InProgress: n - 1}, got); diff != "" {
		t.Errorf("dispositions of %d concurrent Guard(%q) (-want +got):\n%s", n, id, diff)
	}
	if k := fx.count(); k != 1 {
		t.Errorf("side effects for %q = %d, want 1", id, k)
	}
}

func TestGuardRetryableErrorReleases(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	var fx effects
	boom := errors.New("bank timeout")

	out := c.Guard(ctx, stripe(id), func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
		fx.record(cl)
		return nil, boom
	})
	if diff := cmp.Diff(summary{Status: 500, Body: "processing failed; retry later\n", Disposition: claimd.Released, Ran: true}, sum(out)); diff != "" {
		t.Fatalf("Guard(%q) with a failing handler (-want +got):\n%s", id, diff)
	}
	if !errors.Is(out.Err, boom) {
		t.Errorf("Outcome.Err = %v, want the handler's error", out.Err)
	}

	out = c.Guard(ctx, stripe(id), fx.succeed)
	if diff := cmp.Diff(summary{Status: 200, Body: `{"charge":"ch_2"}`, Disposition: claimd.Settled, Ran: true}, sum(out)); diff != "" {
		t.Fatalf("Guard(%q) retry after a release (-want +got):\n%s (err %v)", id, diff, out.Err)
	}
	second := fx.claims[1]
	if second.GetReason() != claimd.ReasonReleased || second.GetFencingToken() != 2 || second.GetState() != claimd.StateProcessing {
		t.Errorf("retry claim = %v token %d state %v, want RELEASED token 2 PROCESSING (the guard claims with Start)", second.GetReason(), second.GetFencingToken(), second.GetState())
	}
}

func TestGuardPermanentError(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	var fx effects
	fail := func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
		fx.record(cl)
		return nil, claimd.Permanent(errors.New("card_declined: " + strings.Repeat("x", 2000)))
	}

	out := c.Guard(ctx, stripe(id), fail)
	if out.Status != 200 || out.Disposition != claimd.Failed || !out.Ran || len(out.Body) != claimd.MaxFailureText || !claimd.IsPermanent(out.Err) {
		t.Fatalf("Guard(%q) with a permanent error = %d %v ran=%v body %d bytes err %v; want 200 failed, ran, %d-byte body, a permanent error",
			id, out.Status, out.Disposition, out.Ran, len(out.Body), out.Err, claimd.MaxFailureText)
	}
	rec, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
	if err != nil || rec.GetState() != claimd.StateFailed || !strings.HasPrefix(string(rec.GetResult()), "card_declined: xx") {
		t.Fatalf("Get(%q) = %v, %v; want FAILED with the error text", id, rec, err)
	}
	dup := c.Guard(ctx, stripe(id), fail)
	if diff := cmp.Diff(summary{Status: 200, Body: string(out.Body), Disposition: claimd.Duplicate}, sum(dup)); diff != "" {
		t.Errorf("Guard(%q) after a permanent failure (-want +got):\n%s", id, diff)
	}
	if n := fx.count(); n != 1 {
		t.Errorf("handler runs for %q = %d, want 1", id, n)
	}
}

// pollGuard repeats Guard until claimd stops answering IN_PROGRESS: polling
// an observable condition within a bound, the way a provider's retries do.
func pollGuard(t *testing.T, c *claimd.Client, req claimd.ClaimRequest, fn claimd.GuardFunc) claimd.Outcome {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := c.Guard(ctxT(t), req, fn)
		if out.Disposition != claimd.InProgress {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("Guard(%q) still IN_PROGRESS after 15s", req.EventID)
		}
		time.Sleep(50 * time.Millisecond) // a poll interval, not synchronisation
	}
}

// TestGuardTakeoverAfterLease: a holder that dies after starting the work
// is taken over once its lease ends, and the new holder learns how far the
// old one got.
func TestGuardTakeoverAfterLease(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)

	// The holder that dies: claims with a 1s lease, starts, never settles.
	dead, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id, Lease: time.Second, Holder: "dead-pod"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: dead.Lease(), To: claimd.StateProcessing}); err != nil {
		t.Fatal(err)
	}

	var fx effects
	out := pollGuard(t, c, stripe(id), fx.succeed)
	if diff := cmp.Diff(summary{Status: 200, Body: `{"charge":"ch_1"}`, Disposition: claimd.Settled, Ran: true}, sum(out)); diff != "" {
		t.Fatalf("Guard(%q) after the holder died (-want +got):\n%s (err %v)", id, diff, out.Err)
	}
	taker := fx.claims[0]
	if !taker.TakenOver() || taker.GetState() != claimd.StateProcessing || taker.GetFencingToken() != 2 {
		t.Errorf("taker's claim = %v state %v token %d, want LEASE_EXPIRED from PROCESSING with token 2", taker.GetReason(), taker.GetState(), taker.GetFencingToken())
	}
	if _, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: dead.Lease(), To: claimd.StateSettled}); !errors.Is(err, claimd.ErrStaleToken) {
		t.Errorf("dead holder's late settle = %v, want ErrStaleToken", err)
	}
}

// TestGuardFailureAfterTakeoverKeepsEvidence: a retryable failure on a key
// taken over from PROCESSING is not released, so the next holder is told
// again that the side effect may have happened.
func TestGuardFailureAfterTakeoverKeepsEvidence(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	req := stripe(id)
	req.Lease = time.Second

	dead, err := c.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: dead.Lease(), To: claimd.StateProcessing}); err != nil {
		t.Fatal(err)
	}
	var fx effects
	out := pollGuard(t, c, req, func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
		fx.record(cl)
		return nil, errors.New("ledger unreachable")
	})
	if diff := cmp.Diff(summary{Status: 500, Body: "processing failed; retry later\n", Disposition: claimd.Unreleased, Ran: true}, sum(out)); diff != "" {
		t.Fatalf("Guard(%q) failing after a takeover (-want +got):\n%s (err %v)", id, diff, out.Err)
	}
	rec, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
	if err != nil || rec.GetReleased() || rec.GetState() != claimd.StateProcessing {
		t.Fatalf("Get(%q) = %v, %v; want PROCESSING and not released", id, rec, err)
	}
	out = pollGuard(t, c, req, fx.succeed)
	if out.Disposition != claimd.Settled {
		t.Fatalf("Guard(%q) after the lease = %v (err %v), want settled", id, out.Disposition, out.Err)
	}
	for i, cl := range fx.claims {
		if !cl.TakenOver() || cl.GetState() != claimd.StateProcessing || cl.GetFencingToken() != uint64(i+2) {
			t.Errorf("claim %d = %v state %v token %d, want LEASE_EXPIRED from PROCESSING with token %d", i+1, cl.GetReason(), cl.GetState(), cl.GetFencingToken(), i+2)
		}
	}
}

// TestGuardHeartbeat: a handler that runs twice its lease keeps the
// key, because Guard renews the lease while it runs.
func TestGuardHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	other := dial(t, shared.Addr)
	id := eventID(t)
	req := stripe(id)
	req.Lease = 2 * time.Second

	var seen []pb.Outcome
	out := c.Guard(ctx, req, func(ctx context.Context, cl claimd.Claim) ([]byte, error) {
		// Work for twice the first lease, asking as another delivery all along.
		until := cl.GetLeaseExpiresAt().AsTime().Add(req.Lease)
		for time.Now().Before(until) {
			o, err := other.Claim(ctx, req)
			if err != nil {
				return nil, err
			}
			seen = append(seen, o.GetOutcome())
			time.Sleep(100 * time.Millisecond) // a poll interval, not synchronisation
		}
		return []byte("long work"), nil
	})
	if out.Disposition != claimd.Settled || out.Err != nil {
		t.Fatalf("Guard(%q) with 4s of work on a 2s lease = %v (err %v), want settled", id, out.Disposition, out.Err)
	}
	for i, o := range seen {
		if o != pb.Outcome_OUTCOME_IN_PROGRESS {
			t.Fatalf("competing claim %d of %d during the work = %v, want IN_PROGRESS throughout", i+1, len(seen), o)
		}
	}
}

// renewGate is an interceptor that fails Renew calls (without sending
// them) while closed, to make a live handler look dead.
type renewGate struct{ closed atomic.Bool }

func (g *renewGate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, ok := req.(*pb.RenewRequest); ok && g.closed.Load() {
		return status.Error(codes.Unavailable, "renew blocked (test)")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestGuardSuperseded: when another delivery took the key over, the next
// renewal cancels the handler's context and Guard does not settle.
func TestGuardSuperseded(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	gate := &renewGate{}
	gate.closed.Store(true)
	c := dial(t, shared.Addr, claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(gate.intercept)))
	other := dial(t, shared.Addr)
	id := eventID(t)
	req := stripe(id)
	req.Lease = time.Second

	var cause error
	out := c.Guard(ctx, req, func(fnCtx context.Context, cl claimd.Claim) ([]byte, error) {
		// With renewals blocked the lease runs out and another delivery
		// takes the key over.
		deadline := time.Now().Add(10 * time.Second)
		for {
			o, err := other.Claim(ctx, req)
			if err != nil {
				return nil, err
			}
			if o.Acquired() {
				break
			}
			if time.Now().After(deadline) {
				return nil, errors.New("no takeover within 10s")
			}
			time.Sleep(50 * time.Millisecond) // a poll interval, not synchronisation
		}
		gate.closed.Store(false)
		select {
		case <-fnCtx.Done():
			cause = context.Cause(fnCtx)
		case <-time.After(10 * time.Second):
			return nil, errors.New("handler context not cancelled within 10s of the takeover")
		}
		return []byte("would settle"), nil
	})
	if diff := cmp.Diff(summary{Status: 409, Body: "delivery taken over by another holder; retry later\n", Disposition: claimd.Superseded, Ran: true}, sum(out)); diff != "" {
		t.Fatalf("Guard(%q) taken over mid-work (-want +got):\n%s (err %v)", id, diff, out.Err)
	}
	if !errors.Is(cause, claimd.ErrStaleToken) || !errors.Is(out.Err, claimd.ErrStaleToken) {
		t.Errorf("context cause = %v, Outcome.Err = %v; want both to match ErrStaleToken", cause, out.Err)
	}
	rec, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
	if err != nil || rec.GetState() == claimd.StateSettled || rec.GetFencingToken() != 2 {
		t.Errorf("Get(%q) = %v, %v; want the taker's unsettled record with token 2", id, rec, err)
	}
}

// TestGuardClaimdDown: when claimd cannot be asked, nothing runs and the
// provider is told to come back (503).
func TestGuardClaimdDown(t *testing.T) {
	t.Parallel()
	stopped := claimdtest.StartT(t, binary)
	before := dial(t, stopped.Addr)
	if err := stopped.Stop(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc   string
		client *claimd.Client
	}{
		{desc: "server stopped after dial", client: before},
		{desc: "closed port, lazy dial", client: dial(t, closedPort(t), claimd.WithLazyConnect())},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var fx effects
			out := tt.client.Guard(ctxT(t), stripe(eventID(t)), fx.succeed)
			if diff := cmp.Diff(summary{Status: 503, Body: "claimd unavailable; retry later\n", Disposition: claimd.Unavailable}, sum(out)); diff != "" {
				t.Errorf("%s: Guard (-want +got):\n%s", tt.desc, diff)
			}
			if !errors.Is(out.Err, claimd.ErrUnavailable) || out.RetryAfter != claimd.UnavailableRetryAfter {
				t.Errorf("%s: Err = %v, RetryAfter = %v; want ErrUnavailable and %v", tt.desc, out.Err, out.RetryAfter, claimd.UnavailableRetryAfter)
			}
			if n := fx.count(); n != 0 {
				t.Errorf("%s: handler ran %d times, want 0", tt.desc, n)
			}
		})
	}
}

func TestGuardPayloadMismatch(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	delivery := func(amount int) claimd.ClaimRequest {
		body := fmt.Sprintf(`{"id":%q,"type":"charge.succeeded","amount":%d}`, id, amount)
		return claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", Delivery: &claimd.Delivery{
			Headers: map[string]string{"Content-Type": "application/json", "Stripe-Signature": "t=1,v1=abc"},
			Body:    []byte(body),
		}}
	}
	var fx effects
	if out := c.Guard(ctx, delivery(100), fx.succeed); out.Disposition != claimd.Settled {
		t.Fatalf("first delivery = %v (err %v), want settled", out.Disposition, out.Err)
	}
	if got := fx.claims[0]; got.GetKey() != id || got.GetKeySource() != pb.KeySource_KEY_SOURCE_BODY_FIELD {
		t.Errorf("derived key = %q from %v, want %q from the body field", got.GetKey(), got.GetKeySource(), id)
	}
	out := c.Guard(ctx, delivery(999), fx.succeed)
	if out.Status != http.StatusUnprocessableEntity || out.Disposition != claimd.PayloadMismatch || out.Ran || !errors.Is(out.Err, claimd.ErrPayloadMismatch) {
		t.Errorf("changed payload = %d %v ran=%v err %v, want 422 payload_mismatch, not run, ErrPayloadMismatch", out.Status, out.Disposition, out.Ran, out.Err)
	}
}

func TestGuardRejected(t *testing.T) {
	t.Parallel()
	c := dial(t, shared.Addr)
	tests := []struct {
		desc       string
		req        claimd.ClaimRequest
		wantStatus int
		want       error
	}{
		{desc: "unknown provider", req: claimd.ClaimRequest{Namespace: namespace, Provider: "nosuchprovider", EventID: "evt_1"}, wantStatus: 500, want: claimd.ErrProviderNotFound},
		// The receiver's own settings are a 500 (GUARD.md row 25): the provider keeps the delivery.
		{desc: "bad namespace", req: claimd.ClaimRequest{Namespace: "Billing", Provider: "stripe", EventID: "evt_1"}, wantStatus: 500, want: claimd.ErrInvalidArgument},
		{desc: "lease over max_lease", req: claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: "evt_1", Lease: time.Hour}, wantStatus: 500, want: claimd.ErrInvalidArgument},
		// Only what claimd says is wrong with the delivery is a 400.
		{desc: "no key", req: claimd.ClaimRequest{Namespace: namespace, Provider: "stripe"}, wantStatus: 400, want: claimd.ErrInvalidArgument},
	}
	for _, tt := range tests {
		var fx effects
		out := c.Guard(ctxT(t), tt.req, fx.succeed)
		if out.Status != tt.wantStatus || out.Disposition != claimd.Rejected || out.Ran || !errors.Is(out.Err, tt.want) || fx.count() != 0 {
			t.Errorf("%s: Guard = %d %v ran=%v err %v, want %d rejected, not run, %v", tt.desc, out.Status, out.Disposition, out.Ran, out.Err, tt.wantStatus, tt.want)
		}
	}
}

// TestGuardPanic: a handler that panics leaves the key to its lease (the
// side effect may have happened), so nothing is released.
func TestGuardPanic(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		c.Guard(ctx, stripe(id), func(context.Context, claimd.Claim) ([]byte, error) { panic("boom") })
	}()
	rec, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
	if err != nil || rec.GetState() != claimd.StateProcessing || rec.GetReleased() {
		t.Errorf("Get(%q) after a panic = %v, %v; want PROCESSING, not released", id, rec, err)
	}
}

// TestGuardOversizedResultNeverReleases: a result claimd cannot store is
// answered to its delivery and settled without it; the key is never given
// back, so the side effect runs once across three deliveries.
func TestGuardOversizedResultNeverReleases(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	big := strings.Repeat("x", claimd.MaxResultBytes+1)
	var fx effects
	fn := func(_ context.Context, cl claimd.Claim) ([]byte, error) {
		fx.record(cl)
		return []byte(big), nil
	}

	want := []summary{
		{Status: 200, Body: big, Disposition: claimd.Settled, Ran: true},
		{Status: 200, Disposition: claimd.Duplicate},
		{Status: 200, Disposition: claimd.Duplicate},
	}
	for i, w := range want {
		out := c.Guard(ctx, stripe(id), fn)
		if diff := cmp.Diff(w, sum(out)); diff != "" {
			t.Fatalf("delivery %d: Guard(%q) mismatch (-want +got):\n%s (err %v)", i+1, id, diff, out.Err)
		}
		if i == 0 && out.Err == nil {
			t.Errorf("Guard(%q).Err = nil, want why the result was not stored", id)
		}
	}
	if n := fx.count(); n != 1 {
		t.Errorf("side effects for %q = %d, want 1", id, n)
	}
}

// TestGuardSettleFailureNeverReleases: once fn returned, a settle that
// fails leaves the key PROCESSING and owned: the next delivery is
// IN_PROGRESS, not a second run.
func TestGuardSettleFailureNeverReleases(t *testing.T) {
	tests := []struct {
		desc string
		fail error
	}{
		{desc: "claimd unavailable", fail: status.Error(codes.Unavailable, "down (test)")},
		{desc: "claimd internal error", fail: status.Error(codes.Internal, "bug (test)")},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			failSettle := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if tr, ok := req.(*pb.TransitionRequest); ok && tr.GetTo() == claimd.StateSettled {
					return tt.fail
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			c := dial(t, shared.Addr, claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(failSettle)))
			other := dial(t, shared.Addr)
			id := eventID(t)
			req := stripe(id)
			req.Lease = time.Minute
			var fx effects

			out := c.Guard(ctx, req, fx.succeed)
			if diff := cmp.Diff(summary{Status: 503, Body: "could not record the outcome; retry later\n", Disposition: claimd.Unsettled, Ran: true}, sum(out)); diff != "" {
				t.Fatalf("%s: Guard(%q) (-want +got):\n%s (err %v)", tt.desc, id, diff, out.Err)
			}
			rec, err := other.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
			if err != nil || rec.GetReleased() || rec.GetState() != claimd.StateProcessing || rec.GetFencingToken() != 1 {
				t.Fatalf("%s: Get(%q) = %v, %v; want PROCESSING, not released, token 1", tt.desc, id, rec, err)
			}
			if again := other.Guard(ctx, req, fx.succeed); again.Disposition != claimd.InProgress {
				t.Errorf("%s: next Guard(%q) = %v (err %v), want in_progress", tt.desc, id, again.Disposition, again.Err)
			}
			if n := fx.count(); n != 1 {
				t.Errorf("%s: side effects for %q = %d, want 1", tt.desc, id, n)
			}
		})
	}
}

func TestOutcomeRespond(t *testing.T) {
	tests := []struct {
		desc           string
		out            claimd.Outcome
		wantStatus     int
		wantRetryAfter string
		wantBody       string
	}{
		{desc: "settled", out: claimd.Outcome{Status: 200, Body: []byte(`{"a":1}`)}, wantStatus: 200, wantBody: `{"a":1}`},
		{desc: "in progress rounds up", out: claimd.Outcome{Status: 409, Body: []byte("x"), RetryAfter: 1500 * time.Millisecond}, wantStatus: 409, wantRetryAfter: "2", wantBody: "x"},
		{desc: "unavailable", out: claimd.Outcome{Status: 503, RetryAfter: claimd.UnavailableRetryAfter}, wantStatus: 503, wantRetryAfter: "5"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		tt.out.Respond(rec)
		if rec.Code != tt.wantStatus || rec.Header().Get("Retry-After") != tt.wantRetryAfter || rec.Body.String() != tt.wantBody {
			t.Errorf("%s: Respond wrote %d, Retry-After %q, body %q; want %d, %q, %q", tt.desc,
				rec.Code, rec.Header().Get("Retry-After"), rec.Body.String(), tt.wantStatus, tt.wantRetryAfter, tt.wantBody)
		}
	}
}

func TestReadDelivery(t *testing.T) {
	tests := []struct {
		desc    string
		body    string
		max     int64
		wantErr bool
	}{
		{desc: "within the limit", body: `{"id":"evt_1"}`, max: 64},
		{desc: "exactly the limit", body: "1234", max: 4},
		{desc: "over the limit", body: "12345", max: 4, wantErr: true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(tt.body))
		r.Header.Add("X-Multi", "a")
		r.Header.Add("X-Multi", "b")
		d, err := claimd.ReadDelivery(r, tt.max)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%s: ReadDelivery = %v, want error %v", tt.desc, err, tt.wantErr)
		}
		if err == nil && (string(d.Body) != tt.body || d.Headers["X-Multi"] != "a, b") {
			t.Errorf("%s: ReadDelivery = body %q, X-Multi %q; want %q, %q", tt.desc, d.Body, d.Headers["X-Multi"], tt.body, "a, b")
		}
	}
}
