CREATE TABLE IF NOT EXISTS claimd_effects (
    namespace     VARCHAR(63)     NOT NULL,
    provider      VARCHAR(63)     NOT NULL,
    `key`         VARCHAR(255)    NOT NULL,
    fencing_token BIGINT UNSIGNED NOT NULL,
    result        MEDIUMBLOB,
    created_at    TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (namespace, provider, `key`)
) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
