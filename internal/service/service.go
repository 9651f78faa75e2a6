// Package service speaks gRPC: it validates requests, derives keys through
// the provider registry, calls a tiers.Store and maps its answers and errors
// to the idempotency.v1 API. It holds no storage detail.
package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/tiers"
)

// Config wires a Service. Zero values of the optional fields mean defaults.
type Config struct {
	Store    tiers.Store       // required
	Registry *horizon.Registry // required
	Clock    clock.Clock       // default clock.Real
	// ReviewAge is the age past which a provider's reviewed_on is overdue.
	// Default 180 days.
	ReviewAge time.Duration
	// StoreTimeout bounds each store call when the caller set no shorter
	// deadline, so an unreachable tier answers UNAVAILABLE in time for the
	// provider's own timeout. Default 5s.
	StoreTimeout time.Duration
	// Logger receives one line per request. Default slog.Default().
	Logger *slog.Logger
	// Recorder receives every finished request (metrics). Default none.
	Recorder Recorder
	// Random returns a number in [0, 1) for the jitter of a DEFERRED
	// answer's retry_after. Default math/rand/v2's Float64.
	Random func() float64
}

// Service implements ClaimService, ProviderService, EntityService and
// InspectService.
type Service struct {
	pb.UnimplementedClaimServiceServer
	pb.UnimplementedProviderServiceServer
	pb.UnimplementedEntityServiceServer
	pb.UnimplementedInspectServiceServer
	cfg Config
}

// New returns a Service over cfg.Store.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.ReviewAge <= 0 {
		cfg.ReviewAge = 180 * 24 * time.Hour
	}
	if cfg.StoreTimeout <= 0 {
		cfg.StoreTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Recorder == nil {
		cfg.Recorder = nopRecorder{}
	}
	if cfg.Random == nil {
		cfg.Random = defaultRandom
	}
	return &Service{cfg: cfg}
}

// Register registers the four services on r. Their requests are decoded by the
// service itself (decode.go), so that a request protobuf refuses is answered
// INVALID_ARGUMENT rather than grpc-go's INTERNAL.
func (s *Service) Register(r grpc.ServiceRegistrar) {
	r.RegisterService(s.strictDecoding(&pb.ClaimService_ServiceDesc), s)
	r.RegisterService(s.strictDecoding(&pb.ProviderService_ServiceDesc), s)
	r.RegisterService(s.strictDecoding(&pb.EntityService_ServiceDesc), s)
	r.RegisterService(s.strictDecoding(&pb.InspectService_ServiceDesc), s)
}

func (s *Service) bounded(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.StoreTimeout+extra)
}

// storeErr names a store call that ran out of the service's own time bound
// (not the caller's) for what it is: the tier did not answer, so fail
// closed with UNAVAILABLE and let the provider retry.
func storeErr(caller context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && caller.Err() == nil {
		return tiers.Unavailable("store", err)
	}
	return err
}

// lookup finds a registered provider or group; field names the request field
// for the error.
func (s *Service) lookup(field, name string) (*horizon.Provider, error) {
	p, ok := s.cfg.Registry.Lookup(name)
	if !ok {
		return nil, &providerNotFound{field: field, name: name}
	}
	return p, nil
}

// claim is a validated ClaimRequest.
type claim struct {
	// params is the claim without its ownership (AttemptID, Salt and
	// SecretHash), which Claim derives only for a claim the tiers decide.
	params tiers.ClaimParams
	src    horizon.KeySource
	wait   time.Duration
	// fallback: the key was derived from a raw delivery in which the
	// provider's rule found no value, so it is the body hash.
	fallback bool
	// placed: the claim belongs to an entity lifecycle, at placement.
	placed    bool
	placement horizon.Placement
	horizon   time.Duration // the provider's retry horizon (retry_after's bound)
}

