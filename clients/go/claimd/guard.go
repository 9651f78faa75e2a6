package claimd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bounds and answers of the guard, the same in every claimd client
// (clients/GUARD.md, "Constants").
const (
	// MaxResultBytes is claimd's limit on a stored result.
	MaxResultBytes = 64 << 10
	// MaxFailureText bounds the error text stored as a FAILED event's result.
	MaxFailureText = 1 << 10
	// UnavailableRetryAfter is the Retry-After answered when claimd cannot be
	// asked, or could not record an outcome.
	UnavailableRetryAfter = 5 * time.Second
	// SupersededRetryAfter is the Retry-After answered when another holder
	// took the key over: its lease is unknown here, and the provider's
	// retry then meets IN_PROGRESS with the right Retry-After.
	SupersededRetryAfter = time.Second
	// minHeartbeat is the shortest renewal interval, for very short leases.
	minHeartbeat = 100 * time.Millisecond
)

// GuardFunc does the side effect of one delivery that the caller owns. It
// returns the result to store with the SETTLED event (and to answer the
// provider and every later duplicate with, at most 64 KiB), or an error:
// retryable by default, or permanent when wrapped with Permanent. The
// result is stored as it is (nil as empty): the bytes case of the result
// rule all claimd guards share, whose other cases (a string as UTF-8, any
// other value as compact JSON) the Python and TypeScript guards apply to
// what their handlers return. Only an error releases the key; once fn
// returned a result, a result over 64 KiB or a failed settle never does.
//
// c tells how the key was acquired: c.Reason is LEASE_EXPIRED when a
// previous holder vanished, and c.State then says how far it got — it may
// have done the side effect already, so fn must check its own records
// before repeating it, or do its writes in Effect(ctx, db, …), which commits
// them once across every holder (an earlier holder's committed effect makes
// Guard settle with that effect's stored result). ctx is cancelled when the request's context ends or
// when another holder takes the key over (context.Cause is then an error
// matching ErrStaleToken); fn should stop and return.
type GuardFunc func(ctx context.Context, c Claim) ([]byte, error)

// Disposition says what Guard did with a delivery.
type Disposition int

// Dispositions. fn never ran for the first five, Deferred and
// SupersededByEntity, always ran for Settled, Failed, Released, Unsettled
// and Unreleased; Superseded says it in Outcome.Ran.
const (
	// Duplicate: settled or failed before; fn did not run (200, stored result).
	Duplicate Disposition = iota + 1
	// InProgress: another holder has a live lease; fn did not run (409).
	InProgress
	// PayloadMismatch: the key was seen with another payload; fn did not
	// run (422). Alert on it.
	PayloadMismatch
	// Unavailable: claimd could not be asked (or could not start the
	// work), or this receiver is over its rate limit (RESOURCE_EXHAUSTED,
	// RetryAfter from claimd's RetryInfo); fn did not run (503).
	Unavailable
	// Rejected: claimd refused the request: a delivery it can never accept
	// (400), or the receiver's configuration: a field of its own settings (a
	// lease over max_lease), an unknown provider, missing or unknown
	// credentials (UNAUTHENTICATED) or a namespace or role the credentials do
	// not grant (PERMISSION_DENIED) (500, so that the provider retries once
	// it is fixed); fn did not run.
	Rejected
	// Settled: fn succeeded and the event is SETTLED (200, fn's result).
	// Also when fn had already ended the event itself through the typed
	// calls (Outcome.Err then matches ErrResultMismatch or
	// ErrInvalidTransition, and the stored result stands).
	Settled
	// Failed: fn failed permanently and the event is FAILED (200, so the
	// provider stops retrying); likewise when fn had ended it itself.
	Failed
	// Released: fn failed retryably and the key was given back (500, the
	// provider's retry runs fn again).
	Released
	// Superseded: another holder took the key over while fn ran, so this
	// one did not settle (409). fn's side effect, if any, is the new
	// holder's to reconcile through its LEASE_EXPIRED claim.
	Superseded
	// Unsettled: fn finished but claimd could not record it (503). The
	// event stays PROCESSING until its lease ends; the next delivery then
	// acquires it with LEASE_EXPIRED.
	Unsettled
	// Unreleased: fn failed retryably on a key taken over from a holder
	// that had reached PROCESSING (500). Releasing would reset the state to
	// RECEIVED and hide from the next holder that the side effect may have
	// happened, so the key is left to its lease instead. Likewise when fn
	// returned an error wrapping ErrResultNotStorable (Idempotent's value
	// could not be stored): fn ran, so the key is neither released nor
	// settled empty.
	Unreleased
	// Deferred: the event belongs to an entity lifecycle and arrived before
	// its prerequisite (claimd's DEFERRED); fn did not run and nothing is
	// owned (409, Retry-After from the claim's retry_after). The provider's
	// retry is the replay.
	Deferred
	// SupersededByEntity: the event belongs to an entity lifecycle whose
	// entity is already past it (claimd's SUPERSEDED: a stale event); fn
	// did not run (200). Not to be confused with Superseded, a takeover.
	SupersededByEntity
)

