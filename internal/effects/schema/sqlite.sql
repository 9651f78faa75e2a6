CREATE TABLE IF NOT EXISTS claimd_effects (
    namespace     TEXT    NOT NULL,
    provider      TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    fencing_token INTEGER NOT NULL,
    result        BLOB,
    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (namespace, provider, key)
);
