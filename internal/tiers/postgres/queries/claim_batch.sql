-- claim_batch inserts the first claims of many keys in one statement: the
-- group commit of batch.go. Each array holds one element per claim, at the
-- same index; the keys are distinct (the batcher keeps one claim per key).
--
-- $1 namespaces, $2 providers, $3 keys, $4 nows (the service clock),
-- $5 lease ends, $6 window ends, $7 payload hashes (NULL when unknown),
-- $8 holders, $9 attempt_ids (fingerprints), $10 salts, $11 secret hashes,
-- $12 starts (PROCESSING instead of RECEIVED), $13 principals and
-- $14 transports: who asked (tiers.Actor), for the audit rows only.
--
-- c inserts a key's record (ACQUIRED/NEW, token 1: tiers.NewRecord) when no
-- row holds the key, and nothing otherwise; a writes their ACQUIRED audit
-- rows in the same transaction, as claim.sql does, joined back to i by key
-- (distinct in a batch) for who asked. Only the keys inserted
-- come back: each record is the one tiers.NewRecord makes of its claim's
-- arguments, which batch.go builds again instead of reading it back. Only absent keys are
-- decided here: a key already stored is looked up by claim_batch_seen.sql,
-- and every takeover stays with claim.sql, whose WHERE is tiers.Decide.
--
-- The statement reads claims only through the primary key's arbiter check,
-- so its plan cannot turn into a scan of the table, whatever statistics the
-- planner had when it cached it (a table analyzed while nearly empty would
-- otherwise make a join with claims a sequential scan for every batch).
WITH i AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[],
                         $5::timestamptz[], $6::timestamptz[], $7::bytea[], $8::text[], $9::text[],
                         $10::bytea[], $11::bytea[], $12::bool[], $13::text[], $14::text[])
        AS t(i_namespace, i_provider, i_key, i_now, i_lease, i_window, i_payload, i_holder, i_attempt_id,
             i_salt, i_secret_hash, i_start, i_principal, i_transport)
),
c AS (
    INSERT INTO claims (namespace, provider, key, state, token, version, attempt, reason,
                        released, holder, attempt_id, salt, secret_hash, payload_sha256, result,
                        first_seen_at, lease_expires_at, window_expires_at, updated_at)
    SELECT i_namespace, i_provider, i_key, CASE WHEN i_start THEN {PROCESSING} ELSE {RECEIVED} END, 1, 1, 1, {NEW},
           false, i_holder, i_attempt_id, i_salt, i_secret_hash, i_payload, NULL,
           i_now, i_lease, i_window, i_now
    FROM i
    ON CONFLICT (namespace, provider, key) DO NOTHING
    RETURNING namespace, provider, key, {RECORD}
),
a AS (
    INSERT INTO audit_log (at, namespace, provider, key, op, outcome, reason,
                           state, token, version, holder, attempt_id, payload_sha256, principal, transport)
    SELECT first_seen_at, namespace, provider, key, 'claim', {ACQUIRED}, reason,
           state, token, version, holder, attempt_id, payload_sha256, i_principal, i_transport
    FROM c JOIN i ON i_namespace = namespace AND i_provider = provider AND i_key = key
)
SELECT namespace, provider, key FROM c