// validateClaim validates req.
func (s *Service) validateClaim(req *pb.ClaimRequest) (claim, error) {
	c := &checker{msg: "ClaimRequest"}
	c.namespace(req.GetNamespace())
	c.provider(req.GetProvider())
	if err := c.err(); err != nil {
		return claim{}, err
	}
	prov, err := s.lookup("ClaimRequest.provider", req.GetProvider())
	if err != nil {
		return claim{}, err
	}

	var (
		key      string
		src      horizon.KeySource
		fallback bool
		hash     = req.GetPayloadSha256()
		// delivery is read once, by the key rule and the lifecycle rules.
		delivery *horizon.Delivery
	)
	if len(hash) != 0 && len(hash) != sha256Bytes {
		c.add("payload_sha256", "%d bytes, want %d (a SHA-256 digest)", len(hash), sha256Bytes)
	}
	switch k := req.GetKey().(type) {
	case *pb.ClaimRequest_EventId:
		key, src = k.EventId, horizon.KeySourceEventID
		c.key("event_id", key)
	case *pb.ClaimRequest_Delivery:
		body := k.Delivery.GetBody()
		delivery = horizon.NewDelivery(k.Delivery.GetHeaders(), body)
		derived, err := prov.DeriveKey(delivery)
		if err != nil {
			c.add("delivery", "%v", err)
			break
		}
		key, src, fallback = derived.Key, derived.Source, derived.Fallback
		c.key("delivery (derived key)", key)
		sum := sha256.Sum256(body)
		if len(hash) == sha256Bytes && !bytes.Equal(hash, sum[:]) {
			c.add("payload_sha256", "does not match sha256(delivery.body)")
		}
		hash = sum[:]
	default:
		c.add("key", "exactly one of event_id or delivery is required")
	}
	if scope := req.GetScope(); scope != "" && c.text("scope", scope, 1, MaxKeyBytes) && key != "" {
		key += ScopeSeparator + scope
		if len(key) > MaxKeyBytes {
			c.add("scope", "key with scope is %d bytes, exceeds the maximum of %d", len(key), MaxKeyBytes)
		}
	}
	leaseDur := c.duration("lease", req.GetLease(), prov.MaxLease, "max_lease")
	if leaseDur == 0 {
		leaseDur = prov.Lease
	}
	var wait time.Duration
	if w := req.GetWait(); w != nil && (w.CheckValid() != nil || w.AsDuration() != 0) {
		wait = c.duration("wait", w, MaxWait, "the maximum wait") // an explicit zero means "do not wait"
	}
	ttl := c.window(req.GetWindow(), prov)
	c.text("holder", req.GetHolder(), 0, MaxHolderBytes)
	c.text("attempt_id", req.GetAttemptId(), 0, MaxAttemptIDBytes)
	pl, placed := place(c, prov, req, delivery)
	if err := c.err(); err != nil {
		return claim{}, err
	}
	var entity *tiers.EntityEvent
	if placed {
		entity = entityEvent(pl)
	}
	if len(hash) == 0 {
		hash = nil
	}
	return claim{
		params: tiers.ClaimParams{
			Key:         tiers.Key{Namespace: req.GetNamespace(), Provider: prov.Name, Key: key},
			Now:         s.cfg.Clock.Now(),
			Lease:       leaseDur,
			TTL:         ttl,
			PayloadHash: hash,
			Holder:      req.GetHolder(),
			Entity:      entity,
			Start:       req.GetStart(),
		},
		src:       src,
		wait:      wait,
		fallback:  fallback,
		placed:    placed,
		placement: pl,
		horizon:   prov.RetryHorizon,
	}, nil
}

