package claimd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"

	"github.com/claimd/claimd/clients/go/claimd"
	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// charge is a typed result: nested values, a time, a pointer.
type charge struct {
	ID       string            `json:"id"`
	Amount   int64             `json:"amount"`
	At       time.Time         `json:"at"`
	Meta     map[string]string `json:"meta"`
	Refunded *bool             `json:"refunded"`
}

// TestIdempotentReturnsTheTypedValue: the first call runs fn and returns its
// value; duplicates return the same value, decoded, without running fn, and
// claimd stores it as compact JSON with <, > and & unescaped.
func TestIdempotentReturnsTheTypedValue(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	no := false
	want := charge{ID: "ch_1", Amount: 1250, At: time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC), Meta: map[string]string{"note": "a<b & ü"}, Refunded: &no}
	var runs atomic.Int32
	fn := func(_ context.Context, cl claimd.Claim) (charge, error) {
		runs.Add(1)
		return want, nil
	}
	for i := range 3 {
		got, err := claimd.Idempotent(ctx, c, stripe(id), nil, fn)
		if err != nil {
			t.Fatalf("call %d: Idempotent(%q) error = %v", i+1, id, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("call %d: Idempotent(%q) mismatch (-want +got):\n%s", i+1, id, diff)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times for %q, want 1", n, id)
	}
	rec, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
	if err != nil {
		t.Fatal(err)
	}
	const stored = `{"id":"ch_1","amount":1250,"at":"2026-12-03T08:00:00Z","meta":{"note":"a<b & ü"},"refunded":false}`
	if rec.GetState() != pb.EventState_EVENT_STATE_SETTLED || string(rec.GetResult()) != stored {
		t.Errorf("record of %q = %v %s, want SETTLED %s", id, rec.GetState(), rec.GetResult(), stored)
	}
}

// upper is a user Codec: text, upper-cased on the way in.
type upper struct{}

func (upper) Encode(s string) ([]byte, error) { return []byte(strings.ToUpper(s)), nil }
func (upper) Decode(b []byte) (string, error) { return "decoded:" + string(b), nil }

// TestIdempotentUserCodec: a Codec replaces JSON both ways.
func TestIdempotentUserCodec(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	fn := func(context.Context, claimd.Claim) (string, error) { return "paid", nil }
	first, err := claimd.Idempotent[string](ctx, c, stripe(id), upper{}, fn)
	if err != nil || first != "paid" {
		t.Fatalf("Idempotent(%q) first = %q, %v; want paid, nil", id, first, err)
	}
	dup, err := claimd.Idempotent[string](ctx, c, stripe(id), upper{}, fn)
	if err != nil || dup != "decoded:PAID" {
		t.Errorf("Idempotent(%q) duplicate = %q, %v; want decoded:PAID (the codec's Decode of the stored bytes)", id, dup, err)
	}
}

// TestIdempotentErrorsPropagate: fn's error is returned and releases the key
// (the next call runs fn); a Permanent error fails the key, and every
// duplicate returns a *FailedError with its text.
func TestIdempotentErrorsPropagate(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)

	id := eventID(t)
	boom := errors.New("ledger unavailable")
	var runs atomic.Int32
	failOnce := func(context.Context, claimd.Claim) (int, error) {
		if runs.Add(1) == 1 {
			return 0, boom
		}
		return 7, nil
	}
	if _, err := claimd.Idempotent(ctx, c, stripe(id), nil, failOnce); !errors.Is(err, boom) {
		t.Fatalf("Idempotent(%q) first error = %v, want fn's", id, err)
	}
	if got, err := claimd.Idempotent(ctx, c, stripe(id), nil, failOnce); err != nil || got != 7 {
		t.Errorf("Idempotent(%q) after a released failure = %d, %v; want 7 from a second run", id, got, err)
	}

	perm := eventID(t)
	declined := func(context.Context, claimd.Claim) (int, error) {
		return 0, claimd.Permanent(errors.New("card_declined"))
	}
	for i := range 2 {
		_, err := claimd.Idempotent(ctx, c, stripe(perm), nil, declined)
		var failed *claimd.FailedError
		if !errors.As(err, &failed) || failed.Text != "card_declined" {
			t.Errorf("call %d: Idempotent(%q) error = %v, want *FailedError card_declined", i+1, perm, err)
		}
	}
}

