CREATE TABLE IF NOT EXISTS claimd_effects (
    namespace     text        NOT NULL,
    provider      text        NOT NULL,
    key           text        NOT NULL,
    fencing_token bigint      NOT NULL,
    result        bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, provider, key)
);
