package claimd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Codec turns a guarded function's value into the bytes claimd stores with
// SETTLED, and the stored bytes back into the value a duplicate returns.
// Encode must be deterministic; an error from it is ErrResultNotStorable.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// JSONCodec is the default Codec, the guards' result rule (clients/GUARD.md,
// Results): a []byte as it is, a string as its UTF-8, anything else as
// compact JSON by encoding/json with <, > and & kept as they are (what the
// other guards store for the same value). A type controls its own form with
// json.Marshaler and json.Unmarshaler (time.Time is RFC 3339; a decimal
// type should marshal as a string so that nothing rounds it).
type JSONCodec[T any] struct{}

// Encode implements Codec.
func (JSONCodec[T]) Encode(v T) ([]byte, error) {
	switch x := any(v).(type) {
	case []byte:
		return x, nil
	case string:
		if !utf8.ValidString(x) {
			return nil, errors.New("a string that is not UTF-8 cannot be stored as text")
		}
		return []byte(x), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Decode implements Codec.
func (JSONCodec[T]) Decode(b []byte) (T, error) {
	var v T
	switch p := any(&v).(type) {
	case *[]byte:
		*p = b
		return v, nil
	case *string:
		*p = string(b)
		return v, nil
	}
	if len(b) == 0 {
		return v, nil // nothing stored: the zero value
	}
	err := json.Unmarshal(b, &v)
	return v, err
}

// ErrResultNotStorable: the guarded function's value could not be stored
// (its Codec failed, or it encoded to more than MaxResultBytes). Idempotent
// returns it before anything is settled, and the key is left to its lease:
// the side effect may have happened, so it is never released, and the next
// delivery after the lease runs the function again with LEASE_EXPIRED and
// state PROCESSING. A GuardFunc that returns an error wrapping it gets the
// same treatment. Fix the type (or the Codec) rather than retry it.
var ErrResultNotStorable = errors.New("claimd: result cannot be stored")

// NotRunError is Idempotent's error when the function did not run because
// claimd answered something else than ACQUIRED or DUPLICATE: another
// holder's live lease (Outcome.Disposition InProgress, Outcome.RetryAfter
// says how long), another payload under the key (PayloadMismatch: it
// matches ErrPayloadMismatch), an event of an entity lifecycle that came
// too early (Deferred) or too late (SupersededByEntity).
type NotRunError struct {
	Outcome Outcome
}

// Error implements error.
func (e *NotRunError) Error() string {
	return fmt.Sprintf("claimd: %s: %s", e.Outcome.Disposition, bytes.TrimSpace(e.Outcome.Body))
}

// Unwrap returns the outcome's error (ErrPayloadMismatch for a mismatch).
func (e *NotRunError) Unwrap() error { return e.Outcome.Err }

// FailedError is Idempotent's error for a key that failed for good: the
// function returned a Permanent error on this call or on an earlier one
// (then Text is the failure text claimd stored). It matches IsPermanent.
type FailedError struct {
	Text string
	err  error // this call's error, when this call failed it
}

// Error implements error.
func (e *FailedError) Error() string { return "claimd: failed permanently: " + e.Text }

// Unwrap returns the function's own error when this call failed the key.
func (e *FailedError) Unwrap() error { return e.err }

// Idempotent runs fn once per delivery of req and returns its value: the
// first call runs fn under Guard (heartbeat, fencing, settle) and stores
// the value through codec (nil: JSONCodec[T]); a duplicate returns the
// stored value decoded, as the same type, without running fn. Errors
// propagate: fn's error releases the key (a Permanent one fails it, and
// this call and every duplicate return a *FailedError); a delivery fn did
// not run for returns a *NotRunError; a claimd failure its *Error. The
// caller reads Outcome-level detail (status, Retry-After) from these
// errors; for an HTTP answer use Guard.
//
// A value that codec cannot encode, or that encodes to more than
// MaxResultBytes, is ErrResultNotStorable before anything is settled:
// claimd never stores an empty result for it, and the key waits for its
// lease to end. A duplicate whose stored bytes codec cannot decode (the
// type changed) returns the decode error and the zero value.
func Idempotent[T any](ctx context.Context, c *Client, req ClaimRequest, codec Codec[T], fn func(ctx context.Context, cl Claim) (T, error)) (T, error) {
	if codec == nil {
		codec = JSONCodec[T]{}
	}
	var value T
	o := c.Guard(ctx, req, func(ctx context.Context, cl Claim) ([]byte, error) {
		v, err := fn(ctx, cl)
		if err != nil {
			return nil, err
		}
		value = v
		b, err := codec.Encode(v)
		if err != nil {
			return nil, fmt.Errorf("%w: %T: %w", ErrResultNotStorable, v, err)
		}
		if len(b) > MaxResultBytes {
			return nil, fmt.Errorf("%w: %T encodes to %d bytes, over %d", ErrResultNotStorable, v, len(b), MaxResultBytes)
		}
		return b, nil
	})
	var zero T
	switch o.Disposition {
	case Duplicate:
		if o.Claim.GetState() == StateFailed {
			return zero, &FailedError{Text: string(o.Body)}
		}
		return codec.Decode(o.Body)
	case Settled:
		switch {
		case o.Err != nil:
			// fn ended the event itself with another outcome (GUARD.md row
			// 18): what claimd stored stands.
			return standing(ctx, c, codec, o.Claim)
		case o.Effect != nil && o.Effect.Done:
			// An earlier holder's effect committed: its stored result stands
			// (row 23), and o.Body is it.
			return codec.Decode(o.Body)
		}
		return value, nil
	case Failed:
		if o.Err != nil && !IsPermanent(o.Err) {
			return zero, o.Err // recorded by fn itself with another outcome
		}
		return zero, &FailedError{Text: string(o.Body), err: o.Err}
	case InProgress, PayloadMismatch, Deferred, SupersededByEntity:
		return zero, &NotRunError{Outcome: o}
	}
	if o.Err == nil {
		o.Err = fmt.Errorf("claimd: guard answered %d (%s)", o.Status, o.Disposition)
	}
	return zero, o.Err
}

// standing reads the outcome that stands for a key whose settle found it
// ended already: claimd's own record, as a duplicate would get it.
func standing[T any](ctx context.Context, c *Client, codec Codec[T], cl Claim) (T, error) {
	var zero T
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rec, err := c.Get(rctx, cl.Ref())
	if err != nil {
		return zero, err
	}
	if rec.GetState() == StateFailed {
		return zero, &FailedError{Text: string(rec.GetResult())}
	}
	return codec.Decode(rec.GetResult())
}

// PayloadDigest is a PayloadSHA256 for the part of an event that a
// duplicate must repeat (Python's payload=): the SHA-256 of v's canonical
// JSON (object keys sorted, compact, numbers as written, <, > and & as
// they are). Claim an event id with it, and a retry whose other fields
// changed (a provider's delivery timestamp) is still a DUPLICATE, while
// one that changed this part is PAYLOAD_MISMATCH.
func PayloadDigest(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	canonical, err := JSONCodec[any]{}.Encode(generic) // maps marshal with sorted keys
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(canonical)
	return sum[:], nil
}
