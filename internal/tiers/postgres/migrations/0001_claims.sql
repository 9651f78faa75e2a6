-- 0001_claims: the claims table, the source of truth of claimd. Same shape as
-- the SQLite tier's claims table; states and reasons are the numeric values of
-- tiers.State and tiers.Reason.

-- One row per (namespace, provider, key). The primary key is the real
-- uniqueness guarantee behind "exactly one ACQUIRED": concurrent first claims
-- all meet on it in INSERT ... ON CONFLICT.
--
-- The table is deliberately NOT partitioned. A partitioned table's unique key
-- must include the partition column (first_seen_at or window_expires_at), so
-- the same key claimed again in a later partition would not conflict with the
-- first row: a duplicate would be ACQUIRED. Old rows leave through Prune, in
-- bounded batches, once their window is over.
--
-- fillfactor 80 leaves room on each page for HOT updates: transitions, renews,
-- releases and lease takeovers touch no indexed column, so they rewrite the
-- row in place without new index entries.
CREATE TABLE claims (
    namespace         text        NOT NULL,
    provider          text        NOT NULL,
    key               text        NOT NULL,
    state             smallint    NOT NULL CHECK (state BETWEEN 1 AND 5),
    token             bigint      NOT NULL CHECK (token >= 1),
    version           bigint      NOT NULL CHECK (version >= 1),
    attempt           integer     NOT NULL CHECK (attempt >= 1),
    reason            smallint    NOT NULL CHECK (reason BETWEEN 1 AND 4),
    released          boolean     NOT NULL DEFAULT false,
    holder            text        NOT NULL DEFAULT '',
    attempt_id        text        NOT NULL DEFAULT '',
    payload_sha256    bytea,
    result            bytea,
    first_seen_at     timestamptz NOT NULL,
    lease_expires_at  timestamptz NOT NULL,
    window_expires_at timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    PRIMARY KEY (namespace, provider, key)
) WITH (fillfactor = 80);

-- Prune walks this index in window order and stops at its batch limit.
CREATE INDEX claims_window_expires_at ON claims (window_expires_at);
