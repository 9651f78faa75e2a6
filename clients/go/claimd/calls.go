package claimd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// Delivery is a raw webhook delivery; claimd derives the key from it by the
// provider's key rule (and hashes the body for payload checks).
type Delivery struct {
	// Headers as received; one value per name (ReadDelivery joins repeats).
	Headers map[string]string
	// Body byte for byte as received.
	Body []byte
}

// ClaimRequest asks whether a delivery is the first. Set exactly one of
// EventID or Delivery.
type ClaimRequest struct {
	Namespace string // required: the calling service, e.g. "billing"
	Provider  string // required: a registered provider or group, e.g. "stripe"
	EventID   string // the provider's event id
	Delivery  *Delivery
	// Scope optionally qualifies the unit of work; it becomes part of the key.
	Scope string
	// PayloadSHA256 is optional; claimd computes it from Delivery.Body.
	PayloadSHA256 []byte
	// Lease is how long the holder may work before another delivery may take
	// over; zero means the provider's default.
	Lease time.Duration
	// Holder is kept for audit; empty means the client's (WithHolder).
	Holder string
	// AttemptID identifies this logical claim across the client's retries;
	// empty means a fresh random one per Claim call.
	AttemptID string
	// Wait, when the key is in progress, waits up to this long (at most
	// 30s) for the holder to finish and answers DUPLICATE instead.
	Wait time.Duration
	// Window asks for a dedup window longer than the provider's (its retry
	// horizon plus margin), for callers whose own retries outlive the
	// provider's; zero means the provider's. claimd refuses one shorter
	// than the provider's or over 400 days (INVALID_ARGUMENT). It applies
	// when the claim opens a window; a duplicate is answered within the
	// window its first claim opened (the answer's Ttl says which).
	Window time.Duration
	// EntityID and EventType place an event sent by EventID in the
	// provider's entity lifecycle that declares EventType (both or neither;
	// a Delivery's are read from it by the provider's rules unless given).
	// claimd then orders the event against its entity: DEFERRED while it
	// arrived too early, SUPERSEDED once the entity is past it.
	EntityID  string
	EventType string
	// Start, when the claim acquires, records it already in PROCESSING:
	// one call instead of Claim and Transition for work that starts at
	// once.
	Start bool
}

// Ref names a record: what Get reads.
type Ref struct {
	Namespace string
	Provider  string
	Key       string // the canonical key Claim returned (scope included)
}

// Lease is the owner's handle on a claimed record, and what Transition,
// Renew and Release present: the record's name, its fencing token and the
// lease secret that only the ACQUIRED answer carried. The token is a
// sequence number anyone may read (Get shows it); the secret is what proves
// ownership, so keep a Lease as private as a password while the claim runs.
// Take it from Claim.Lease; String, GoString and LogValue leave the secret
// out, so a logged Lease does not leak it.
type Lease struct {
	Ref
	FencingToken uint64
	LeaseSecret  []byte
}

// String renders l without its secret.
func (l Lease) String() string {
	return fmt.Sprintf("%s/%s/%s token %d", l.Namespace, l.Provider, l.Key, l.FencingToken)
}

// GoString renders l for %#v without its secret.
func (l Lease) GoString() string { return "claimd.Lease{" + l.String() + "}" }

// LogValue renders l for slog without its secret.
func (l Lease) LogValue() slog.Value {
	return slog.GroupValue(slog.String("namespace", l.Namespace), slog.String("provider", l.Provider),
		slog.String("key", l.Key), slog.Uint64("fencing_token", l.FencingToken))
}

// Claim is claimd's answer to a ClaimRequest. The response's fields are
// promoted: c.Outcome, c.Reason, c.Key, c.FencingToken, c.State, c.Result …
// An ACQUIRED claim carries the lease secret too: pass c.Lease() to the
// calls that need it rather than copying fields.
type Claim struct {
	*pb.ClaimResponse
	// Namespace and Provider as sent, so the claim can name its record.
	Namespace string
	Provider  string
	// AttemptID that was sent (generated when the request had none).
	AttemptID string
	// Cached reports that the answer came from the client's duplicate
	// cache (WithLocalCache), not from claimd.
	Cached bool
}

// Acquired reports whether the caller owns the delivery and must do the work.
func (c Claim) Acquired() bool { return c.GetOutcome() == pb.Outcome_OUTCOME_ACQUIRED }

