package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/tiers"
)

// InspectService: what claimd decided, for the people and tools that
// investigate a delivery. Both methods read the durable tier (through
// tiers.Inspector) and write nothing.

// errNoInspector: the store lists no claims or audit (it does not implement
// tiers.Inspector), so InspectService has nothing to read.
var errNoInspector = errors.New("the store lists no claims or audit log")

// inspector returns the store's Inspector reads.
func (s *Service) inspector() (tiers.Inspector, error) {
	in, ok := s.cfg.Store.(tiers.Inspector)
	if !ok {
		return nil, errNoInspector
	}
	return in, nil
}

// ListClaims implements InspectService.ListClaims.
func (s *Service) ListClaims(ctx context.Context, req *pb.ListClaimsRequest) (*pb.ListClaimsResponse, error) {
	start := time.Now()
	r := &Request{Method: "ListClaims", Namespace: req.GetNamespace(), Provider: req.GetProvider()}
	f, pg, err := s.validateListClaims(req)
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Known, r.EntityID = f.Provider, true, f.EntityID
	in, err := s.inspector()
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	recs, next, err := in.ListClaims(sctx, f, pg)
	if err != nil {
		return nil, s.finish(ctx, r, start, pageTokenErr("ListClaimsRequest", storeErr(ctx, err)))
	}
	resp := &pb.ListClaimsResponse{Records: make([]*pb.Record, 0, len(recs)), NextPageToken: next}
	size := 0
	for i, rec := range recs {
		m := pbRecord(rec)
		if size += proto.Size(m); i > 0 && size > MaxListResponseBytes {
			// A page of records with large results: end it here, and let
			// the next page start after the last record sent.
			resp.NextPageToken = f.Cursor(recs[i-1])
			break
		}
		resp.Records = append(resp.Records, m)
	}
	_ = s.finish(ctx, r, start, nil)
	return resp, nil
}

// MaxListResponseBytes bounds the records of one ListClaims page: a
// thousand records of 64 KiB results would be 64 MiB, past every gRPC
// client's default limit on a message received (4 MiB). A page that
// would exceed it ends early, with a next_page_token, as a page may;
// it holds at least one record.
const MaxListResponseBytes = 3 << 20

