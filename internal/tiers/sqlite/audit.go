package sqlite

import (
	"errors"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// Operations recorded in audit_log.op.
const (
	opClaim      = "claim"
	opTransition = "transition"
	opRenew      = "renew"
	opRelease    = "release"
)

// Outcomes of transition, renew and release in audit_log.outcome. A claim
// records its tiers.Outcome name (ACQUIRED, DUPLICATE, IN_PROGRESS,
// PAYLOAD_MISMATCH) instead.
const (
	outcomeChanged           = "CHANGED"
	outcomeUnchanged         = "UNCHANGED" // a repeat that changed nothing
	outcomeNotFound          = "NOT_FOUND"
	outcomeStaleToken        = "STALE_TOKEN"
	outcomeNotOwner          = "NOT_OWNER"
	outcomeInvalidTransition = "INVALID_TRANSITION"
	outcomeError             = "ERROR"
)

// auditRow is one row of audit_log. For a claim, token is the token of the
// record that decided it (the claimant's on ACQUIRED, the holder's
// otherwise) and holder is the claimant; for the other operations token is the
// presented one and holder is the record's holder when that token is the
// record's token and the secret its owner's. to is the state after a claim,
// renew or release, and the requested state of a transition. Refusals are
// recorded too: a stale token presented by a vanished holder, or a current
// token presented without its secret (NOT_OWNER), is exactly what an
// investigation looks for. No secret, hash or salt is ever audited.
type auditRow struct {
	at       time.Time
	key      tiers.Key
	op       string
	outcome  string
	reason   string
	from, to string
	token    uint64
	holder   string
}

const insertAudit = `INSERT INTO audit_log
	(at, namespace, provider, key, op, outcome, reason, from_state, to_state, token, holder)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func (a *auditRow) args() []any {
	return []any{a.at.UnixMicro(), a.key.Namespace, a.key.Provider, a.key.Key, a.op, a.outcome, a.reason,
		a.from, a.to, int64(a.token), a.holder}
}

// holderOf is the holder to record for an operation presenting token that
// ended with err: the record's holder when token is its token and the secret
// was its owner's (the caller is, or was until it released, that holder),
// nobody we know otherwise.
func holderOf(cur *tiers.Record, token uint64, err error) string {
	if token == cur.Token && !errors.Is(err, tiers.ErrNotOwner) {
		return cur.Holder
	}
	return ""
}

// outcomeOf names the outcome of a transition, renew or release that ended
// with err (nil when allowed) and changed the record or not.
func outcomeOf(err error, changed bool) string {
	var te *tiers.TransitionError
	switch {
	case err == nil && changed:
		return outcomeChanged
	case err == nil:
		return outcomeUnchanged
	case errors.Is(err, tiers.ErrNotFound):
		return outcomeNotFound
	case errors.Is(err, tiers.ErrStaleToken):
		return outcomeStaleToken
	case errors.Is(err, tiers.ErrNotOwner):
		return outcomeNotOwner
	case errors.As(err, &te):
		return outcomeInvalidTransition
	}
	return outcomeError
}