// Duplicate reports whether the delivery was already settled or failed in
// the window; Result holds the stored result.
func (c Claim) Duplicate() bool { return c.GetOutcome() == pb.Outcome_OUTCOME_DUPLICATE }

// InProgress reports whether another holder has a live lease.
func (c Claim) InProgress() bool { return c.GetOutcome() == pb.Outcome_OUTCOME_IN_PROGRESS }

// PayloadMismatch reports whether the key was seen with a different payload.
func (c Claim) PayloadMismatch() bool {
	return c.GetOutcome() == pb.Outcome_OUTCOME_PAYLOAD_MISMATCH
}

// Deferred reports whether the event belongs to an entity lifecycle and
// arrived before its prerequisite: nothing is owned; answer the provider a
// retryable status with DeferredRetryAfter, and its retry is the replay.
// Entity says what the event waits for.
func (c Claim) Deferred() bool { return c.GetOutcome() == pb.Outcome_OUTCOME_DEFERRED }

// Superseded reports whether the event belongs to an entity lifecycle whose
// entity is already past it: acknowledge the provider and do nothing.
func (c Claim) Superseded() bool { return c.GetOutcome() == pb.Outcome_OUTCOME_SUPERSEDED }

// DeferredRetryAfter is how long a DEFERRED event's provider should wait
// before redelivering: the claim's retry_after rounded up to whole seconds,
// at least one (one when claimd sent none).
func (c Claim) DeferredRetryAfter() time.Duration {
	d := c.GetRetryAfter().AsDuration()
	return max((d+time.Second-1)/time.Second, 1) * time.Second
}

// TakenOver reports whether the claim was acquired from a holder whose
// lease ran out: State then says how far that holder got, and the side
// effect may already have happened.
func (c Claim) TakenOver() bool { return c.GetReason() == pb.Reason_REASON_LEASE_EXPIRED }

// Ref names the claimed record.
func (c Claim) Ref() Ref {
	return Ref{Namespace: c.Namespace, Provider: c.Provider, Key: c.GetKey()}
}

// Lease is the owner's handle on the claimed record: set only when the
// claim was ACQUIRED (claimd answers anything else without a token or
// secret, and refuses a Lease without them).
func (c Claim) Lease() Lease {
	return Lease{Ref: c.Ref(), FencingToken: c.GetFencingToken(), LeaseSecret: c.GetLeaseSecret()}
}

// RetryAfter is how long until the current holder's lease ends, as of now,
// rounded up to whole seconds and at least one: what to answer an
// in-progress delivery in a Retry-After header.
func (c Claim) RetryAfter(now time.Time) time.Duration {
	return retryAfter(c.GetLeaseExpiresAt().AsTime(), now)
}

func retryAfter(until, now time.Time) time.Duration {
	d := until.Sub(now)
	secs := (d + time.Second - 1) / time.Second
	return max(secs, 1) * time.Second
}

// newAttemptID returns 16 random bytes in hex: unique per logical claim.
func newAttemptID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func (r ClaimRequest) proto(holder string) *pb.ClaimRequest {
	req := &pb.ClaimRequest{
		Namespace:     r.Namespace,
		Provider:      r.Provider,
		Scope:         r.Scope,
		PayloadSha256: r.PayloadSHA256,
		Holder:        r.Holder,
		AttemptId:     r.AttemptID,
		EntityId:      r.EntityID,
		EventType:     r.EventType,
		Start:         r.Start,
	}
	if req.Holder == "" {
		req.Holder = holder
	}
	switch {
	case r.Delivery != nil:
		req.Key = &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Headers: r.Delivery.Headers, Body: r.Delivery.Body}}
	case r.EventID != "":
		req.Key = &pb.ClaimRequest_EventId{EventId: r.EventID}
	}
	if r.Lease > 0 {
		req.Lease = durationpb.New(r.Lease)
	}
	if r.Wait > 0 {
		req.Wait = durationpb.New(r.Wait)
	}
	if r.Window != 0 {
		req.Window = durationpb.New(r.Window) // a negative one too: claimd says why it is wrong
	}
	return req
}