// Claim implements ClaimService.Claim.
func (s *Service) Claim(ctx context.Context, req *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	start := time.Now()
	r := &Request{Method: "Claim", Namespace: req.GetNamespace(), Provider: req.GetProvider(), Key: req.GetEventId()}
	cl, err := s.validateClaim(req)
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Key, r.KeySource, r.Known = cl.params.Key.Provider, cl.params.Key.Key, cl.src, true
	if cl.fallback {
		r.KeyFallback = true
		s.logFallback(ctx, req, cl)
	}
	var secret []byte
	res, local := s.answerLocally(cl.params)
	if !local {
		res, secret, err = s.claimTiers(ctx, req, actorOf(ctx), cl)
		if err != nil {
			return nil, s.finish(ctx, r, start, err)
		}
	}
	resp := pbClaimResponse(res, cl.params.Key.Key, cl.src, appliedWindow(res.Record, cl.params.TTL), secret)
	if cl.placed {
		resp.Entity = pbEntityPosition(cl.placement, res.Outcome, res.Entity)
		r.Lifecycle, r.EntityID, r.EventType = cl.placement.Lifecycle.Name, cl.placement.EntityID, cl.placement.Event.EventType
		r.EntityState = resp.Entity.GetState()
		if res.Outcome == tiers.OutcomeDeferred {
			resp.RetryAfter = pbRetryAfter(retryAfter(cl.horizon, resp.Entity.GetDeferrals(), s.cfg.Random))
		}
	}
	r.Outcome, r.Reason, r.ServedBy = res.Outcome, res.Reason, res.ServedBy
	r.State = res.Record.State
	r.Token = resp.FencingToken // logged and traced as answered; never the secret
	if res.Outcome == tiers.OutcomeAcquired && res.Reason != tiers.ReasonLeaseExpired {
		// NEW, RELEASED and WINDOW_EXPIRED (re)start the record at RECEIVED;
		// a takeover keeps the state the vanished holder reached.
		r.To = res.Record.State
	}
	_ = s.finish(ctx, r, start, nil)
	return resp, nil
}

// appliedWindow is the dedup window the answer's record lives in: the one
// its first claim opened, which a claim asking for another window changes
// only when it opens a new one (ClaimRequest.window). asked is the window
// this claim would have opened, the answer for a claim without a record
// (DEFERRED, SUPERSEDED).
func appliedWindow(r tiers.Record, asked time.Duration) time.Duration {
	if r.FirstSeenAt.IsZero() || !r.WindowExpiresAt.After(r.FirstSeenAt) {
		return asked
	}
	return r.WindowExpiresAt.Sub(r.FirstSeenAt)
}

// answerLocally answers p from the store's memory when it can
// (tiers.LocalAnswerer): a duplicate of a settled key, which writes nothing,
// needs no ownership, no time bound and no tier.
func (s *Service) answerLocally(p tiers.ClaimParams) (tiers.ClaimResult, bool) {
	if l, ok := s.cfg.Store.(tiers.LocalAnswerer); ok {
		return l.AnswerLocally(p)
	}
	return tiers.ClaimResult{}, false
}

// claimTiers asks the store to decide cl, sent by actor, with the
// ownership an acquisition stores, and returns the owner's lease secret
// when the claim acquired the key.
func (s *Service) claimTiers(ctx context.Context, req *pb.ClaimRequest, actor tiers.Actor, cl claim) (tiers.ClaimResult, []byte, error) {
	own := newOwnership(actor.Principal, req.GetHolder(), req.GetAttemptId())
	p := cl.params
	p.AttemptID, p.Salt, p.SecretHash, p.Actor = own.attemptID, own.salt, own.hash, actor
	sctx, cancel := s.bounded(ctx, cl.wait)
	defer cancel()
	res, err := tiers.ClaimWait(sctx, s.cfg.Store, p, cl.wait, s.cfg.Clock.Now)
	if err != nil {
		return res, nil, storeErr(ctx, err)
	}
	if res.Outcome != tiers.OutcomeAcquired {
		return res, nil, nil
	}
	// A fresh acquisition stored this call's salt; a repeated attempt
	// answers the salt stored by its first call. Either way the same
	// material derives the owner's secret.
	secret, err := own.secretOf(res.Record)
	return res, secret, err
}

// recordRef validates the (namespace, provider, key) of a follow-up call.
func (s *Service) recordRef(c *checker, ns, provider, key string) (tiers.Key, *horizon.Provider, error) {
	c.namespace(ns)
	c.provider(provider)
	c.recordKey("key", key)
	if err := c.err(); err != nil {
		return tiers.Key{}, nil, err
	}
	prov, err := s.lookup(c.msg+".provider", provider)
	if err != nil {
		return tiers.Key{}, nil, err
	}
	return tiers.Key{Namespace: ns, Provider: prov.Name, Key: key}, prov, nil
}

