-- 0004_entities: entity lifecycles (tiers/entity.go). A claim that carries
-- an entity event is ordered against its entity's state under the entity's
-- row lock; settling it advances the entity in the same transaction.

-- The claim record remembers which entity event it is, and the state the
-- event leads to, so that the settle (which carries neither) can advance the
-- entity. Empty for a claim without an entity. NOT NULL with a constant
-- default adds the columns without rewriting a row (PostgreSQL 11+), on a
-- plain claims table and on one hash-partitioned by `claimd migrate
-- --partition-claims` (ALTER TABLE reaches every partition).
ALTER TABLE claims
    ADD COLUMN lifecycle  text NOT NULL DEFAULT '',
    ADD COLUMN entity_id  text NOT NULL DEFAULT '',
    ADD COLUMN event_type text NOT NULL DEFAULT '',
    ADD COLUMN entity_to  text NOT NULL DEFAULT '';

-- One row per entity: its state (a lifecycle state name), how many events
-- were applied to it, and which claim holds it (busy_key with its token;
-- '' and 0 when free). The row exists from the first claim that acquired
-- the entity on: a claim that did not proceed deletes the row it created
-- to lock (acquired false), so that a deferral alone creates no entity. A
-- holder counts only while its record still has that token, is neither
-- released nor terminal and its lease runs: a holder that vanished frees
-- the entity when its lease ends, with no janitor involved.
--
-- expires_at is the latest dedup window end among the entity's claims and
-- deferrals: while any of them may still be delivered again, the entity's
-- state matters. Prune deletes the entity (and its applied events) after it.
CREATE TABLE entities (
    namespace  text        NOT NULL,
    provider   text        NOT NULL,
    lifecycle  text        NOT NULL,
    entity_id  text        NOT NULL,
    state      text        NOT NULL,
    version    bigint      NOT NULL DEFAULT 0 CHECK (version >= 0),
    updated_at timestamptz NOT NULL,
    busy_key   text        NOT NULL DEFAULT '',
    busy_token bigint      NOT NULL DEFAULT 0,
    acquired   boolean     NOT NULL DEFAULT false, -- some claim has held it
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, provider, lifecycle, entity_id)
);

CREATE INDEX entities_expires_at ON entities (expires_at);

-- The events applied to an entity, in order: version is the entity's
-- version after the event (1 for the first). GetEntity reads them.
CREATE TABLE entity_events (
    namespace  text        NOT NULL,
    provider   text        NOT NULL,
    lifecycle  text        NOT NULL,
    entity_id  text        NOT NULL,
    version    bigint      NOT NULL CHECK (version >= 1),
    event_type text        NOT NULL,
    key        text        NOT NULL,
    from_state text        NOT NULL,
    to_state   text        NOT NULL,
    token      bigint      NOT NULL,
    applied_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, provider, lifecycle, entity_id, version),
    FOREIGN KEY (namespace, provider, lifecycle, entity_id) REFERENCES entities ON DELETE CASCADE
);

-- One row per event (key) that was ever DEFERRED or SUPERSEDED: the last
-- decision, how many deliveries met one, first and last seen, the states it
-- awaits (its From), and whether a later delivery of it was settled. A
-- deferral alone creates no entity row (entity_forget.sql): the lifecycle's
-- initial state is kept here to report the state of such an entity.
-- expires_at is the dedup window end of the last such delivery.
CREATE TABLE deferrals (
    namespace     text        NOT NULL,
    provider      text        NOT NULL,
    key           text        NOT NULL,
    lifecycle     text        NOT NULL,
    entity_id     text        NOT NULL,
    event_type    text        NOT NULL,
    superseded    boolean     NOT NULL,
    count         integer     NOT NULL CHECK (count >= 1),
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    awaiting      text[]      NOT NULL,
    initial_state text        NOT NULL, -- the entity's state while it has no row
    applied       boolean     NOT NULL DEFAULT false,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (namespace, provider, key)
);

-- ListDeferred pages newest first, of a provider or of one entity.
CREATE INDEX deferrals_last_seen ON deferrals (namespace, provider, last_seen_at DESC, key DESC);
CREATE INDEX deferrals_entity ON deferrals (namespace, provider, entity_id, last_seen_at DESC, key DESC);
-- Prune walks this one.
CREATE INDEX deferrals_expires_at ON deferrals (expires_at);
-- CountDeferred (the claimd_deferred_events gauge, on every scrape) reads
-- only the events still waiting: applied and superseded rows stay out of it.
CREATE INDEX deferrals_waiting ON deferrals (provider, first_seen_at) WHERE NOT applied AND NOT superseded;
