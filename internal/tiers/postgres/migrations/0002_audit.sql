-- 0002_audit: the append-only audit log of every durable decision: each claim
-- outcome (ACQUIRED or not), transition, renew and release.
--
-- Range-partitioned by month on at, so that retention drops whole partitions
-- (DropAuditPartitionsBefore) instead of deleting rows. Partitions are named
-- audit_log_yYYYYmMM and created ahead of time by EnsureAuditPartitions (at
-- migrate and at start-up, for the current month and three ahead); a write
-- that finds no partition for its month creates it and retries.
--
-- There is deliberately no DEFAULT partition: rows that landed in it would be
-- out of reach of retention by partition (only a row-by-row DELETE could
-- remove them), and once it held rows of a month, creating that month's
-- partition would fail until they were moved out.
--
-- at is the service clock's reading for the call (the time the decision was
-- made at); logged_at is the database server's clock, kept for forensics only
-- (e.g. to spot a skewed service clock), never used for a decision.
CREATE TABLE audit_log (
    id         bigserial   NOT NULL,
    at         timestamptz NOT NULL,
    namespace  text        NOT NULL,
    provider   text        NOT NULL,
    key        text        NOT NULL,
    op         text        NOT NULL CHECK (op IN ('claim', 'transition', 'renew', 'release')),
    outcome    smallint,                -- claims: tiers.Outcome; NULL for other ops
    reason     smallint,                -- ACQUIRED claims: tiers.Reason; else NULL
    state      smallint    NOT NULL,    -- the record's state after the event
    token      bigint      NOT NULL,    -- the record's token after the event
    version    bigint      NOT NULL,    -- the record's version after the event
    holder     text        NOT NULL,    -- claims: the claimant; others: the record's holder
    attempt_id text        NOT NULL,    -- claims: the claimant's; others: the record's
    payload_sha256 bytea,               -- claims: the claimant's payload hash
    logged_at  timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (at);

-- Rows arrive in roughly increasing at, so a BRIN index answers time-range
-- scans for a fraction of a B-tree's size and write cost. Each partition
-- gets its own copy.
CREATE INDEX audit_log_at ON audit_log USING brin (at);