var dispositionNames = map[Disposition]string{
	Duplicate: "duplicate", InProgress: "in_progress", PayloadMismatch: "payload_mismatch",
	Unavailable: "unavailable", Rejected: "rejected", Settled: "settled", Failed: "failed",
	Released: "released", Superseded: "superseded", Unsettled: "unsettled", Unreleased: "unreleased",
	Deferred: "deferred", SupersededByEntity: "superseded_by_entity",
}

// String returns the disposition in snake case, for logs and metrics.
func (d Disposition) String() string {
	if s, ok := dispositionNames[d]; ok {
		return s
	}
	return fmt.Sprintf("Disposition(%d)", int(d))
}

// Outcome is what Guard did and what to answer the provider.
type Outcome struct {
	// Status is the HTTP status to answer the provider with.
	Status int
	// Body is the response body: the stored result for a settled or
	// duplicate delivery, a short text otherwise.
	Body []byte
	// RetryAfter, when positive, goes into a Retry-After header.
	RetryAfter time.Duration
	// Disposition says what happened.
	Disposition Disposition
	// Claim is claimd's answer; its ClaimResponse is nil when claimd did
	// not answer.
	Claim Claim
	// Ran reports whether fn ran.
	Ran bool
	// Err is the error behind a non-2xx answer or a Failed event (fn's
	// error, or a claimd error), nil otherwise.
	Err error
	// Effect is what the delivery's Effect did, when it committed its
	// fence or found an earlier holder's done (Effect.Done: the event was
	// then settled with that fence's result); nil when fn opened no effect
	// or it failed.
	Effect *Fx
}

// Respond writes the outcome to an HTTP response: Retry-After, status and
// body.
func (o Outcome) Respond(w http.ResponseWriter) {
	if o.RetryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int64((o.RetryAfter+time.Second-1)/time.Second)))
	}
	if len(o.Body) > 0 && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", http.DetectContentType(o.Body))
	}
	w.WriteHeader(o.Status)
	_, _ = w.Write(o.Body)
}

