package claimd_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/claimd/claimd/clients/go/claimd"
	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

func TestDialUnreachable(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	start := time.Now()
	_, err := claimd.Dial(context.Background(), addr, claimd.WithConnectTimeout(500*time.Millisecond))
	if !errors.Is(err, claimd.ErrUnavailable) {
		t.Fatalf("Dial(%s) = %v, want an error matching ErrUnavailable", addr, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Dial(%s) took %v, want about the 500ms connect timeout", addr, took)
	}
}

// TestClaimLifecycle walks one key through the typed calls: acquire,
// in progress, release, re-acquire, settle, duplicate.
func TestClaimLifecycle(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	req := claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id, Holder: "pod-a"}

	type view struct {
		Outcome pb.Outcome
		Reason  pb.Reason
		Key     string
		Token   uint64
		State   pb.EventState
		Result  string
	}
	see := func(cl claimd.Claim) view {
		return view{cl.GetOutcome(), cl.GetReason(), cl.GetKey(), cl.GetFencingToken(), cl.GetState(), string(cl.GetResult())}
	}
	claim := func(desc string, want view) claimd.Claim {
		t.Helper()
		cl, err := c.Claim(ctx, req)
		if err != nil {
			t.Fatalf("%s: Claim(%q) = %v", desc, id, err)
		}
		if diff := cmp.Diff(want, see(cl)); diff != "" {
			t.Fatalf("%s: Claim(%q) mismatch (-want +got):\n%s", desc, id, diff)
		}
		return cl
	}

	first := claim("first", view{pb.Outcome_OUTCOME_ACQUIRED, claimd.ReasonNew, id, 1, claimd.StateReceived, ""})
	if !first.Acquired() || first.GetHolder() != "pod-a" || first.AttemptID == "" {
		t.Fatalf("first claim = %v (attempt id %q), want acquired by pod-a with an attempt id", first.ClaimResponse, first.AttemptID)
	}
	second := claim("while held", view{pb.Outcome_OUTCOME_IN_PROGRESS, pb.Reason_REASON_UNSPECIFIED, id, 0, claimd.StateReceived, ""})
	if !second.InProgress() {
		t.Fatalf("InProgress() = false for %v", second.GetOutcome())
	}
	if ra := second.RetryAfter(time.Now()); ra < time.Second || ra > 60*time.Second {
		t.Errorf("RetryAfter = %v, want within the 60s stripe lease", ra)
	}

	rec, err := c.Renew(ctx, first.Lease(), 30*time.Second)
	if err != nil {
		t.Fatalf("Renew = %v", err)
	}
	if got := time.Until(rec.GetLeaseExpiresAt().AsTime()); got > 31*time.Second || got < 25*time.Second {
		t.Errorf("Renew(30s) lease ends in %v, want about 30s", got)
	}
	rec, err = c.Release(ctx, first.Lease())
	if err != nil || !rec.GetReleased() {
		t.Fatalf("Release = %v, %v; want a released record", rec, err)
	}

	again := claim("after release", view{pb.Outcome_OUTCOME_ACQUIRED, claimd.ReasonReleased, id, 2, claimd.StateReceived, ""})
	for _, to := range []pb.EventState{claimd.StateProcessing, claimd.StateProcessing} {
		if _, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: again.Lease(), To: to}); err != nil {
			t.Fatalf("Transition(%v) = %v (a repeat must succeed)", to, err)
		}
	}
	rec, changed, err := c.Transition(ctx, claimd.TransitionRequest{Lease: again.Lease(), To: claimd.StateSettled, Result: []byte(`{"ok":true}`)})
	if err != nil || !changed || rec.GetState() != claimd.StateSettled {
		t.Fatalf("Transition(SETTLED) = %v, %v, %v; want a changed SETTLED record", rec, changed, err)
	}
	dup := claim("after settle", view{pb.Outcome_OUTCOME_DUPLICATE, pb.Reason_REASON_UNSPECIFIED, id, 0, claimd.StateSettled, `{"ok":true}`})
	if !dup.Duplicate() {
		t.Fatalf("Duplicate() = false for %v", dup.GetOutcome())
	}

	got, err := c.Get(ctx, dup.Ref())
	if err != nil {
		t.Fatalf("Get = %v", err)
	}
	if got.GetState() != claimd.StateSettled || got.GetFencingToken() != 2 || got.GetAttempt() != 2 {
		t.Errorf("Get = %v, want SETTLED with token 2 after 2 attempts", got)
	}
}

