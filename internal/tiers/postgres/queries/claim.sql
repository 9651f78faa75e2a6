-- claim decides one claim in one statement (DESIGN §3 step 3).
--
-- $1 namespace, $2 provider, $3 key, $4 now (the service clock),
-- $5 lease end (now + lease), $6 window end (now + ttl),
-- $7 the claimant's payload hash (NULL when unknown), $8 holder, $9 attempt_id
-- (the service's fingerprint), $10 salt, $11 secret hash: written, like holder
-- and attempt_id, only by an acquisition; $12 lifecycle, $13 entity id,
-- $14 event type, $15 the state the event leads to: the claim's entity event
-- (entity.go), all '' for a claim without one, stored by an acquisition too;
-- $16 start: an acquisition records PROCESSING instead of RECEIVED (or
-- VALIDATED); $17 principal, $18 transport: who asked (tiers.Actor), for
-- the audit row only.
--
-- c inserts the record (ACQUIRED/NEW) or, when the key exists, takes it over
-- exactly when tiers.Decide would: the window is over, or the payloads do not
-- differ, the record is not terminal and its lease is over or released. The
-- SET list is tiers.Takeover written in SQL; every expression reads the row as
-- it was before the update. Under READ COMMITTED, ON CONFLICT locks the
-- latest committed version of the row and evaluates the WHERE on it, so of
-- any number of concurrent claims exactly one takes a given version over.
--
-- a writes the ACQUIRED audit row in the same transaction as the record.
--
-- s returns the record as this statement's snapshot saw it when c took
-- nothing, so that the caller can decide DUPLICATE, IN_PROGRESS, the repeated
-- ACQUIRED of its own attempt, or PAYLOAD_MISMATCH without another round
-- trip. A row committed after the snapshot (the winner of a race on a new
-- key) is invisible to s: the caller then reads it with a new statement.
WITH c AS (
    INSERT INTO claims AS r (namespace, provider, key, state, token, version, attempt, reason,
                             released, holder, attempt_id, salt, secret_hash, payload_sha256, result,
                             first_seen_at, lease_expires_at, window_expires_at, updated_at,
                             lifecycle, entity_id, event_type, entity_to)
    VALUES ($1, $2, $3, CASE WHEN $16::bool THEN {PROCESSING} ELSE {RECEIVED} END, 1, 1, 1, {NEW},
            false, $8, $9, $10::bytea, $11::bytea, $7::bytea, NULL,
            $4, $5, $6, $4,
            $12, $13, $14, $15)
    ON CONFLICT (namespace, provider, key) DO UPDATE SET
        token      = r.token + 1,
        version    = r.version + 1,
        attempt    = r.attempt + 1,
        reason     = CASE WHEN r.window_expires_at <= $4 THEN {WINDOW_EXPIRED}
                          WHEN r.released THEN {RELEASED}
                          ELSE {LEASE_EXPIRED} END,
        released   = false,
        holder     = $8,
        attempt_id = $9,
        salt       = $10::bytea,
        secret_hash = $11::bytea,
        lifecycle  = $12,
        entity_id  = $13,
        event_type = $14,
        entity_to  = $15,
        lease_expires_at = $5,
        updated_at = $4,
        -- A new window or a release starts the state machine again; an
        -- expired lease keeps the state the vanished holder reached, even
        -- for a start (tiers.Takeover). A start starts a new window or a
        -- released key in PROCESSING.
        state      = CASE WHEN $16::bool AND (r.window_expires_at <= $4 OR r.released) THEN {PROCESSING}
                          WHEN r.window_expires_at <= $4 OR r.released THEN {RECEIVED}
                          ELSE r.state END,
        result     = CASE WHEN r.window_expires_at <= $4 OR r.released THEN NULL ELSE r.result END,
        -- A new window adopts the claimant's payload; otherwise an unknown
        -- hash is filled in by the first claimant that knows it.
        payload_sha256 = CASE WHEN r.window_expires_at <= $4 THEN $7::bytea
                              ELSE coalesce(nullif(r.payload_sha256, ''::bytea), $7::bytea) END,
        first_seen_at     = CASE WHEN r.window_expires_at <= $4 THEN $4 ELSE r.first_seen_at END,
        window_expires_at = CASE WHEN r.window_expires_at <= $4 THEN $6 ELSE r.window_expires_at END
    WHERE r.window_expires_at <= $4
       OR (NOT (coalesce(octet_length(r.payload_sha256), 0) > 0
                AND coalesce(octet_length($7::bytea), 0) > 0
                AND r.payload_sha256 <> $7::bytea)
           AND r.state NOT IN ({SETTLED}, {FAILED})
           AND (r.released OR r.lease_expires_at <= $4))
    RETURNING {RECORD}
),
a AS (
    INSERT INTO audit_log (at, namespace, provider, key, op, outcome, reason,
                           state, token, version, holder, attempt_id, payload_sha256, principal, transport)
    SELECT $4, $1, $2, $3, 'claim', {ACQUIRED}, c.reason,
           c.state, c.token, c.version, $8, $9, $7::bytea, $17::text, $18::text
    FROM c
),
s AS (
    SELECT {RECORD} FROM claims
    WHERE namespace = $1 AND provider = $2 AND key = $3
      AND NOT EXISTS (SELECT 1 FROM c)
)
SELECT true, {RECORD} FROM c
UNION ALL
SELECT false, {RECORD} FROM s
