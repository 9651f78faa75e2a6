package sqlite

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// recordColumns are the columns of claims that make up a tiers.Record besides
// its key, in the order scanRecord reads them.
// entity_to, last, is not part of the Record: it is the state settling the
// record moves its entity to (entity.go).
const recordColumns = `state, token, version, attempt, reason, released, holder, attempt_id,
	salt, secret_hash, payload_sha256, result, first_seen_at, lease_expires_at, window_expires_at, updated_at,
	lifecycle, entity_id, event_type, entity_to`

const selectRecord = `SELECT ` + recordColumns + ` FROM claims
	WHERE namespace = ? AND provider = ? AND key = ?`

// upsertRecord writes a whole record. The decision was made in Go under the
// write lock, so the row is simply replaced by the decided one.
const upsertRecord = `INSERT INTO claims (namespace, provider, key, ` + recordColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (namespace, provider, key) DO UPDATE SET
		state = excluded.state,
		token = excluded.token,
		version = excluded.version,
		attempt = excluded.attempt,
		reason = excluded.reason,
		released = excluded.released,
		holder = excluded.holder,
		attempt_id = excluded.attempt_id,
		salt = excluded.salt,
		secret_hash = excluded.secret_hash,
		payload_sha256 = excluded.payload_sha256,
		result = excluded.result,
		first_seen_at = excluded.first_seen_at,
		lease_expires_at = excluded.lease_expires_at,
		window_expires_at = excluded.window_expires_at,
		updated_at = excluded.updated_at,
		lifecycle = excluded.lifecycle,
		entity_id = excluded.entity_id,
		event_type = excluded.event_type,
		entity_to = excluded.entity_to`

// scanRecord reads the record of k from row, the result of selectRecord; it
// returns nil when there is none.
func scanRecord(row *sql.Row, k tiers.Key) (*tiers.Record, error) {
	rec, _, err := scanStored(row, k)
	return rec, err
}

// rowScanner is what scanStored reads from: a *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// scanStored is scanRecord that also returns the record's entity_to. A row
// of a listing (*sql.Rows) has columns before recordColumns: before are
// their destinations.
func scanStored(row rowScanner, k tiers.Key, before ...any) (rec *tiers.Record, entityTo string, err error) {
	var (
		r                                   = tiers.Record{Key: k}
		state, reason                       string
		token, version, attempt, released   int64
		firstSeen, lease, window, updatedAt int64
		salt, secretHash, payload, result   []byte
	)
	err = row.Scan(append(before,
		&state, &token, &version, &attempt, &reason, &released, &r.Holder, &r.AttemptID,
		&salt, &secretHash, &payload, &result, &firstSeen, &lease, &window, &updatedAt,
		&r.Lifecycle, &r.EntityID, &r.EventType, &entityTo)...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	if r.State, err = tiers.ParseState(state); err != nil {
		return nil, "", fmt.Errorf("claims row %s: %w", k, err)
	}
	if r.Reason, err = tiers.ParseReason(reason); err != nil {
		return nil, "", fmt.Errorf("claims row %s: %w", k, err)
	}
	rec = &r
	rec.Token = uint64(token)
	rec.Version = uint64(version)
	rec.Attempt = uint32(attempt)
	rec.Released = released != 0
	rec.Salt = nilIfEmpty(salt)
	rec.SecretHash = nilIfEmpty(secretHash)
	rec.PayloadHash = nilIfEmpty(payload)
	rec.Result = nilIfEmpty(result)
	rec.FirstSeenAt = fromMicros(firstSeen)
	rec.LeaseExpiresAt = fromMicros(lease)
	rec.WindowExpiresAt = fromMicros(window)
	rec.UpdatedAt = fromMicros(updatedAt)
	return rec, entityTo, nil
}

// recordArgs are the arguments of upsertRecord for rec, which canonical has
// already brought to the stored precision, and its entity_to.
func recordArgs(rec *tiers.Record, entityTo string) []any {
	released := 0
	if rec.Released {
		released = 1
	}
	return []any{rec.Key.Namespace, rec.Key.Provider, rec.Key.Key,
		rec.State.String(), int64(rec.Token), int64(rec.Version), int64(rec.Attempt), rec.Reason.String(),
		released, rec.Holder, rec.AttemptID, rec.Salt, rec.SecretHash, rec.PayloadHash, rec.Result,
		rec.FirstSeenAt.UnixMicro(), rec.LeaseExpiresAt.UnixMicro(), rec.WindowExpiresAt.UnixMicro(), rec.UpdatedAt.UnixMicro(),
		rec.Lifecycle, rec.EntityID, rec.EventType, entityTo}
}

// canonical returns rec as it reads back from the database: times in UTC at
// microsecond precision, empty byte slices as nil, and no byte slice shared
// with the caller's params. Records are returned in this form whether they
// were just written or read, so a caller sees the same record either way.
func canonical(rec tiers.Record) tiers.Record {
	rec.Salt = nilIfEmpty(bytes.Clone(rec.Salt))
	rec.SecretHash = nilIfEmpty(bytes.Clone(rec.SecretHash))
	rec.PayloadHash = nilIfEmpty(bytes.Clone(rec.PayloadHash))
	rec.Result = nilIfEmpty(bytes.Clone(rec.Result))
	rec.FirstSeenAt = micros(rec.FirstSeenAt)
	rec.LeaseExpiresAt = micros(rec.LeaseExpiresAt)
	rec.WindowExpiresAt = micros(rec.WindowExpiresAt)
	rec.UpdatedAt = micros(rec.UpdatedAt)
	return rec
}

func micros(t time.Time) time.Time { return fromMicros(t.UnixMicro()) }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
