-- 0004_effect_recovered: the audit row of a settle whose result an earlier
-- holder's effect fence supplied (TransitionRequest.effect_recovered): that
-- holder committed its effect in the handler's database and vanished before
-- settling, and a later holder found the fence and settled with its stored
-- result. 1 on such a row, 0 on every other (and on the rows written before
-- this migration, which is what they were). audit_log is STRICT, which has
-- no boolean type; the check keeps it one.
ALTER TABLE audit_log ADD COLUMN effect_recovered INTEGER NOT NULL DEFAULT 0 CHECK (effect_recovered IN (0, 1));