// TestErrors checks that claimd's failures come back as *Error values that
// match the right sentinel, and only it.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)

	// A key settled with token 2, whose token 1 is stale.
	id := eventID(t)
	first, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, first.Lease()); err != nil {
		t.Fatal(err)
	}
	second, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []pb.EventState{claimd.StateProcessing, claimd.StateSettled} {
		if _, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: second.Lease(), To: to}); err != nil {
			t.Fatal(err)
		}
	}

	// An open key, whose token anyone can read with Get.
	open, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: eventID(t)})
	if err != nil {
		t.Fatal(err)
	}
	read, err := c.Get(ctx, open.Ref())
	if err != nil {
		t.Fatal(err)
	}
	stranger := claimd.Lease{Ref: open.Ref(), FencingToken: read.GetFencingToken(), LeaseSecret: []byte("0123456789abcdef")}

	sentinels := []error{claimd.ErrStaleToken, claimd.ErrNotOwner, claimd.ErrInvalidTransition, claimd.ErrResultMismatch, claimd.ErrNotFound,
		claimd.ErrProviderNotFound, claimd.ErrInvalidArgument, claimd.ErrUnavailable}
	tests := []struct {
		desc       string
		call       func() error
		want       error
		wantCode   codes.Code
		wantReason string
	}{
		{
			desc: "transition of a settled record",
			call: func() error {
				_, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: second.Lease(), To: claimd.StateProcessing})
				return err
			},
			want: claimd.ErrInvalidTransition, wantCode: codes.FailedPrecondition, wantReason: claimd.ErrorReasonInvalidTransition,
		},
		{
			desc: "settle repeated with another result",
			call: func() error {
				_, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: second.Lease(), To: claimd.StateSettled, Result: []byte("another")})
				return err
			},
			want: claimd.ErrResultMismatch, wantCode: codes.FailedPrecondition, wantReason: claimd.ErrorReasonResultMismatch,
		},
		{
			desc: "renew with a stale token",
			call: func() error {
				_, err := c.Renew(ctx, first.Lease(), 0)
				return err
			},
			want: claimd.ErrStaleToken, wantCode: codes.Aborted, wantReason: claimd.ErrorReasonStaleToken,
		},
		{
			desc: "transition with the token from Get and a made-up secret",
			call: func() error {
				_, _, err := c.Transition(ctx, claimd.TransitionRequest{Lease: stranger, To: claimd.StateProcessing})
				return err
			},
			want: claimd.ErrNotOwner, wantCode: codes.PermissionDenied, wantReason: claimd.ErrorReasonNotOwner,
		},
		{
			desc: "release with the token from Get and no secret",
			call: func() error {
				_, err := c.Release(ctx, claimd.Lease{Ref: open.Ref(), FencingToken: read.GetFencingToken()})
				return err
			},
			want: claimd.ErrInvalidArgument, wantCode: codes.InvalidArgument, wantReason: claimd.ErrorReasonInvalidArgument,
		},
		{
			desc: "get of a key never claimed",
			call: func() error {
				_, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: eventID(t)})
				return err
			},
			want: claimd.ErrNotFound, wantCode: codes.NotFound, wantReason: claimd.ErrorReasonRecordNotFound,
		},
		{
			desc: "claim for an unknown provider",
			call: func() error {
				_, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "nosuchprovider", EventID: eventID(t)})
				return err
			},
			want: claimd.ErrProviderNotFound, wantCode: codes.NotFound, wantReason: claimd.ErrorReasonProviderNotFound,
		},
		{
			desc: "claim with a bad namespace",
			call: func() error {
				_, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: "Billing", Provider: "stripe", EventID: eventID(t)})
				return err
			},
			want: claimd.ErrInvalidArgument, wantCode: codes.InvalidArgument, wantReason: claimd.ErrorReasonInvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			err := tt.call()
			var e *claimd.Error
			if !errors.As(err, &e) {
				t.Fatalf("%s: error = %v (%T), want *claimd.Error", tt.desc, err, err)
			}
			if e.Code != tt.wantCode || e.Reason != tt.wantReason || status.Code(err) != tt.wantCode {
				t.Errorf("%s: code, reason = %v, %q (status.Code %v); want %v, %q", tt.desc, e.Code, e.Reason, status.Code(err), tt.wantCode, tt.wantReason)
			}
			if e.Attempts != 1 {
				t.Errorf("%s: attempts = %d, want 1 (not retryable)", tt.desc, e.Attempts)
			}
			for _, s := range sentinels {
				if got, want := errors.Is(err, s), s == tt.want; got != want {
					t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tt.desc, err, s, got, want)
				}
			}
		})
	}
}

// loseFirstReply is an interceptor that lets the first Claim reach claimd
// and then reports UNAVAILABLE to the client, as if the reply were lost on
// the way back. It records the attempt_id of every Claim sent.
type loseFirstReply struct {
	mu         sync.Mutex
	attemptIDs []string
}