// Guard runs fn at most once per delivery, as far as claimd can tell. It
// follows the contract every claimd guard shares (clients/GUARD.md, whose
// table gives the status, Retry-After and body of each outcome):
//
//   - It claims the delivery. DUPLICATE, IN_PROGRESS and PAYLOAD_MISMATCH
//     answer at once without running fn; so do an event of an entity
//     lifecycle that came too early (DEFERRED: 409 with Retry-After) or too
//     late (SUPERSEDED: 200), and a claimd that cannot be reached (503).
//   - ACQUIRED: the claim already started the event (Guard claims with
//     Start, so claimd answers a new, released or window-expired key in
//     PROCESSING); a takeover (LEASE_EXPIRED), which keeps the state its
//     vanished holder reached, is moved there with a Transition (a no-op
//     from PROCESSING). Then it renews the lease every third of it while fn
//     runs, and runs fn. Success settles the event with
//     fn's result (200); a Permanent error fails it (200); any other error
//     releases it so that the provider's retry runs fn again (500) —
//     except on a key taken over from a holder that had reached
//     PROCESSING, which is left to its lease (see Unreleased).
//   - If a renewal finds that another holder took over, fn's context is
//     cancelled and the event is left to that holder (409).
//
// A panic in fn stops the heartbeat and propagates without releasing: the
// side effect may have happened, so the key waits for its lease to end and
// the next delivery acquires it with LEASE_EXPIRED and state PROCESSING.
//
// Settling uses a context detached from ctx, so a provider that hangs up
// after fn succeeded does not leave the event unsettled.
func (c *Client) Guard(ctx context.Context, req ClaimRequest, fn GuardFunc) Outcome {
	// fn runs right away: let the claim record PROCESSING, saving a call and
	// a durable write per first delivery.
	req.Start = true
	cl, err := c.Claim(ctx, req)
	if err != nil {
		return c.failedCall(err, Claim{})
	}
	switch {
	case cl.Duplicate():
		return Outcome{Status: http.StatusOK, Body: cl.GetResult(), Disposition: Duplicate, Claim: cl}
	case cl.InProgress():
		return Outcome{
			Status: http.StatusConflict, Body: []byte("delivery in progress elsewhere; retry later\n"),
			RetryAfter: cl.RetryAfter(c.opts.now()), Disposition: InProgress, Claim: cl,
		}
	case cl.PayloadMismatch():
		err := fmt.Errorf("%w: %s/%s key %q", ErrPayloadMismatch, req.Namespace, req.Provider, cl.GetKey())
		c.opts.logger.Error("claimd: payload mismatch", "namespace", req.Namespace, "provider", req.Provider,
			"key", cl.GetKey(), "holder", cl.GetHolder())
		return Outcome{
			Status: http.StatusUnprocessableEntity, Body: []byte("payload differs from an earlier delivery with the same key\n"),
			Disposition: PayloadMismatch, Claim: cl, Err: err,
		}
	case cl.Deferred():
		// No token was issued: nothing to release. The provider's retry,
		// after Retry-After, is the replay.
		return Outcome{
			Status: http.StatusConflict, Body: []byte("event arrived before its prerequisite; retry later\n"),
			RetryAfter: cl.DeferredRetryAfter(), Disposition: Deferred, Claim: cl,
		}
	case cl.Superseded():
		return Outcome{
			Status: http.StatusOK, Body: []byte("event superseded by a later state of its entity\n"),
			Disposition: SupersededByEntity, Claim: cl,
		}
	case cl.Acquired():
		return c.run(ctx, req, cl, fn)
	}
	err = fmt.Errorf("claimd: unexpected claim outcome %v", cl.GetOutcome())
	return Outcome{Status: http.StatusInternalServerError, Body: []byte("unexpected answer from claimd\n"), Disposition: Rejected, Claim: cl, Err: err}
}

