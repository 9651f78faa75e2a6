-- 0002_lease_secret: what proves ownership of a record beside its token.
--
-- secret_hash is the SHA-256 of the lease secret that only the owner's
-- ACQUIRED answer carried; Transition, Renew and Release must present a
-- secret that hashes to it. salt is what the secret was derived with, kept
-- so that a repeated claim of the same attempt is answered with the same
-- secret. Both are written when ownership changes hands (a new record or a
-- takeover) and never leave the server.
--
-- Rows claimed before this migration have neither: no write can prove
-- ownership of them (NOT_OWNER) until the next takeover (lease end, release
-- or a new window) gives them an owner that can. Their attempt_id is the
-- caller's raw value, which the fingerprints claims now carry never equal, so
-- a repeated claim of such an attempt is answered like any other claim.
ALTER TABLE claims ADD COLUMN salt BLOB;
ALTER TABLE claims ADD COLUMN secret_hash BLOB;
