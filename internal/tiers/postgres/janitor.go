package postgres

import (
	"cmp"
	"context"
	"hash/fnv"
	"time"
)

// legacyJanitorLockKey is the pg_advisory_lock key of claimd 0.1's janitor,
// whose tables were in public: the ASCII bytes of "claimdj" read as a
// big-endian integer (0x636c61696d646a = 27985188330759274).
const legacyJanitorLockKey int64 = 0x636c61696d646a

// JanitorLockKey returns the pg_advisory_lock key that makes one claimd
// replica at a time the active janitor (retention: prune claims, create
// and drop audit partitions) of the tables in schema ("" for
// DefaultSchema). Advisory locks are per database, so each schema has its
// own key: deployments in two schemas of one database each run their own
// janitor. For public it is claimd 0.1's key, so that during a rolling
// upgrade old and new replicas still take turns; for any other schema it
// is derived from the name (FNV-1a, 64 bits). Nothing else sharing
// claimd's database may use these keys. To see which session holds one:
//
//	SELECT pid FROM pg_locks WHERE locktype = 'advisory'
//	  AND ((classid::bigint << 32) | objid::bigint) = <key>;
func JanitorLockKey(schema string) int64 {
	schema = cmp.Or(schema, DefaultSchema)
	if schema == legacySchema {
		return legacyJanitorLockKey
	}
	h := fnv.New64a()
	h.Write([]byte("claimd janitor\x00" + schema))
	return int64(h.Sum64())
}

// TryJanitorLock makes the caller the active janitor if no other session
// is: it takes a connection out of the pool for the caller's exclusive use
// and runs pg_try_advisory_lock(JanitorLockKey(schema)) on it, which never
// waits. On ok, the lock lives as long as that connection's session: release unlocks
// it and returns the connection (or closes it when the unlock cannot be
// confirmed, so a pooled connection never keeps the lock). When the
// session dies first (a network failure, a database restart) the lock goes
// with it and another replica may start a pass; every step of a pass is
// idempotent and safe alongside claims, so an overlap costs duplicate work,
// never a wrong deletion.
func (s *Store) TryJanitorLock(ctx context.Context) (release func(), ok bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fail(ctx, "janitor lock: acquire connection", err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, s.janitorKey).Scan(&ok); err != nil {
		// The lock may have been taken before the error: never pool the
		// session.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		conn.Conn().Close(cctx)
		cancel()
		conn.Release()
		return nil, false, fail(ctx, "janitor lock", err)
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var unlocked bool
		if err := conn.QueryRow(uctx, `SELECT pg_advisory_unlock($1)`, s.janitorKey).Scan(&unlocked); err != nil || !unlocked {
			conn.Conn().Close(uctx) // closing the session releases the lock
		}
		conn.Release()
	}, true, nil
}

// AuditPartitionsBefore returns the audit partitions that
// DropAuditPartitionsBefore(ctx, cutoff) would drop now, oldest first, and
// drops nothing (claimd prune --dry-run).
func (s *Store) AuditPartitionsBefore(ctx context.Context, cutoff time.Time) ([]string, error) {
	parts, err := expiringPartitions(ctx, s.pool)
	if err != nil {
		return nil, fail(ctx, "list audit partitions", err)
	}
	var names []string
	for _, p := range parts {
		if p.endsBy(cutoff) {
			names = append(names, p.name)
		}
	}
	return names, nil
}
