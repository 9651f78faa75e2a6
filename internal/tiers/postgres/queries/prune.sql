-- prune deletes up to $2 records whose window ended before $1.
--
-- The inner SELECT walks claims_window_expires_at and locks its batch,
-- skipping rows a claim is writing right now. The outer condition is checked
-- again on the version of the row being deleted: a row taken over for a new
-- window after the batch was chosen no longer matches, so a record within
-- its window is never deleted.
DELETE FROM claims
WHERE window_expires_at < $1
  AND (namespace, provider, key) IN (
      SELECT namespace, provider, key FROM claims
      WHERE window_expires_at < $1
      ORDER BY window_expires_at
      LIMIT $2
      FOR UPDATE SKIP LOCKED)
