package claimd

import (
	"bytes"
	"container/list"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// scopeSeparator joins an event id and its scope into claimd's canonical
// key (the server's ScopeSeparator).
const scopeSeparator = "\x1f"

// duplicateCache holds the settled answers of WithLocalCache: a provider's
// retries of a delivery this client settled, or was told is a DUPLICATE,
// are answered from memory instead of asking claimd. Only what cannot
// change is kept: a SETTLED or FAILED record's answer, until its window
// ends (window_expires_at on the client's clock). Nothing owned is kept (no
// ACQUIRED, no IN_PROGRESS), so a cached answer never lets a handler run or
// keeps one from running.
//
// Only claims by event id are answered from it (a raw Delivery's key is
// derived by claimd's rules), never a claim placed in an entity lifecycle,
// and a claim whose PayloadSHA256 differs from the stored one asks claimd
// (which answers PAYLOAD_MISMATCH). Least recently used entries go first.
type duplicateCache struct {
	size int
	now  func() time.Time

	mu      sync.Mutex
	order   *list.List // of *cacheEntry, most recently used first
	entries map[cacheKey]*list.Element
}

type cacheKey struct{ namespace, provider, key string }

type cacheEntry struct {
	k       cacheKey
	answer  *pb.ClaimResponse // DUPLICATE, no lease secret
	payload []byte
	expires time.Time
}

func newDuplicateCache(size int, now func() time.Time) *duplicateCache {
	return &duplicateCache{size: size, now: now, order: list.New(), entries: make(map[cacheKey]*list.Element)}
}

// lookup is the cached DUPLICATE answer to r, or nil to ask claimd.
func (d *duplicateCache) lookup(r ClaimRequest) *pb.ClaimResponse {
	if r.EventID == "" || r.Delivery != nil || r.EntityID != "" {
		return nil
	}
	key := r.EventID
	if r.Scope != "" {
		key += scopeSeparator + r.Scope
	}
	k := cacheKey{r.Namespace, r.Provider, key}
	d.mu.Lock()
	defer d.mu.Unlock()
	el, ok := d.entries[k]
	if !ok {
		return nil
	}
	e := el.Value.(*cacheEntry)
	if !d.now().Before(e.expires) {
		d.order.Remove(el)
		delete(d.entries, k)
		return nil
	}
	if len(r.PayloadSHA256) > 0 && len(e.payload) > 0 && !bytes.Equal(r.PayloadSHA256, e.payload) {
		return nil
	}
	d.order.MoveToFront(el)
	return proto.CloneOf(e.answer) // the caller may change its copy
}

// rememberClaim keeps a DUPLICATE answer claimd gave to r (for the payload
// r was sent with, which claimd found equal to the stored one).
func (d *duplicateCache) rememberClaim(r ClaimRequest, resp *pb.ClaimResponse) {
	if resp.GetOutcome() != pb.Outcome_OUTCOME_DUPLICATE || resp.GetKeySource() != pb.KeySource_KEY_SOURCE_EVENT_ID ||
		r.EntityID != "" || resp.GetEntity() != nil {
		return
	}
	answer := proto.Clone(resp).(*pb.ClaimResponse)
	answer.LeaseSecret = nil
	d.put(cacheKey{r.Namespace, r.Provider, resp.GetKey()}, answer, r.PayloadSHA256)
}

// rememberRecord keeps a record this client settled or failed: its next
// duplicate is answered as claimd would.
func (d *duplicateCache) rememberRecord(rec *pb.Record) {
	if rec == nil || rec.GetReleased() || rec.GetLifecycle() != "" ||
		(rec.GetState() != pb.EventState_EVENT_STATE_SETTLED && rec.GetState() != pb.EventState_EVENT_STATE_FAILED) {
		return
	}
	answer := &pb.ClaimResponse{
		Outcome:         pb.Outcome_OUTCOME_DUPLICATE,
		Key:             rec.GetKey(),
		KeySource:       pb.KeySource_KEY_SOURCE_EVENT_ID,
		FencingToken:    rec.GetFencingToken(),
		State:           rec.GetState(),
		WindowExpiresAt: rec.GetWindowExpiresAt(),
		Attempt:         rec.GetAttempt(),
		FirstSeenAt:     rec.GetFirstSeenAt(),
		Result:          rec.GetResult(),
		Holder:          rec.GetHolder(),
	}
	d.put(cacheKey{rec.GetNamespace(), rec.GetProvider(), rec.GetKey()}, answer, rec.GetPayloadSha256())
}

func (d *duplicateCache) put(k cacheKey, answer *pb.ClaimResponse, payload []byte) {
	if answer.GetWindowExpiresAt() == nil {
		return
	}
	expires := answer.GetWindowExpiresAt().AsTime()
	if !d.now().Before(expires) {
		return
	}
	e := &cacheEntry{k: k, answer: answer, payload: payload, expires: expires}
	d.mu.Lock()
	defer d.mu.Unlock()
	if el, ok := d.entries[k]; ok {
		el.Value = e
		d.order.MoveToFront(el)
		return
	}
	d.entries[k] = d.order.PushFront(e)
	for d.order.Len() > d.size {
		last := d.order.Back()
		d.order.Remove(last)
		delete(d.entries, last.Value.(*cacheEntry).k)
	}
}

// len is how many answers are held.
func (d *duplicateCache) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.order.Len()
}
