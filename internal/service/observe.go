package service

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/textclip"
	"github.com/claimd/claimd/internal/tiers"
)

// Request is what one call did. It is the single source of the call's log
// line, its span attributes and its metrics, so the three never disagree.
//
// Key and Token identify one delivery: they go to the log line and the span,
// never to a metric label (one series per key would exhaust Prometheus).
type Request struct {
	Method string // "Claim", "Transition", "Renew", "Release", "Get", "ListProviders", "GetProvider", "ListDeferred", "GetEntity", "ListClaims", "ListAudit"

	// Namespace, Provider and Key are as the caller sent them until the
	// request validates; Provider is then the registered name.
	Namespace, Provider, Key string
	// Known is set once Namespace has passed validation and Provider names a
	// registered provider: only then are they bounded enough to be metric
	// labels.
	Known bool

	// Claim only: where the key came from and what was decided.
	KeySource horizon.KeySource
	// KeyFallback: the key was derived from a raw delivery in which the
	// provider's key rule found no value, so it is the body hash.
	KeyFallback bool
	Outcome     tiers.Outcome // OutcomeUnspecified when the call failed
	Reason      tiers.Reason  // for ACQUIRED
	ServedBy    tiers.Tier

	// A claim whose event belongs to an entity lifecycle, and the
	// EntityService reads: the lifecycle and event type (declared by the
	// registry, so bounded enough to be metric labels), the entity (log and
	// span only) and the entity's state as the call saw it ("" when the
	// store did not order the claim).
	Lifecycle, EventType  string
	EntityID, EntityState string

	// State is the record's state after the call (StateUnspecified when no
	// record was read). From and To are the state change the call made or
	// asked for (see StateTransition); Changed is false for a repeat that
	// changed nothing.
	State      tiers.State
	From, To   tiers.State
	Changed    bool
	Token      uint64 // the fencing token presented or granted
	Latency    time.Duration
	Code       codes.Code // codes.OK on success
	ErrReason  string     // the ErrorInfo reason of the error (or its code name), "" on success
	errMessage string

	// EffectRecovered: a Transition (to SETTLED, the only target that
	// admits it) whose result the caller took from an effect fence an
	// earlier holder committed before it vanished. See RecoveredEffect.
	EffectRecovered bool

	// Actor is who made the call (principal, "" when anonymous) and the
	// transport it came by: what the audit row of its write names. The log
	// line carries both; metrics of this package do not.
	Actor tiers.Actor
}

// Recorder receives every finished Request; internal/metrics implements it
// with Prometheus counters. Record runs on the request path: it must be safe
// for concurrent use and must not block.
type Recorder interface {
	Record(ctx context.Context, r *Request)
}

type nopRecorder struct{}

func (nopRecorder) Record(context.Context, *Request) {}

// Failed reports whether the call returned an error.
func (r *Request) Failed() bool { return r.Code != codes.OK }

// StateTransition renders the state change of the call: "RECEIVED→PROCESSING"
// when both ends are known, "→RECEIVED" when only the new state is (a claim
// that opened or reopened a record, a transition that changed it: the
// stores return the record after the change, not before), "" when the call
// changed no state (a duplicate, a repeat, a takeover that kept the
// vanished holder's state).
func (r *Request) StateTransition() string {
	if r.To == tiers.StateUnspecified {
		return ""
	}
	if r.From == tiers.StateUnspecified {
		return "→" + r.To.String()
	}
	return r.From.String() + "→" + r.To.String()
}

// RecoveredEffect reports whether the call settled a record with the result
// of an earlier holder's effect fence: a Transition that carried
// effect_recovered and changed the record. A repeat of it changed nothing
// and recovers nothing again, so that a handler retrying its own settle is
// counted once.
func (r *Request) RecoveredEffect() bool {
	return r.Method == "Transition" && r.EffectRecovered && r.Changed && !r.Failed()
}