// run does the ACQUIRED part of Guard.
func (c *Client) run(ctx context.Context, req ClaimRequest, cl Claim, fn GuardFunc) Outcome {
	lease := cl.Lease()
	// Transition, settle and release must outlive a provider that hung up:
	// the call's own retry policy bounds them.
	detached := context.WithoutCancel(ctx)

	if err := c.start(ctx, cl); err != nil {
		if !notOurs(err) && !mayHaveHappened(cl) {
			// fn did not run: give the key back so that the provider's retry
			// need not wait out the lease. If this fails too, the lease does it.
			if _, rerr := c.Release(detached, lease); rerr != nil {
				c.opts.logger.Warn("claimd: release after failed start", "key", lease.Key, "err", rerr)
			}
		}
		return c.failedCall(err, cl)
	}

	fnCtx, cancelFn := context.WithCancelCause(ctx)
	defer cancelFn(nil)
	// The delivery's Effect finds its claim, and tells the guard what it
	// found, through fn's context.
	fx := &effectState{lease: lease}
	fnCtx = context.WithValue(fnCtx, effectCtxKey{}, fx)
	var (
		mu         sync.Mutex
		supersedes error // set by the heartbeat when another holder took over
	)
	stop := c.heartbeat(detached, lease, req.Lease, c.heartbeatEvery(req.Lease, cl), func(err error) {
		mu.Lock()
		supersedes = err
		mu.Unlock()
		cancelFn(err)
	})
	defer stop() // also on a panic in fn

	result, fnErr := fn(fnCtx, cl)
	stop()
	effect := fx.close()
	mu.Lock()
	stale := supersedes
	mu.Unlock()
	if stale != nil {
		o := c.superseded(cl, stale, true)
		o.Effect = effect
		return o
	}

	var o Outcome
	switch {
	case fnErr == nil:
		o = c.record(detached, cl, settlement(lease, result, effect))
	case IsPermanent(fnErr):
		text := []byte(truncate(fnErr.Error(), MaxFailureText))
		o = c.record(detached, cl, ending{
			tr:      TransitionRequest{Lease: lease, To: StateFailed, Result: text},
			outcome: Outcome{Status: http.StatusOK, Body: text, Disposition: Failed, Err: fnErr},
		})
	case errors.Is(fnErr, ErrResultNotStorable):
		// fn returned, so its side effect may have happened: never release,
		// and never settle it empty. The key waits for its lease; the next
		// holder is told LEASE_EXPIRED from PROCESSING.
		c.opts.logger.Error("claimd: result cannot be stored; leaving the key to its lease", "key", lease.Key, "err", fnErr)
		o = Outcome{
			Status: http.StatusInternalServerError, Body: []byte("processing failed; retry later\n"),
			Disposition: Unreleased, Claim: cl, Ran: true, Err: fnErr,
		}
	case mayHaveHappened(cl):
		// Logged here, once: the guard turns fn's error into a 500 for the
		// provider, so no caller up the stack sees it unless they read Err.
		c.opts.logger.Error("claimd: handler failed after a takeover from PROCESSING; leaving the key to its lease",
			"key", lease.Key, "err", fnErr)
		o = Outcome{
			Status: http.StatusInternalServerError, Body: []byte("processing failed; retry later\n"),
			Disposition: Unreleased, Claim: cl, Ran: true, Err: fnErr,
		}
	default:
		c.opts.logger.Error("claimd: handler failed; releasing the key for a retry", "key", lease.Key, "err", fnErr)
		o = c.release(detached, cl, fnErr)
	}
	o.Effect = effect
	return o
}

// ending is what Guard records after fn returned (a Transition to SETTLED or
// FAILED) and what it answers once claimd stored it.
type ending struct {
	tr      TransitionRequest
	outcome Outcome // Claim and Ran are filled in by record
}

// settlement is the ending of fn that returned result. When the delivery's
// effect found an earlier holder's fence done, the event is settled with
// that fence's stored result, whatever fn returned, and claimd is told the
// result was recovered (clients/GUARD.md, row 23).
func settlement(l Lease, result []byte, effect *Fx) ending {
	recovered := effect != nil && effect.Done
	if recovered {
		result = effect.Result
	}
	stored, tooLarge := result, error(nil)
	if len(result) > MaxResultBytes {
		// The side effect happened: recording that matters more than the
		// result, so settle without it.
		stored, tooLarge = nil, fmt.Errorf("claimd: result of %d bytes exceeds %d; settled without it", len(result), MaxResultBytes)
	}
	return ending{
		tr:      TransitionRequest{Lease: l, To: StateSettled, Result: stored, EffectRecovered: recovered},
		outcome: Outcome{Status: http.StatusOK, Body: result, Disposition: Settled, Err: tooLarge},
	}
}

// record writes e's terminal Transition: the one path by which Guard records
// the outcome of fn, settled or failed. A record that fn already ended
// itself keeps its stored outcome (row 18); any other failure leaves the key
// to its lease (rows 17 and 19).
func (c *Client) record(ctx context.Context, cl Claim, e ending) Outcome {
	o := e.outcome
	o.Claim, o.Ran = cl, true
	if o.Err != nil && o.Disposition == Settled {
		c.opts.logger.Warn(o.Err.Error(), "key", e.tr.Key)
	}
	if e.tr.EffectRecovered {
		c.opts.logger.Info("claimd: settling with the stored result of an earlier holder's effect",
			"namespace", cl.Namespace, "provider", cl.Provider, "key", cl.GetKey())
	}
	_, _, err := c.Transition(ctx, e.tr)
	switch {
	case err == nil:
		return o
	case endedAlready(err):
		c.endedByHandler(e.tr.Lease, err)
		o.Err = errors.Join(o.Err, err)
		return o
	}
	f := c.settleFailed(cl, err)
	if o.Err != nil && o.Disposition == Failed {
		f.Err = errors.Join(o.Err, err) // fn's error stays visible
	}
	return f
}

