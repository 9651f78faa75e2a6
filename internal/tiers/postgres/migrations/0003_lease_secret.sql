-- 0003_lease_secret: what proves ownership of a record beside its token.
--
-- secret_hash is the SHA-256 of the lease secret that only the owner's
-- ACQUIRED answer carried; Transition, Renew and Release must present a
-- secret that hashes to it (their UPDATE compares it with the token). salt is
-- what the secret was derived with, kept so that a repeated claim of the same
-- attempt is answered with the same secret. Both are written when ownership
-- changes hands (a new record or a takeover) and never leave the server; the
-- audit log has neither.
--
-- Rows claimed before this migration have neither: no write can prove
-- ownership of them (NOT_OWNER) until the next takeover (lease end, release
-- or a new window) gives them an owner that can. Their attempt_id is the
-- caller's raw value, which the fingerprints claims now carry never equal, so
-- a repeated claim of such an attempt is answered like any other claim.
--
-- Nullable without a default, so adding them rewrites no row; the checks pass
-- on NULL and keep an empty hash, which an empty presented one would match,
-- out of the table.
ALTER TABLE claims
    ADD COLUMN salt        bytea CHECK (octet_length(salt) = 16),
    ADD COLUMN secret_hash bytea CHECK (octet_length(secret_hash) = 32);