// StateTransitionRejected reports whether the claim's entity lifecycle
// turned the event away: DEFERRED (it came before its prerequisite) or
// SUPERSEDED (its entity moved past it). Its log line carries
// state_transition_rejected=true, the field operators search for.
func (r *Request) StateTransitionRejected() bool {
	return !r.Failed() && (r.Outcome == tiers.OutcomeDeferred || r.Outcome == tiers.OutcomeSuperseded)
}

// Cache-state values of a claim: which layer answered it.
const (
	CacheLocalHit = "local_hit" // the process-local cache of terminal records
	CacheFastHit  = "fast_hit"  // the fast tier (Redis, in-process map)
	CacheMiss     = "miss"      // the durable tier had to decide
)

// CacheState names the layer that answered a claim, "" for other calls and
// failed claims.
func (r *Request) CacheState() string {
	switch r.ServedBy {
	case tiers.TierLocal:
		return CacheLocalHit
	case tiers.TierFast:
		return CacheFastHit
	case tiers.TierDurable:
		return CacheMiss
	}
	return ""
}

// OutcomeLabel is the outcome of a claim as logs and metrics name it:
// "ACQUIRED", "DUPLICATE", "IN_PROGRESS", "PAYLOAD_MISMATCH", "DEFERRED",
// "SUPERSEDED", or "ERROR" for a claim that failed.
func (r *Request) OutcomeLabel() string {
	if r.Failed() || r.Outcome == tiers.OutcomeUnspecified {
		return "ERROR"
	}
	return r.Outcome.String()
}

// ReasonLabel is why a claim ended as it did: the Reason of an ACQUIRED
// ("NEW", "RELEASED", "LEASE_EXPIRED", "WINDOW_EXPIRED"), the ErrorInfo
// reason of a failure ("DURABLE_TIER_UNAVAILABLE", "INVALID_ARGUMENT" …),
// "NONE" otherwise.
func (r *Request) ReasonLabel() string {
	switch {
	case r.Failed():
		return r.ErrReason
	case r.Outcome == tiers.OutcomeAcquired:
		return r.Reason.String()
	}
	return "NONE"
}

// ServedByLabel is "LOCAL", "FAST" or "DURABLE", "NONE" for a failed claim.
func (r *Request) ServedByLabel() string {
	if r.ServedBy == tiers.TierUnspecified {
		return "NONE"
	}
	return r.ServedBy.String()
}

// KeySourceLabel is "EVENT_ID", "HEADER", "BODY_FIELD" or "BODY_HASH",
// "NONE" when no key was derived.
func (r *Request) KeySourceLabel() string {
	if r.KeySource == horizon.KeySourceUnspecified {
		return "NONE"
	}
	return r.KeySource.String()
}

// finish completes r with the call's answer, writes its log line, sets its
// span attributes, hands it to the Recorder, and returns err as a gRPC
// status (toStatus, the one error boundary).
func (s *Service) finish(ctx context.Context, r *Request, start time.Time, err error) error {
	r.Latency = time.Since(start)
	r.Actor = actorOf(ctx)
	if err != nil {
		var (
			te *tiers.TransitionError
			rm *tiers.ResultMismatchError
		)
		switch {
		case errors.As(err, &te):
			r.From, r.State = te.Current, te.Current
		case errors.As(err, &rm):
			r.State = rm.Current
		}
		r.errMessage = err.Error() // the detail, which the caller's message leaves out
		err = toStatus(err)
		st := status.Convert(err)
		r.Code, r.ErrReason = st.Code(), errorReason(st)
	}
	s.log(ctx, r)
	annotateSpan(ctx, r)
	s.cfg.Recorder.Record(ctx, r)
	return err
}

// errorReason is the ErrorInfo reason toStatus attached, or the code's name
// (CANCELED, DEADLINE_EXCEEDED) for the statuses that carry none.
func errorReason(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.Reason
		}
	}
	return codeName(st.Code())
}