// Transition implements ClaimService.Transition.
func (s *Service) Transition(ctx context.Context, req *pb.TransitionRequest) (*pb.TransitionResponse, error) {
	start := time.Now()
	r := &Request{Method: "Transition", Namespace: req.GetNamespace(), Provider: req.GetProvider(), Key: req.GetKey(),
		Token: req.GetFencingToken()}
	p, err := s.validateTransition(req)
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	p.Actor = actorOf(ctx)
	r.Provider, r.Known, r.To, r.EffectRecovered = p.Key.Provider, true, p.To, p.EffectRecovered
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	rec, changed, err := s.cfg.Store.Transition(sctx, p)
	if err != nil {
		return nil, s.finish(ctx, r, start, storeErr(ctx, err))
	}
	r.State, r.Changed = rec.State, changed
	if !changed {
		r.To = tiers.StateUnspecified // a repeat: nothing moved
	}
	_ = s.finish(ctx, r, start, nil)
	if r.RecoveredEffect() {
		s.logEffectRecovered(ctx, r)
	}
	return &pb.TransitionResponse{Record: pbRecord(rec), Changed: changed}, nil
}

func (s *Service) validateTransition(req *pb.TransitionRequest) (tiers.TransitionParams, error) {
	c := &checker{msg: "TransitionRequest"}
	k, prov, err := s.recordRef(c, req.GetNamespace(), req.GetProvider(), req.GetKey())
	if err != nil {
		return tiers.TransitionParams{}, err
	}
	c.token(req.GetFencingToken())
	c.secret(req.GetLeaseSecret())
	to := c.state("to", req.GetTo())
	if n := len(req.GetResult()); n > MaxResultBytes {
		c.add("result", "%d bytes exceeds the maximum of %d (64 KiB)", n, MaxResultBytes)
	} else if n > 0 && !to.Terminal() {
		c.add("result", "only stored with a terminal target (SETTLED or FAILED)")
	}
	lease := c.duration("extend_lease", req.GetExtendLease(), prov.MaxLease, "max_lease")
	if lease > 0 && to.Terminal() {
		c.add("extend_lease", "not allowed with a terminal target")
	}
	if req.GetEffectRecovered() && to != tiers.StateSettled {
		// Only a settle can carry a result an earlier holder's effect
		// fence stored; on any other target the flag would be audited as
		// a recovery that did not happen.
		c.add("effect_recovered", "only allowed with to = EVENT_STATE_SETTLED (a settle whose result came from an earlier holder's effect fence), not %s",
			req.GetTo())
	}
	if err := c.err(); err != nil {
		return tiers.TransitionParams{}, err
	}
	return tiers.TransitionParams{Key: k, Now: s.cfg.Clock.Now(), Token: req.GetFencingToken(), SecretHash: secretHash(req.GetLeaseSecret()),
		To: to, Result: req.GetResult(), Lease: lease, EffectRecovered: req.GetEffectRecovered()}, nil
}

// Renew implements ClaimService.Renew.
func (s *Service) Renew(ctx context.Context, req *pb.RenewRequest) (*pb.RenewResponse, error) {
	start := time.Now()
	r := &Request{Method: "Renew", Namespace: req.GetNamespace(), Provider: req.GetProvider(), Key: req.GetKey(), Token: req.GetFencingToken()}
	c := &checker{msg: "RenewRequest"}
	k, prov, err := s.recordRef(c, req.GetNamespace(), req.GetProvider(), req.GetKey())
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	c.token(req.GetFencingToken())
	c.secret(req.GetLeaseSecret())
	lease := c.duration("lease", req.GetLease(), prov.MaxLease, "max_lease")
	if lease == 0 {
		lease = prov.Lease
	}
	if err := c.err(); err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Known = k.Provider, true
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	rec, err := s.cfg.Store.Renew(sctx, tiers.RenewParams{Key: k, Now: s.cfg.Clock.Now(), Token: req.GetFencingToken(),
		SecretHash: secretHash(req.GetLeaseSecret()), Lease: lease, Actor: actorOf(ctx)})
	if err != nil {
		return nil, s.finish(ctx, r, start, storeErr(ctx, err))
	}
	r.State = rec.State
	_ = s.finish(ctx, r, start, nil)
	return &pb.RenewResponse{Record: pbRecord(rec)}, nil
}