func (l *loseFirstReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	cr, ok := req.(*pb.ClaimRequest)
	if !ok {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attemptIDs = append(l.attemptIDs, cr.GetAttemptId())
	if len(l.attemptIDs) == 1 && err == nil {
		return status.Error(codes.Unavailable, "reply lost (test)")
	}
	return err
}

// TestClaimRetryKeepsAttemptID proves the client's retry of a Claim whose
// reply was lost gets the same ACQUIRED and token, not IN_PROGRESS from its
// own first attempt.
func TestClaimRetryKeepsAttemptID(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	lose := &loseFirstReply{}
	c := dial(t, shared.Addr, claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(lose.intercept)))
	plain := dial(t, shared.Addr)
	id := eventID(t)

	cl, err := c.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id})
	if err != nil {
		t.Fatalf("Claim(%q) = %v", id, err)
	}
	if !cl.Acquired() || cl.GetReason() != claimd.ReasonNew || cl.GetFencingToken() != 1 {
		t.Fatalf("Claim(%q) after a lost reply = %v %v token %d, want ACQUIRED NEW token 1", id, cl.GetOutcome(), cl.GetReason(), cl.GetFencingToken())
	}
	if len(lose.attemptIDs) != 2 || lose.attemptIDs[0] == "" || lose.attemptIDs[0] != lose.attemptIDs[1] || lose.attemptIDs[0] != cl.AttemptID {
		t.Fatalf("attempt ids sent = %q, want the same non-empty id (%q) twice", lose.attemptIDs, cl.AttemptID)
	}
	// The retry's answer carries the lease secret of the first attempt's
	// acquisition: the owner can write.
	if _, _, err := plain.Transition(ctx, claimd.TransitionRequest{Lease: cl.Lease(), To: claimd.StateProcessing}); err != nil {
		t.Fatalf("Transition with the retried claim's lease = %v", err)
	}

	// Another logical claim (a fresh attempt id) is told the truth.
	other, err := plain.Claim(ctx, claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: id})
	if err != nil {
		t.Fatal(err)
	}
	if !other.InProgress() {
		t.Errorf("Claim(%q) with a new attempt id = %v, want IN_PROGRESS", id, other.GetOutcome())
	}
}

// TestRetryBounded checks which failures are retried and that retries stop
// at MaxAttempts.
func TestRetryBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc         string
		fail         error // what the interceptor answers instead of calling claimd
		wantAttempts int
		want         error
	}{
		{desc: "unavailable is retried up to MaxAttempts", fail: status.Error(codes.Unavailable, "down (test)"), wantAttempts: 3, want: claimd.ErrUnavailable},
		{desc: "a timed-out attempt is retried", fail: status.Error(codes.DeadlineExceeded, "slow (test)"), wantAttempts: 3, want: claimd.ErrUnavailable},
		{desc: "failed precondition is not retried", fail: status.Error(codes.FailedPrecondition, "no (test)"), wantAttempts: 1},
		{desc: "internal is not retried", fail: status.Error(codes.Internal, "bug (test)"), wantAttempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var ids []string
			failing := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				mu.Lock()
				ids = append(ids, req.(*pb.ClaimRequest).GetAttemptId())
				mu.Unlock()
				return tt.fail
			}
			c := dial(t, shared.Addr, claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(failing)))
			_, err := c.Claim(ctxT(t), claimd.ClaimRequest{Namespace: namespace, Provider: "stripe", EventID: eventID(t)})
			var e *claimd.Error
			if !errors.As(err, &e) || e.Attempts != tt.wantAttempts || len(ids) != tt.wantAttempts {
				t.Fatalf("%s: Claim = %v (attempts %d, sent %d), want %d attempts", tt.desc, err, attemptsOf(e), len(ids), tt.wantAttempts)
			}
			for _, id := range ids {
				if id != ids[0] {
					t.Errorf("%s: attempt ids %q differ, want one id per logical claim", tt.desc, ids)
				}
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("%s: errors.Is(%v, %v) = false", tt.desc, err, tt.want)
			}
		})
	}
}

func attemptsOf(e *claimd.Error) int {
	if e == nil {
		return 0
	}
	return e.Attempts
}

// TestLeaseNeverPrintsItsSecret formats a Lease the ways a caller might log
// it: none shows the secret, in any encoding.
func TestLeaseNeverPrintsItsSecret(t *testing.T) {
	secret := []byte("S3CR3T-0123456789")
	l := claimd.Lease{Ref: claimd.Ref{Namespace: "billing", Provider: "stripe", Key: "evt_1"}, FencingToken: 7, LeaseSecret: secret}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("lease", "lease", l)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("lease", "lease", l)
	for _, out := range []string{fmt.Sprint(l), fmt.Sprintf("%v %+v %s %#v", l, l, l, l), buf.String()} {
		for _, enc := range []string{string(secret), base64.StdEncoding.EncodeToString(secret), hex.EncodeToString(secret)} {
			if strings.Contains(out, enc) {
				t.Errorf("formatted Lease %q shows its secret", out)
			}
		}
		if !strings.Contains(out, "evt_1") || !strings.Contains(out, "7") {
			t.Errorf("formatted Lease %q, want its key and token", out)
		}
	}
}