// codeName is the canonical upper-case name of c: "DEADLINE_EXCEEDED".
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// log writes the call's one line. Payloads (delivery bodies, results) are
// never logged: they may carry card data or personal data, and the key and
// token are enough to find the record. Callers' mistakes are Info (the
// caller learns of them from the status); a tier that failed is Warn.
func (s *Service) log(ctx context.Context, r *Request) {
	level := slog.LevelInfo
	switch r.Code {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded:
		level = slog.LevelWarn
	}
	if !s.cfg.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs,
		slog.String("namespace", logField(r.Namespace)),
		slog.String("provider", logField(r.Provider)),
		slog.String("key", logField(r.Key)),
		slog.String("principal", r.Actor.Principal),
		slog.String("transport", r.Actor.Transport),
	)
	if r.Method == "Claim" {
		attrs = append(attrs,
			slog.String("key_source", r.KeySourceLabel()),
			slog.String("outcome", r.OutcomeLabel()),
			slog.String("reason", r.ReasonLabel()),
			slog.String("served_by", r.ServedByLabel()),
		)
		if r.StateTransitionRejected() {
			attrs = append(attrs, slog.Bool("state_transition_rejected", true))
		}
	}
	attrs = appendEntity(attrs, r)
	if r.State != tiers.StateUnspecified {
		attrs = append(attrs, slog.String("state", r.State.String()))
	}
	attrs = append(attrs, slog.String("state_transition", r.StateTransition()))
	if r.Method == "Transition" && !r.Failed() {
		attrs = append(attrs, slog.Bool("changed", r.Changed))
	}
	attrs = append(attrs,
		slog.Uint64("fencing_token", r.Token),
		slog.Float64("latency_ms", float64(r.Latency.Microseconds())/1000),
	)
	if r.Failed() {
		attrs = append(attrs,
			slog.String("code", codeName(r.Code)),
			slog.String("error_reason", r.ErrReason),
			slog.String("error", r.errMessage),
		)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	s.cfg.Logger.LogAttrs(ctx, level, r.Method, attrs...)
}

// appendEntity adds the entity fields of a call that has them (a claim in
// a lifecycle, an EntityService read).
func appendEntity(attrs []slog.Attr, r *Request) []slog.Attr {
	if r.Lifecycle != "" {
		attrs = append(attrs, slog.String("lifecycle", logField(r.Lifecycle)))
	}
	if r.EntityID != "" {
		attrs = append(attrs, slog.String("entity_id", logField(r.EntityID)))
	}
	if r.EventType != "" {
		attrs = append(attrs, slog.String("event_type", r.EventType))
	}
	if r.EntityState != "" {
		attrs = append(attrs, slog.String("entity_state", r.EntityState))
	}
	return attrs
}

// logFallback writes the warn line of a claim whose key fell back to the body
// hash although the provider declares a key rule: the delivery is of a shape
// the rule does not know (a new webhook family, a changed format). The claim
// itself goes on, so the line is the only place the day it started shows up
// besides claimd_key_fallback_total. Neither the body nor the key is logged in
// full: the body may carry card or personal data, and the key's first bytes
// are enough to find the record.
func (s *Service) logFallback(ctx context.Context, req *pb.ClaimRequest, cl claim) {
	if !s.cfg.Logger.Enabled(ctx, slog.LevelWarn) {
		return
	}
	var names []string
	for h := range req.GetDelivery().GetHeaders() {
		names = append(names, h)
	}
	slices.Sort(names)
	headers := strings.Join(names, ",")
	attrs := []slog.Attr{
		slog.String("namespace", cl.params.Key.Namespace),
		slog.String("provider", cl.params.Key.Provider),
		slog.String("key_prefix", keyPrefix(cl.params.Key.Key)),
		slog.Int("body_bytes", len(req.GetDelivery().GetBody())),
		slog.String("header_names", textclip.Cut(headers, maxDescBytes)),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "key rule found no value in the delivery; the key is the body hash", attrs...)
}

