-- 0003_entities: entity lifecycles (tiers.EntityEvent). The claim of an
-- event of a declared lifecycle is ordered against its entity's state in the
-- claim's own transaction, and the settle of its record advances the entity
-- in the settle's own transaction; these tables are what both read and write.

-- The entity a record's claim belongs to, and the state its event leads to
-- (entity_to): the settle, which is not told the event, needs it. All four
-- are '' on a record whose claim carried no entity.
ALTER TABLE claims ADD COLUMN lifecycle  TEXT NOT NULL DEFAULT '';
ALTER TABLE claims ADD COLUMN entity_id  TEXT NOT NULL DEFAULT '';
ALTER TABLE claims ADD COLUMN event_type TEXT NOT NULL DEFAULT '';
ALTER TABLE claims ADD COLUMN entity_to  TEXT NOT NULL DEFAULT '';

-- entities: one row per entity an event has acquired. An entity without a
-- row is in its lifecycle's initial state. busy_key/busy_token name the
-- claim holding the entity ('' and 0 when free); the hold is live only while
-- that record still has busy_token, is unreleased, not terminal and its
-- lease runs, which the claim checks against the claims row. version counts
-- applied events.
CREATE TABLE entities (
    namespace  TEXT    NOT NULL,
    provider   TEXT    NOT NULL,
    lifecycle  TEXT    NOT NULL,
    entity_id  TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    version    INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    updated_at INTEGER NOT NULL,
    busy_key   TEXT    NOT NULL DEFAULT '',
    busy_token INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, provider, lifecycle, entity_id)
) STRICT;

-- entity_events: the events that advanced an entity, in the order they
-- applied (id), written by the settle that applied each. Append-only.
CREATE TABLE entity_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace  TEXT    NOT NULL,
    provider   TEXT    NOT NULL,
    lifecycle  TEXT    NOT NULL,
    entity_id  TEXT    NOT NULL,
    event_type TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    from_state TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT;

CREATE INDEX entity_events_entity ON entity_events (namespace, provider, lifecycle, entity_id, id);

-- deferrals: one row per event (key) answered DEFERRED or SUPERSEDED, the
-- dead letters ListDeferred reads. superseded says what the last answer was;
-- awaiting is the event's From states (a JSON array); entity_state the
-- entity's state at the last answer (the entity's own row, when it has one,
-- is newer); applied is set by the settle of a later delivery of the key.
CREATE TABLE deferrals (
    namespace     TEXT    NOT NULL,
    provider      TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    lifecycle     TEXT    NOT NULL,
    entity_id     TEXT    NOT NULL,
    event_type    TEXT    NOT NULL,
    superseded    INTEGER NOT NULL CHECK (superseded IN (0, 1)),
    count         INTEGER NOT NULL CHECK (count >= 1),
    first_seen_at INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL,
    awaiting      TEXT    NOT NULL,
    entity_state  TEXT    NOT NULL,
    applied       INTEGER NOT NULL DEFAULT 0 CHECK (applied IN (0, 1)),
    PRIMARY KEY (namespace, provider, key)
) STRICT;

-- ListDeferred pages newest last seen first, of a provider or of one entity.
CREATE INDEX deferrals_last_seen ON deferrals (namespace, provider, last_seen_at, key);
CREATE INDEX deferrals_entity ON deferrals (namespace, provider, entity_id, last_seen_at, key);
-- CountDeferred counts the open ones, and the lost ones by first seen.
CREATE INDEX deferrals_open ON deferrals (provider, first_seen_at) WHERE applied = 0 AND superseded = 0;