// TestIdempotentNotStorable: a value the codec cannot encode, or one over
// MaxResultBytes, is ErrResultNotStorable before anything is settled; the
// key is neither released nor settled empty, so the next delivery finds it
// in progress.
func TestIdempotentNotStorable(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	cases := []struct {
		desc string
		fn   func(context.Context, claimd.Claim) (any, error)
	}{
		{"a channel", func(context.Context, claimd.Claim) (any, error) { return map[string]any{"c": make(chan int)}, nil }},
		{"over 64 KiB", func(context.Context, claimd.Claim) (any, error) {
			return strings.Repeat("x", claimd.MaxResultBytes+1), nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			id := eventID(t)
			if _, err := claimd.Idempotent(ctx, c, stripe(id), nil, tc.fn); !errors.Is(err, claimd.ErrResultNotStorable) {
				t.Fatalf("Idempotent(%q) error = %v, want ErrResultNotStorable", id, err)
			}
			rec, err := c.Get(ctx, claimd.Ref{Namespace: namespace, Provider: "stripe", Key: id})
			if err != nil {
				t.Fatal(err)
			}
			if rec.GetState() != pb.EventState_EVENT_STATE_PROCESSING || rec.GetReleased() || len(rec.GetResult()) != 0 {
				t.Errorf("record of %q = %v released=%v result %d bytes, want PROCESSING, kept, nothing stored",
					id, rec.GetState(), rec.GetReleased(), len(rec.GetResult()))
			}
			_, err = claimd.Idempotent(ctx, c, stripe(id), nil, tc.fn)
			var notRun *claimd.NotRunError
			if !errors.As(err, &notRun) || notRun.Outcome.Disposition != claimd.InProgress {
				t.Errorf("Idempotent(%q) again error = %v, want *NotRunError in_progress", id, err)
			}
		})
	}
}

// TestPayloadDigest: a digest of the part a duplicate must repeat lets the
// rest change (DUPLICATE) and catches a change of that part
// (PAYLOAD_MISMATCH, a *NotRunError matching ErrPayloadMismatch); key order
// does not change it.
func TestPayloadDigest(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	c := dial(t, shared.Addr)
	id := eventID(t)
	claim := func(part any) claimd.ClaimRequest {
		d, err := claimd.PayloadDigest(part)
		if err != nil {
			t.Fatal(err)
		}
		r := stripe(id)
		r.PayloadSHA256 = d
		return r
	}
	fn := func(context.Context, claimd.Claim) (string, error) { return "ok", nil }
	if _, err := claimd.Idempotent(ctx, c, claim(map[string]any{"amount": 10, "currency": "eur"}), nil, fn); err != nil {
		t.Fatal(err)
	}
	type part struct {
		Currency string `json:"currency"`
		Amount   int    `json:"amount"`
	}
	if got, err := claimd.Idempotent(ctx, c, claim(part{"eur", 10}), nil, fn); err != nil || got != "ok" {
		t.Errorf("Idempotent(%q, same part in another key order) = %q, %v; want the duplicate's ok", id, got, err)
	}
	_, err := claimd.Idempotent(ctx, c, claim(part{"eur", 11}), nil, fn)
	if !errors.Is(err, claimd.ErrPayloadMismatch) {
		t.Errorf("Idempotent(%q, another amount) error = %v, want ErrPayloadMismatch", id, err)
	}
}