func (s *Service) validateListClaims(req *pb.ListClaimsRequest) (tiers.ClaimFilter, tiers.Page, error) {
	c := &checker{msg: "ListClaimsRequest"}
	c.namespace(req.GetNamespace())
	keys := req.GetKeys()
	switch {
	case len(keys) > tiers.MaxListKeys:
		c.add("keys", "%d keys exceed the maximum of %d", len(keys), tiers.MaxListKeys)
	case len(keys) > 0 && req.GetProvider() == "":
		c.add("keys", "need provider: a canonical key is a provider's")
	default:
		for i, k := range keys {
			if !c.recordKey(fmt.Sprintf("keys[%d]", i), k) {
				break // one bad key is enough to name; a thousand would swamp the answer
			}
		}
	}
	states := make([]tiers.State, 0, len(req.GetStates()))
	for i, st := range req.GetStates() {
		states = append(states, c.state(fmt.Sprintf("states[%d]", i), st))
	}
	if id := req.GetEntityId(); id != "" {
		c.key("entity_id", id)
	}
	after := c.timestamp("first_seen_after", req.GetFirstSeenAfter())
	before := c.timestamp("first_seen_before", req.GetFirstSeenBefore())
	if !after.IsZero() && !before.IsZero() && !after.Before(before) {
		c.add("first_seen_before", "%s is not after first_seen_after %s", before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
	}
	pg := c.page(req.GetPageSize(), req.GetPageToken())
	if err := c.err(); err != nil {
		return tiers.ClaimFilter{}, tiers.Page{}, err
	}
	f := tiers.ClaimFilter{Namespace: req.GetNamespace(), Keys: keys, States: states, EntityID: req.GetEntityId(),
		FirstSeenAfter: after, FirstSeenBefore: before}
	if name := req.GetProvider(); name != "" {
		prov, err := s.lookup("ListClaimsRequest.provider", name)
		if err != nil {
			return tiers.ClaimFilter{}, tiers.Page{}, err
		}
		f.Provider = prov.Name
	}
	if len(f.States) == 0 {
		f.States = nil
	}
	return f, pg, nil
}

// ListAudit implements InspectService.ListAudit.
func (s *Service) ListAudit(ctx context.Context, req *pb.ListAuditRequest) (*pb.ListAuditResponse, error) {
	start := time.Now()
	r := &Request{Method: "ListAudit", Namespace: req.GetNamespace(), Provider: req.GetProvider(), Key: req.GetKey()}
	c := &checker{msg: "ListAuditRequest"}
	pg := c.page(req.GetPageSize(), req.GetPageToken())
	k, _, err := s.recordRef(c, req.GetNamespace(), req.GetProvider(), req.GetKey())
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	r.Provider, r.Known = k.Provider, true
	in, err := s.inspector()
	if err != nil {
		return nil, s.finish(ctx, r, start, err)
	}
	sctx, cancel := s.bounded(ctx, 0)
	defer cancel()
	entries, next, err := in.ListAudit(sctx, k, pg)
	if err != nil {
		return nil, s.finish(ctx, r, start, pageTokenErr("ListAuditRequest", storeErr(ctx, err)))
	}
	resp := &pb.ListAuditResponse{Entries: make([]*pb.AuditEntry, len(entries)), NextPageToken: next}
	for i, e := range entries {
		resp.Entries[i] = pbAuditEntry(e)
	}
	_ = s.finish(ctx, r, start, nil)
	return resp, nil
}

// page checks a listing's page_size and page_token: a size of 0 is the
// default page, more than tiers.MaxPageSize is refused; a token is a
// store's cursor, a position, not a payload.
func (c *checker) page(size uint32, token string) tiers.Page {
	if size > tiers.MaxPageSize {
		c.add("page_size", "%d exceeds the maximum of %d", size, tiers.MaxPageSize)
	}
	if token != "" {
		c.text("page_token", token, 1, MaxPageTokenBytes)
	}
	return tiers.Page{Size: int(size), After: token}
}

// timestamp checks an optional timestamp; it returns the zero time when t
// is unset or invalid (a violation is then recorded for an invalid one).
func (c *checker) timestamp(field string, t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	if err := t.CheckValid(); err != nil {
		c.add(field, "invalid timestamp: %v", err)
		return time.Time{}
	}
	return t.AsTime()
}

// pageTokenErr names the page_token of msg for a cursor the store refused
// (tiers.ErrInvalidCursor: made by another listing, or by none).
func pageTokenErr(msg string, err error) error {
	if errors.Is(err, tiers.ErrInvalidCursor) {
		return &invalidArgument{violations: []violation{{field: msg + ".page_token",
			desc: "not a next_page_token of this listing: page on with the filters of the page that returned it"}}}
	}
	return err
}

// AuditEntryProto is e as ListAudit answers it (claimd inspect --file shows
// an exported month's entries as it shows the live ones).
func AuditEntryProto(e tiers.AuditEntry) *pb.AuditEntry { return pbAuditEntry(e) }

func pbAuditEntry(e tiers.AuditEntry) *pb.AuditEntry {
	return &pb.AuditEntry{
		At:              ts(e.At),
		Op:              pb.AuditOp(e.Op), // the numbers are the proto's (TestEnumNumbersMatch)
		Outcome:         pbOutcome(e.Outcome),
		Reason:          pbReason(e.Reason),
		State:           pbState(e.State),
		FencingToken:    e.Token,
		Holder:          e.Holder,
		Principal:       e.Actor.Principal,
		Transport:       e.Actor.Transport,
		EffectRecovered: e.EffectRecovered,
		PayloadSha256:   e.PayloadHash,
	}
}

// nextAnswer is what a Claim of rec's key would be answered at now, by the
// Claim path's own decision (tiers.Decide), for a delivery that sends no
// payload hash and no attempt of the holder's: PAYLOAD_MISMATCH and the
// repeated ACQUIRED of an attempt depend on the delivery and are not
// predicted, nor is the ordering of an entity's events (GetEntity shows
// where the entity stands).
func nextAnswer(rec tiers.Record, now time.Time) *pb.NextAnswer {
	res, _, _ := tiers.Decide(&rec, tiers.ClaimParams{Key: rec.Key, Now: now})
	next := &pb.NextAnswer{Outcome: pbOutcome(res.Outcome), Reason: pbReason(res.Reason)}
	holder := rec.Holder
	if holder == "" {
		holder = "a holder that gave no name"
	} else {
		holder = quote(holder)
	}
	switch res.Outcome {
	case tiers.OutcomeDuplicate:
		next.Until = ts(rec.WindowExpiresAt)
		next.Explanation = fmt.Sprintf("%s; duplicates are suppressed until the window ends at %s, and answered with its result",
			lower(rec.State), rec.WindowExpiresAt.Format(time.RFC3339Nano))
	case tiers.OutcomeInProgress:
		next.Until = ts(rec.LeaseExpiresAt)
		next.Explanation = fmt.Sprintf("held by %s (token %d, state %s) until its lease ends at %s; a delivery before then is answered IN_PROGRESS",
			holder, rec.Token, rec.State, rec.LeaseExpiresAt.Format(time.RFC3339Nano))
	case tiers.OutcomeAcquired:
		switch res.Reason {
		case tiers.ReasonWindowExpired:
			next.Explanation = fmt.Sprintf("the window ended at %s; the next delivery opens a new one and is acquired (token %d) as if new: "+
				"fall back on the domain's own idempotency", rec.WindowExpiresAt.Format(time.RFC3339Nano), rec.Token+1)
		case tiers.ReasonReleased:
			next.Explanation = fmt.Sprintf("released by %s; the next delivery acquires it (token %d) and starts again at RECEIVED", holder, rec.Token+1)
		case tiers.ReasonLeaseExpired:
			next.Explanation = fmt.Sprintf("the lease of %s ended at %s before it settled; the next delivery takes it over (token %d) in state %s, "+
				"the state it reached", holder, rec.LeaseExpiresAt.Format(time.RFC3339Nano), rec.Token+1, rec.State)
		}
	}
	if rec.EntityID != "" && res.Outcome == tiers.OutcomeAcquired {
		next.Explanation += fmt.Sprintf("; as event %s of entity %s it may be deferred or superseded instead (GetEntity shows where the entity stands)",
			quote(rec.EventType), quote(rec.EntityID))
	}
	return next
}

// lower is a terminal state as a word: "settled", "failed".
func lower(s tiers.State) string {
	switch s {
	case tiers.StateSettled:
		return "settled"
	case tiers.StateFailed:
		return "failed"
	}
	return s.String()
}
