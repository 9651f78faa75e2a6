-- get reads one record: $1 namespace, $2 provider, $3 key.
SELECT {RECORD} FROM claims
WHERE namespace = $1 AND provider = $2 AND key = $3