// countClaims is a client interceptor that counts the Claim calls that
// reach the connection.
func countClaims(n *atomic.Int32) claimd.Option {
	return claimd.WithDialOptions(grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/Claim") {
				n.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
}

// TestLocalCache: with WithLocalCache, the duplicates of a delivery this
// client settled are answered without a Claim reaching claimd, with the
// stored result; another payload, an entity lifecycle and a raw delivery
// still ask, and without the option every duplicate asks.
func TestLocalCache(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	var asked atomic.Int32
	c := dial(t, shared.Addr, claimd.WithLocalCache(16), countClaims(&asked))
	id := eventID(t)
	digest, err := claimd.PayloadDigest(map[string]int{"amount": 10})
	if err != nil {
		t.Fatal(err)
	}
	first := stripe(id)
	first.PayloadSHA256 = digest
	fn := func(context.Context, claimd.Claim) ([]byte, error) { return []byte(`{"ok":true}`), nil }
	if out := c.Guard(ctx, first, fn); out.Disposition != claimd.Settled {
		t.Fatalf("Guard(%q) = %v, want settled", id, out.Disposition)
	}
	for i := range 3 {
		out := c.Guard(ctx, first, fn)
		if out.Disposition != claimd.Duplicate || string(out.Body) != `{"ok":true}` || !out.Claim.Cached {
			t.Errorf("duplicate %d of %q = %v %s cached=%v, want a cached duplicate with the result", i+1, id, out.Disposition, out.Body, out.Claim.Cached)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("Claims sent for %q = %d, want 1 (duplicates answered from the cache)", id, n)
	}

	other := stripe(id)
	other.PayloadSHA256 = make([]byte, 32)
	other.PayloadSHA256[0] = 1
	if out := c.Guard(ctx, other, fn); out.Disposition != claimd.PayloadMismatch || out.Claim.Cached {
		t.Errorf("Guard(%q, another payload) = %v cached=%v, want claimd's payload_mismatch", id, out.Disposition, out.Claim.Cached)
	}

	// Another process's settle is learned from claimd, and then kept.
	plain := dial(t, shared.Addr)
	id2 := eventID(t)
	plain.Guard(ctx, stripe(id2), fn)
	before := asked.Load()
	for range 2 {
		if out := c.Guard(ctx, stripe(id2), fn); out.Disposition != claimd.Duplicate {
			t.Fatalf("Guard(%q) = %v, want duplicate", id2, out.Disposition)
		}
	}
	if n := asked.Load() - before; n != 1 {
		t.Errorf("Claims sent for %q's two duplicates = %d, want 1 (the second from the cache)", id2, n)
	}

	var uncached atomic.Int32
	off := dial(t, shared.Addr, countClaims(&uncached))
	for range 2 {
		if out := off.Guard(ctx, stripe(id), fn); out.Disposition != claimd.Duplicate || out.Claim.Cached {
			t.Errorf("Guard(%q) without a cache = %v cached=%v, want claimd's duplicate", id, out.Disposition, out.Claim.Cached)
		}
	}
	if n := uncached.Load(); n != 2 {
		t.Errorf("Claims sent without a cache = %d, want 2", n)
	}
}

// BenchmarkDuplicate measures the client's cost of one duplicate of a
// settled delivery against a real claimd, with and without the local cache:
// go test ./claimd/ -run '^$' -bench Duplicate -benchtime 2000x
func BenchmarkDuplicate(b *testing.B) {
	for _, size := range []int{0, 1024} {
		b.Run(fmt.Sprintf("local_cache=%d", size), func(b *testing.B) {
			ctx := context.Background()
			c, err := claimd.Dial(ctx, shared.Addr, claimd.WithLogger(quiet), claimd.WithLocalCache(size))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			id := fmt.Sprintf("evt_bench_%d_%d", size, time.Now().UnixNano())
			fn := func(context.Context, claimd.Claim) ([]byte, error) { return []byte(`{"ok":true}`), nil }
			if out := c.Guard(ctx, stripe(id), fn); out.Disposition != claimd.Settled {
				b.Fatalf("Guard(%q) = %v, want settled", id, out.Disposition)
			}
			b.ResetTimer()
			for range b.N {
				if out := c.Guard(ctx, stripe(id), fn); out.Disposition != claimd.Duplicate {
					b.Fatalf("Guard(%q) = %v, want duplicate", id, out.Disposition)
				}
			}
		})
	}
}

// TestJSONCodecFollowsTheResultRule: bytes as they are, a string as its
// UTF-8 (as the other guards store them), anything else as compact JSON.
func TestJSONCodecFollowsTheResultRule(t *testing.T) {
	if b, _ := (claimd.JSONCodec[string]{}).Encode("paid <ok>"); string(b) != "paid <ok>" {
		t.Errorf("JSONCodec[string].Encode = %q, want the text itself", b)
	}
	if s, _ := (claimd.JSONCodec[string]{}).Decode([]byte("123")); s != "123" {
		t.Errorf("JSONCodec[string].Decode(123) = %q, want the text", s)
	}
	if b, _ := (claimd.JSONCodec[[]byte]{}).Encode([]byte{0xff, 0}); string(b) != "\xff\x00" {
		t.Errorf("JSONCodec[[]byte].Encode = %q, want the bytes", b)
	}
	if _, err := (claimd.JSONCodec[string]{}).Encode("\xff"); err == nil {
		t.Errorf("JSONCodec[string].Encode(invalid UTF-8) error = nil, want one")
	}
	if b, _ := (claimd.JSONCodec[map[string]any]{}).Encode(map[string]any{"b": 1, "a": "<&>"}); string(b) != `{"a":"<&>","b":1}` {
		t.Errorf("JSONCodec[map].Encode = %s", b)
	}
	if v, err := (claimd.JSONCodec[*charge]{}).Decode(nil); v != nil || err != nil {
		t.Errorf("JSONCodec[*charge].Decode(empty) = %v, %v; want nil, nil", v, err)
	}
}