// Claim asks claimd whether the delivery is the first and whether the
// caller may act on it. A call that fails with UNAVAILABLE or times out is
// retried under the retry policy with the same attempt_id, so a retry of a
// Claim that did reach claimd gets the same ACQUIRED and token back rather
// than IN_PROGRESS.
func (c *Client) Claim(ctx context.Context, r ClaimRequest) (Claim, error) {
	if r.AttemptID == "" {
		r.AttemptID = newAttemptID()
	}
	if c.cache != nil {
		if answer := c.cache.lookup(r); answer != nil {
			return Claim{ClaimResponse: answer, Namespace: r.Namespace, Provider: r.Provider, AttemptID: r.AttemptID, Cached: true}, nil
		}
	}
	req := r.proto(c.opts.holder)
	resp, err := call(ctx, c, "Claim", r.Wait, func(ctx context.Context) (*pb.ClaimResponse, error) {
		return c.claims.Claim(ctx, req)
	})
	if err != nil {
		return Claim{}, err
	}
	if c.cache != nil {
		c.cache.rememberClaim(r, resp)
	}
	return Claim{ClaimResponse: resp, Namespace: r.Namespace, Provider: r.Provider, AttemptID: r.AttemptID}, nil
}

// TransitionRequest moves a record forward.
type TransitionRequest struct {
	Lease
	// To is the target state.
	To pb.EventState
	// Result is stored with SETTLED or FAILED (at most 64 KiB) and returned
	// to duplicates.
	Result []byte
	// ExtendLease optionally sets the lease to now+ExtendLease (non-terminal
	// targets only).
	ExtendLease time.Duration
	// EffectRecovered says that a SETTLED result is the stored result of an
	// earlier holder's effect fence (see Effect), which this holder found
	// done: claimd counts, logs and audits it. Guard sets it.
	EffectRecovered bool
}

// Transition moves the record to r.To, fenced by r.Lease. changed is false
// when the record was already there with that lease (a repeat). Errors
// match ErrStaleToken, ErrNotOwner, ErrInvalidTransition or ErrNotFound.
func (c *Client) Transition(ctx context.Context, r TransitionRequest) (rec *pb.Record, changed bool, err error) {
	req := &pb.TransitionRequest{
		Namespace: r.Namespace, Provider: r.Provider, Key: r.Key,
		FencingToken: r.FencingToken, LeaseSecret: r.LeaseSecret, To: r.To, Result: r.Result,
		EffectRecovered: r.EffectRecovered,
	}
	if r.ExtendLease > 0 {
		req.ExtendLease = durationpb.New(r.ExtendLease)
	}
	resp, err := call(ctx, c, "Transition", 0, func(ctx context.Context) (*pb.TransitionResponse, error) {
		return c.claims.Transition(ctx, req)
	})
	if err != nil {
		return nil, false, err
	}
	if c.cache != nil {
		c.cache.rememberRecord(resp.GetRecord())
	}
	return resp.GetRecord(), resp.GetChanged(), nil
}

// Renew extends the holder's lease to now+lease (zero: the provider's
// default lease). ErrStaleToken means another holder took over.
func (c *Client) Renew(ctx context.Context, l Lease, lease time.Duration) (*pb.Record, error) {
	req := &pb.RenewRequest{Namespace: l.Namespace, Provider: l.Provider, Key: l.Key, FencingToken: l.FencingToken, LeaseSecret: l.LeaseSecret}
	if lease > 0 {
		req.Lease = durationpb.New(lease)
	}
	resp, err := call(ctx, c, "Renew", 0, func(ctx context.Context) (*pb.RenewResponse, error) {
		return c.claims.Renew(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetRecord(), nil
}

// Release gives the key back because the side effect did not happen: the
// next Claim acquires it with reason RELEASED and the next token.
func (c *Client) Release(ctx context.Context, l Lease) (*pb.Record, error) {
	req := &pb.ReleaseRequest{Namespace: l.Namespace, Provider: l.Provider, Key: l.Key, FencingToken: l.FencingToken, LeaseSecret: l.LeaseSecret}
	resp, err := call(ctx, c, "Release", 0, func(ctx context.Context) (*pb.ReleaseResponse, error) {
		return c.claims.Release(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetRecord(), nil
}

// Get reads the record named by ref from claimd's durable tier; ErrNotFound
// when there is none. The record carries the fencing token but never the
// lease secret: reading a record does not let anyone write it.
func (c *Client) Get(ctx context.Context, ref Ref) (*pb.Record, error) {
	req := &pb.GetRequest{Namespace: ref.Namespace, Provider: ref.Provider, Key: ref.Key}
	resp, err := call(ctx, c, "Get", 0, func(ctx context.Context) (*pb.GetResponse, error) {
		return c.claims.Get(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetRecord(), nil
}
