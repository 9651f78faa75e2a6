-- 0005_effect_recovered: the audit row of a settle whose result an earlier
-- holder's effect fence supplied (TransitionRequest.effect_recovered): that
-- holder committed its effect in the handler's database and vanished before
-- settling, and a later holder found the fence and settled with its stored
-- result. Such a row is the trace of a crash between commit and settle.
--
-- NOT NULL with a constant default adds the column without rewriting a row
-- (PostgreSQL 11+), and ALTER TABLE on the partitioned audit_log reaches
-- every partition, the ones created later too. Rows written before this
-- migration read false, which is what they were.
ALTER TABLE audit_log
    ADD COLUMN effect_recovered boolean NOT NULL DEFAULT false;
