package tiers

import (
	"context"
	"fmt"
	"time"
)

// The reads behind InspectService: what claimd decided, for the people and
// tools that investigate a delivery (claimd inspect, the on-call page,
// claimd reconcile). They read the source of truth and write nothing.

// Bounds of a listing page. A store clamps what it is given to them; the
// service refuses what exceeds them before a store sees it.
const (
	// DefaultPageSize is the page of a listing asked with Size 0.
	DefaultPageSize = 100
	// MaxPageSize is the largest page a listing returns.
	MaxPageSize = 1000
	// MaxListKeys bounds ClaimFilter.Keys.
	MaxListKeys = 1000
)

// Page is one page of a listing: at most Size items (0 means
// DefaultPageSize) after the position After, a cursor the previous page of
// the same listing returned ("" for the first page).
type Page struct {
	Size  int
	After string
}

// Limit is p's page size within its bounds.
func (p Page) Limit() int {
	if p.Size <= 0 {
		return DefaultPageSize
	}
	return min(p.Size, MaxPageSize)
}

// ClaimFilter selects records of one namespace. Its filters combine with
// AND; a zero filter selects every record of the namespace.
type ClaimFilter struct {
	Namespace string
	// Provider narrows to the records claimed under this provider (or
	// group) name; "" for every provider.
	Provider string
	// Keys narrows to these canonical keys (at most MaxListKeys; only with
	// Provider).
	Keys []string
	// States narrows to records in one of these states.
	States []State
	// EntityID narrows to the records whose claim carried this entity.
	EntityID string
	// FirstSeenAfter (inclusive) and FirstSeenBefore (exclusive) bound
	// FirstSeenAt; a zero time does not bound. Both compare at the stores'
	// microsecond precision (a bound inside a microsecond counts from the
	// next one).
	FirstSeenAfter, FirstSeenBefore time.Time
}

// AuditOp is what an audit entry records. The numbers are the proto's
// AuditOp values.
type AuditOp uint8

// Audited operations.
const (
	AuditOpUnspecified AuditOp = iota
	AuditClaim
	AuditTransition
	AuditRenew
	AuditRelease
)

var auditOpNames = [...]string{"", "claim", "transition", "renew", "release"}

// String is the op's name in the audit_log tables: claim, transition,
// renew or release.
func (o AuditOp) String() string {
	if int(o) < len(auditOpNames) && o != AuditOpUnspecified {
		return auditOpNames[o]
	}
	return fmt.Sprintf("AuditOp(%d)", o)
}

// ParseAuditOp is the inverse of AuditOp.String.
func ParseAuditOp(name string) (AuditOp, error) {
	for i, n := range auditOpNames {
		if n == name && i > 0 {
			return AuditOp(i), nil
		}
	}
	return AuditOpUnspecified, fmt.Errorf("tiers: unknown audit op %q", name)
}

// AuditEntry is one audited decision on a key, as the durable tier wrote it
// in the transaction that made the decision.
type AuditEntry struct {
	At time.Time // the service clock's reading of the call (ClaimParams.Now …)
	Op AuditOp
	// Outcome, for claims: the answer. Reason, for ACQUIRED claims: why.
	Outcome Outcome
	Reason  Reason
	// State and Token are the record's after the decision; for a DEFERRED
	// or SUPERSEDED claim of a key without a record, StateUnspecified and 0.
	State State
	Token uint64
	// Holder is the claimant's holder for a claim, the record's for the
	// other operations.
	Holder          string
	Actor           Actor
	EffectRecovered bool   // TransitionParams.EffectRecovered
	PayloadHash     []byte // the claimant's (ClaimParams.PayloadHash), claims only
}

// Inspector is implemented by the durable tiers (and by twotier, which asks
// its durable tier). Both methods read the source of truth and write
// nothing; a cursor is opaque to callers, bound to the listing that made it.
//
// Errors: ErrInvalidCursor (pg.After was not made by the same method with
// the same filter or key), an error wrapping ErrUnavailable when the tier
// cannot be reached.
type Inspector interface {
	// ListClaims lists the records f selects, newest FirstSeenAt first
	// (then by provider and key, descending, so that the order is total),
	// a page at a time; next is the cursor of the following page, "" on the
	// last.
	ListClaims(ctx context.Context, f ClaimFilter, pg Page) (recs []Record, next string, err error)
	// ListAudit lists the audit log of k, oldest At first (then in the order
	// the rows were written), a page at a time. A key without entries has
	// an empty log, not ErrNotFound: its record may have been pruned while
	// its audit rows are kept.
	ListAudit(ctx context.Context, k Key, pg Page) (entries []AuditEntry, next string, err error)
}

// CeilMicro is t rounded up to the microsecond: a bound compared with times
// stored at microsecond precision. A stored s is at or after t exactly when
// it is at or after CeilMicro(t), and before t exactly when before it.
func CeilMicro(t time.Time) time.Time {
	if u := t.Truncate(time.Microsecond); !u.Equal(t) {
		return u.Add(time.Microsecond)
	}
	return t
}