// release gives back a key whose fn failed retryably, so that the
// provider's retry runs fn again (row 15).
func (c *Client) release(ctx context.Context, cl Claim, fnErr error) Outcome {
	lease := cl.Lease()
	if _, err := c.Release(ctx, lease); err != nil {
		if notOurs(err) {
			o := c.superseded(cl, err, true)
			o.Err = errors.Join(fnErr, err)
			return o
		}
		// The lease will hand the key over instead; the provider still
		// retries on the 500.
		c.opts.logger.Warn("claimd: release failed; the key frees when its lease ends", "key", lease.Key, "err", err)
		fnErr = errors.Join(fnErr, err)
	}
	return Outcome{
		Status: http.StatusInternalServerError, Body: []byte("processing failed; retry later\n"),
		Disposition: Released, Claim: cl, Ran: true, Err: fnErr,
	}
}

// notOurs reports whether err says that the claim is no longer the
// caller's: a newer holder took over (or the key was released), or the
// lease secret is not the owner's. Either way Guard must not settle or
// release it.
func notOurs(err error) bool { return errors.Is(err, ErrStaleToken) || errors.Is(err, ErrNotOwner) }

// endedAlready reports whether err says that the record is SETTLED or
// FAILED already under the caller's own token, with another outcome or
// result than the one just sent: fn ended the event itself through the
// typed calls. The event's outcome is recorded, so the provider may stop
// retrying; the stored result stands and duplicates get it.
func endedAlready(err error) bool {
	if errors.Is(err, ErrResultMismatch) {
		return true
	}
	var e *Error
	if !errors.As(err, &e) || !errors.Is(e, ErrInvalidTransition) {
		return false
	}
	cur := e.Metadata["current_state"]
	return cur == StateSettled.String() || cur == StateFailed.String()
}

// start moves an acquired event to PROCESSING unless the claim already did.
// A takeover (LEASE_EXPIRED) keeps the state its vanished holder reached even
// with Start: RECEIVED or VALIDATED are moved here, and PROCESSING is
// confirmed by a no-op Transition that checks the token, as before Start.
func (c *Client) start(ctx context.Context, cl Claim) error {
	if !cl.TakenOver() && cl.GetState() == StateProcessing {
		return nil
	}
	_, _, err := c.Transition(ctx, TransitionRequest{Lease: cl.Lease(), To: StateProcessing})
	return err
}

// endedByHandler logs that fn ended the event itself.
func (c *Client) endedByHandler(l Lease, err error) {
	c.opts.logger.Warn("claimd: the handler ended the event itself; its stored outcome stands", "key", l.Key, "err", err)
}

// mayHaveHappened reports whether cl took the key over from a holder that
// had started the side effect. Such a key is never released by Guard:
// Release resets the state to RECEIVED, and the next holder would no longer
// learn that it must check before acting.
func mayHaveHappened(cl Claim) bool {
	return cl.TakenOver() && cl.GetState() == StateProcessing
}

// failedCall is the outcome of a claimd call that failed before fn ran.
func (c *Client) failedCall(err error, cl Claim) Outcome {
	switch {
	case notOurs(err):
		return c.superseded(cl, err, false)
	case errors.Is(err, ErrUnavailable), status.Code(err) == codes.Canceled:
		return Outcome{
			Status: http.StatusServiceUnavailable, Body: []byte("claimd unavailable; retry later\n"),
			RetryAfter: UnavailableRetryAfter, Disposition: Unavailable, Claim: cl, Err: err,
		}
	case errors.Is(err, ErrResourceExhausted):
		// This receiver's principal is over its rate limit: come back when
		// claimd says a call is admitted again.
		var e *Error
		wait := UnavailableRetryAfter
		if errors.As(err, &e) && e.RetryDelay > 0 {
			wait = e.RetryDelay
		}
		return Outcome{
			Status: http.StatusServiceUnavailable, Body: []byte("claimd rate limit reached; retry later\n"),
			RetryAfter: wait, Disposition: Unavailable, Claim: cl, Err: err,
		}
	case rejectsDelivery(err):
		return Outcome{Status: http.StatusBadRequest, Body: []byte("delivery rejected by claimd\n"), Disposition: Rejected, Claim: cl, Err: err}
	}
	// UNAUTHENTICATED and PERMISSION_DENIED land here too, and an
	// INVALID_ARGUMENT naming the receiver's own settings (a lease over
	// max_lease, a window below the provider's: GUARD.md row 25): this
	// receiver's configuration is wrong, which only an operator fixes. The
	// answer is a 500 and not a 4xx, so that the provider keeps the delivery
	// and retries it once it is fixed: fn did not run.
	c.opts.logger.Error("claimd: call failed", "err", err)
	return Outcome{Status: http.StatusInternalServerError, Body: []byte("claimd refused the delivery\n"), Disposition: Rejected, Claim: cl, Err: err}
}

