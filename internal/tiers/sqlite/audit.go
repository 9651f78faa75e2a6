package sqlite

import (
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

// outcomeChanged is audit_log.outcome of a transition, renew or release:
// only a call that changed the record is audited. A claim records its
// tiers.Outcome name (ACQUIRED, DUPLICATE, IN_PROGRESS, PAYLOAD_MISMATCH)
// instead.
const outcomeChanged = "CHANGED"

// auditRow is one row of audit_log. For a claim, token is the token of the
// record that decided it (the claimant's on ACQUIRED, the holder's
// otherwise) and holder is the claimant; for the other operations, which are
// audited only when they changed the record, token is the holder's and
// holder its name. to is the state after the call. effectRecovered marks a
// transition whose result an earlier holder's effect fence supplied; actor
// is who asked for the call (tiers.Actor); payloadHash is a claimant's.
type auditRow struct {
	at       time.Time
	key      tiers.Key
	op       string
	outcome  string
	reason   string
	from, to string
	token    uint64
	holder   string

	effectRecovered bool
	actor           tiers.Actor
	payloadHash     []byte // claims: the claimant's payload hash, or nil
}

const insertAudit = `INSERT INTO audit_log
	(at, namespace, provider, key, op, outcome, reason, from_state, to_state, token, holder, effect_recovered,
	 principal, transport, payload_sha256)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func (a *auditRow) args() []any {
	return []any{a.at.UnixMicro(), a.key.Namespace, a.key.Provider, a.key.Key, a.op, a.outcome, a.reason,
		a.from, a.to, int64(a.token), a.holder, a.effectRecovered,
		a.actor.Principal, a.actor.Transport, nilIfEmpty(a.payloadHash)}
}