// logEffectRecovered writes the line of a settle whose result came from an
// earlier holder's effect fence: that holder committed its effect in the
// handler's database and vanished before it settled (a crash, a lost
// connection, a pause past its lease). Nothing was done twice, but the
// crash happened, and this line (with claimd_effects_recovered_total) is
// where it shows. The stored result is not logged: it may carry personal
// data.
func (s *Service) logEffectRecovered(ctx context.Context, r *Request) {
	if !s.cfg.Logger.Enabled(ctx, slog.LevelWarn) {
		return
	}
	attrs := []slog.Attr{
		slog.String("namespace", logField(r.Namespace)),
		slog.String("provider", logField(r.Provider)),
		slog.String("key", logField(r.Key)),
		slog.String("principal", r.Actor.Principal),
		slog.String("transport", r.Actor.Transport),
		slog.Uint64("fencing_token", r.Token),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "effect recovered: an earlier holder committed the effect and vanished before settling; settled with its stored result", attrs...)
}

// keyPrefixBytes is how much of a fallback key the warn line shows: "sha256:"
// and 16 hex digits, enough to find the record, too little to be the key.
const keyPrefixBytes = len("sha256:") + 16

func keyPrefix(key string) string {
	if len(key) <= keyPrefixBytes {
		return key
	}
	return key[:keyPrefixBytes] + "…"
}

// Span attribute keys set on the server span of every ClaimService call.
const (
	AttrKey             = attribute.Key("idempotency.key")
	AttrNamespace       = attribute.Key("idempotency.namespace")
	AttrProvider        = attribute.Key("idempotency.provider")
	AttrKeySource       = attribute.Key("idempotency.key_source")
	AttrOutcome         = attribute.Key("idempotency.outcome")
	AttrReason          = attribute.Key("idempotency.reason")
	AttrCacheState      = attribute.Key("idempotency.cache_state")
	AttrServedBy        = attribute.Key("idempotency.served_by")
	AttrStateTransition = attribute.Key("idempotency.state_transition")
	AttrState           = attribute.Key("idempotency.state")
	AttrFencingToken    = attribute.Key("idempotency.fencing_token")
	AttrLifecycle       = attribute.Key("idempotency.lifecycle")
	AttrEntityID        = attribute.Key("idempotency.entity_id")
	AttrEventType       = attribute.Key("idempotency.event_type")
	AttrEffectRecovered = attribute.Key("idempotency.effect_recovered")
)

// annotateSpan sets r's attributes on the server span that otelgrpc started
// for the call. Without tracing the span is a no-op and nothing is built.
func annotateSpan(ctx context.Context, r *Request) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		AttrNamespace.String(logField(r.Namespace)),
		AttrProvider.String(logField(r.Provider)),
	}
	if r.Key != "" {
		attrs = append(attrs, AttrKey.String(logField(r.Key)))
	}
	if r.Method == "Claim" {
		attrs = append(attrs,
			AttrKeySource.String(r.KeySourceLabel()),
			AttrOutcome.String(r.OutcomeLabel()),
			AttrReason.String(r.ReasonLabel()),
			AttrServedBy.String(r.ServedByLabel()),
		)
		if cs := r.CacheState(); cs != "" {
			attrs = append(attrs, AttrCacheState.String(cs))
		}
		if r.Lifecycle != "" {
			attrs = append(attrs, AttrLifecycle.String(r.Lifecycle), AttrEntityID.String(logField(r.EntityID)), AttrEventType.String(r.EventType))
		}
	}
	if r.State != tiers.StateUnspecified {
		attrs = append(attrs, AttrState.String(r.State.String()))
	}
	if st := r.StateTransition(); st != "" {
		attrs = append(attrs, AttrStateTransition.String(st))
	}
	if r.RecoveredEffect() {
		attrs = append(attrs, AttrEffectRecovered.Bool(true))
	}
	if r.Token > 0 && r.Token <= 1<<63-1 {
		attrs = append(attrs, AttrFencingToken.Int64(int64(r.Token)))
	}
	span.SetAttributes(attrs...)
}