// superseded answers a delivery whose key another holder took over. The
// new holder's lease is unknown here, so the provider is told to come back
// after a short while.
func (c *Client) superseded(cl Claim, err error, ran bool) Outcome {
	return Outcome{
		Status: http.StatusConflict, Body: []byte("delivery taken over by another holder; retry later\n"),
		RetryAfter: SupersededRetryAfter, Disposition: Superseded, Claim: cl, Ran: ran, Err: err,
	}
}

// settleFailed is the outcome of a terminal transition that failed after
// fn ran. The side effect may have happened, so the key is not released:
// the next holder acquires it with LEASE_EXPIRED and state PROCESSING.
func (c *Client) settleFailed(cl Claim, err error) Outcome {
	if notOurs(err) {
		return c.superseded(cl, err, true)
	}
	c.opts.logger.Error("claimd: settling failed after the handler ran; the next delivery takes over with state PROCESSING",
		"namespace", cl.Namespace, "provider", cl.Provider, "key", cl.GetKey(), "err", err)
	return Outcome{
		Status: http.StatusServiceUnavailable, Body: []byte("could not record the outcome; retry later\n"),
		RetryAfter: UnavailableRetryAfter, Disposition: Unsettled, Claim: cl, Ran: true, Err: err,
	}
}

// heartbeatEvery is a third of the lease: two renewals may fail before the
// lease runs out. The lease is the requested one or, for the provider's
// default, what claimd granted as measured from now.
func (c *Client) heartbeatEvery(lease time.Duration, cl Claim) time.Duration {
	if lease <= 0 {
		lease = cl.GetLeaseExpiresAt().AsTime().Sub(c.opts.now())
	}
	return max(lease/3, minHeartbeat)
}

// heartbeat renews l every interval until stop is called. When a renewal
// reports a stale token, a secret that is not the owner's or no record at
// all, it calls onStale and stops; other errors are logged and the next
// tick tries again (fencing keeps a lapsed lease safe). stop waits for a
// renewal in flight to end and may be called twice.
//
// No goroutine waits per event: the next renewal is a timer in the
// runtime's one timer heap, and a goroutine runs only when a renewal is
// due, so a handler that ends within its first interval (a third of the
// lease) costs a timer set and stopped.
func (c *Client) heartbeat(ctx context.Context, l Lease, lease, every time.Duration, onStale func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu       sync.Mutex
		stopped  bool
		inflight sync.WaitGroup
		timer    *time.Timer
	)
	tick := func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		inflight.Add(1)
		mu.Unlock()
		defer inflight.Done()
		began := time.Now()
		// Up to two intervals: a slow renewal still lands before the
		// lease ends.
		rctx, rcancel := context.WithTimeout(ctx, 2*every)
		_, err := c.Renew(rctx, l, lease)
		rcancel()
		switch {
		case err == nil, ctx.Err() != nil:
		case notOurs(err), errors.Is(err, ErrNotFound):
			onStale(err)
			return
		case errors.Is(err, ErrInvalidTransition):
			return // terminal already: nothing left to renew
		default:
			c.opts.logger.Warn("claimd: lease renewal failed", "key", l.Key, "err", err)
		}
		// The next tick one interval after this one began, as a ticker
		// would (at once when the renewal took longer).
		mu.Lock()
		if !stopped {
			timer.Reset(max(every-time.Since(began), 0))
		}
		mu.Unlock()
	}
	mu.Lock()
	timer = time.AfterFunc(every, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
		cancel()
		inflight.Wait()
	}
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