// Release implements ClaimService.Release.
func (s *Service) Release(ctx context.Context, req *pb.ReleaseRequest) (*pb.ReleaseResponse, error) {
	start := time.Now()
	r := &Request{Method: "Release", Namespace: req.GetNamespace(), Provider: req.GetProvider(), Key: req.GetKey(), Token: req.GetFencingToken()}
	c := &checker{msg: "ReleaseRequest"}
	k, _, err := s.recordRef(c, req.GetNamespace(), req.GetProvider(), req.GetKey())
	if err == nil {
		c.token(req.GetFencingToken())
		c.secret(req.GetLeaseSecret())
		err = c.err()
	}
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Known = k.Provider, true
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	rec, err := s.cfg.Store.Release(sctx, tiers.ReleaseParams{Key: k, Now: s.cfg.Clock.Now(), Token: req.GetFencingToken(),
		SecretHash: secretHash(req.GetLeaseSecret()), Actor: actorOf(ctx)})
	if err != nil {
		return nil, s.finish(ctx, r, start, storeErr(ctx, err))
	}
	r.State = rec.State
	_ = s.finish(ctx, r, start, nil)
	return &pb.ReleaseResponse{Record: pbRecord(rec)}, nil
}

// Get implements ClaimService.Get.
func (s *Service) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	start := time.Now()
	r := &Request{Method: "Get", Namespace: req.GetNamespace(), Provider: req.GetProvider(), Key: req.GetKey()}
	c := &checker{msg: "GetRequest"}
	k, _, err := s.recordRef(c, req.GetNamespace(), req.GetProvider(), req.GetKey())
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Known = k.Provider, true
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	rec, err := s.cfg.Store.Get(sctx, k)
	if err != nil {
		return nil, s.finish(ctx, r, start, storeErr(ctx, err))
	}
	r.State, r.Token = rec.State, rec.Token
	_ = s.finish(ctx, r, start, nil)
	return &pb.GetResponse{Record: pbRecord(rec), Next: nextAnswer(rec, s.cfg.Clock.Now())}, nil
}

// ListProviders implements ProviderService.ListProviders.
func (s *Service) ListProviders(ctx context.Context, _ *pb.ListProvidersRequest) (*pb.ListProvidersResponse, error) {
	start := time.Now()
	now := s.cfg.Clock.Now()
	resp := &pb.ListProvidersResponse{}
	for _, p := range s.cfg.Registry.List() {
		resp.Providers = append(resp.Providers, pbProvider(p, p.ReviewOverdue(now, s.cfg.ReviewAge)))
	}
	_ = s.finish(ctx, &Request{Method: "ListProviders", Known: true}, start, nil)
	return resp, nil
}

// GetProvider implements ProviderService.GetProvider.
func (s *Service) GetProvider(ctx context.Context, req *pb.GetProviderRequest) (*pb.GetProviderResponse, error) {
	start := time.Now()
	r := &Request{Method: "GetProvider", Provider: req.GetName()}
	if req.GetName() == "" {
		return nil, s.finish(ctx, r, start, &invalidArgument{violations: []violation{{field: "GetProviderRequest.name", desc: "required"}}})
	}
	p, err := s.lookup("GetProviderRequest.name", req.GetName())
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider = p.Name
	_ = s.finish(ctx, r, start, nil)
	return &pb.GetProviderResponse{Provider: pbProvider(p, p.ReviewOverdue(s.cfg.Clock.Now(), s.cfg.ReviewAge))}, nil
}
