-- 0001_init: the claims table (one row per record) and the append-only audit
-- log. Same shape as the PostgreSQL tier's schema; times are INTEGER unix
-- microseconds (PostgreSQL timestamptz precision), states and reasons are the
-- names of tiers.State and tiers.Reason so that a row reads the same in the
-- sqlite3 shell as in the API.

-- claims: the source of truth. The primary key is the real uniqueness
-- guarantee behind "exactly one ACQUIRED". A rowid table, not WITHOUT ROWID:
-- result may hold up to 64 KiB, and SQLite advises WITHOUT ROWID only for small
-- rows.
CREATE TABLE claims (
    namespace         TEXT    NOT NULL,
    provider          TEXT    NOT NULL,
    key               TEXT    NOT NULL,
    state             TEXT    NOT NULL CHECK (state IN ('RECEIVED', 'VALIDATED', 'PROCESSING', 'SETTLED', 'FAILED')),
    token             INTEGER NOT NULL CHECK (token >= 1),
    version           INTEGER NOT NULL CHECK (version >= 1),
    attempt           INTEGER NOT NULL CHECK (attempt >= 1),
    reason            TEXT    NOT NULL CHECK (reason IN ('NEW', 'RELEASED', 'LEASE_EXPIRED', 'WINDOW_EXPIRED')),
    released          INTEGER NOT NULL DEFAULT 0 CHECK (released IN (0, 1)),
    holder            TEXT    NOT NULL DEFAULT '',
    attempt_id        TEXT    NOT NULL DEFAULT '',
    payload_sha256    BLOB,
    result            BLOB,
    first_seen_at     INTEGER NOT NULL,
    lease_expires_at  INTEGER NOT NULL,
    window_expires_at INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (namespace, provider, key)
) STRICT;

-- Prune walks this index in window order and stops at its batch limit.
CREATE INDEX claims_window_expires_at ON claims (window_expires_at);

-- audit_log: one row per durable decision (claim outcome, transition, renew,
-- release), written in the transaction that made the decision. Never updated;
-- rows leave only through PruneAudit past retention. AUTOINCREMENT so that an
-- id is never reused, even after the newest rows were pruned.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    namespace  TEXT    NOT NULL,
    provider   TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    op         TEXT    NOT NULL CHECK (op IN ('claim', 'transition', 'renew', 'release')),
    outcome    TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    from_state TEXT    NOT NULL DEFAULT '',
    to_state   TEXT    NOT NULL DEFAULT '',
    token      INTEGER NOT NULL DEFAULT 0,
    holder     TEXT    NOT NULL DEFAULT ''
) STRICT;

CREATE INDEX audit_log_at ON audit_log (at);
