package redis

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// This file translates between tiers.Record and the values the scripts take
// and return: integers in decimal, times in unix microseconds, binary fields
// as raw bytes.

// Positions of the values reserve.lua returns after its verdict: the order of
// FIELDS in reserve.lua.
const (
	fPending = iota
	fPendingUntil
	fState
	fToken
	fVersion
	fAttempt
	fReason
	fReleased
	fHolder
	fAttemptID
	fPayload
	fResult
	fFirstSeen
	fLease
	fWindow
	fUpdated
	fOwner
	fMAC
	nFields
)

// ceilMillis rounds d up to whole milliseconds, at least 1: a key's expiry
// may come a little after the instant it stands for, never before, and a
// zero PEXPIRE would delete the key at once.
func ceilMillis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond > 0 {
		ms++
	}
	return max(ms, 1)
}

// windowEndMillis is t in unix milliseconds, rounded up, for PEXPIREAT. Up,
// so that the key never vanishes while its window is open; in the part of a
// millisecond it may outlive the window, reserve.lua answers TAKEOVER from
// the window field, so the extra instant decides nothing.
func windowEndMillis(t time.Time) int64 {
	us := t.UnixMicro()
	ms := us / 1000
	if us%1000 > 0 {
		ms++
	}
	return ms
}

// reply is reserve.lua's answer, decoded.
type reply struct {
	res tiers.FastResult
	// record: the verdict was reached on a record, whose fields came back
	// (res.Record), with its seal (mac). The verdict stands only once the
	// seal verifies (fast.go).
	record bool
	mac    string
	// bad is why the record's fields do not decode (a value the scripts
	// never write): the record is no more trusted than one whose seal fails.
	bad error
}

// decodeReserve decodes reserve.lua's reply. An error is a reply of the
// wrong shape; a record whose fields do not decode is reply.bad.
func decodeReserve(k tiers.Key, v []any) (reply, error) {
	if len(v) == 0 {
		return reply{}, errors.New("empty reply")
	}
	verdict, ok := v[0].(int64)
	if !ok {
		return reply{}, fmt.Errorf("verdict %v (%T), want an integer", v[0], v[0])
	}
	switch verdict {
	case verdictReserved:
		return reply{res: tiers.FastResult{Verdict: tiers.FastReserved, Record: tiers.Record{Key: k}}}, nil
	case verdictAskDurable:
		if len(v) != 2 {
			return reply{}, fmt.Errorf("ask reply of %d values, want 2", len(v))
		}
		return reply{res: tiers.FastResult{Verdict: tiers.FastAskDurable, Record: tiers.Record{Key: k}, Marker: str(v[1])}}, nil
	}
	if len(v) != 1+nFields {
		return reply{}, fmt.Errorf("reply of %d values, want %d", len(v), 1+nFields)
	}
	f := v[1:]
	res := tiers.FastResult{Verdict: tiers.FastDecided}
	switch verdict {
	case verdictTakeover:
		res.Verdict = tiers.FastTakeover
	case verdictMismatch:
		res.Outcome = tiers.OutcomePayloadMismatch
	case verdictDuplicate:
		res.Outcome = tiers.OutcomeDuplicate
	case verdictAgain:
		res.Outcome = tiers.OutcomeAcquired
	case verdictBusy:
		res.Outcome = tiers.OutcomeInProgress
	default:
		return reply{}, fmt.Errorf("unknown verdict %d", verdict)
	}
	rec, err := decodeRecord(k, f)
	res.Record = rec
	if verdict == verdictAgain {
		res.Reason = rec.Reason
	}
	return reply{res: res, record: true, mac: str(f[fMAC]), bad: err}, nil
}

// decodeRecord builds a record from the hash's values in FIELDS order.
func decodeRecord(k tiers.Key, f []any) (tiers.Record, error) {
	rec := tiers.Record{Key: k, Holder: str(f[fHolder]), AttemptID: str(f[fAttemptID])}
	var err error
	if rec.State, err = tiers.ParseState(str(f[fState])); err != nil {
		return rec, err
	}
	if rec.Reason, err = tiers.ParseReason(str(f[fReason])); err != nil {
		return rec, err
	}
	var n [7]int64
	for i, pos := range [...]int{fToken, fVersion, fAttempt, fFirstSeen, fLease, fWindow, fUpdated} {
		if n[i], err = parseInt(f, pos); err != nil {
			return rec, err
		}
	}
	rec.Token, rec.Version, rec.Attempt = uint64(n[0]), uint64(n[1]), uint32(n[2])
	rec.FirstSeenAt, rec.LeaseExpiresAt = fromMicros(n[3]), fromMicros(n[4])
	rec.WindowExpiresAt, rec.UpdatedAt = fromMicros(n[5]), fromMicros(n[6])
	rec.Released = str(f[fReleased]) == "1"
	if rec.Salt, rec.SecretHash, err = splitOwner(str(f[fOwner])); err != nil {
		return rec, err
	}
	rec.PayloadHash = bytesOrNil(f[fPayload])
	rec.Result = bytesOrNil(f[fResult])
	return rec, nil
}

// fieldNames names the positions of reserve.lua's reply, for errors.
var fieldNames = [nFields]string{
	"pending", "pending_until", "state", "token", "version", "attempt", "reason", "released",
	"holder", "attempt_id", "payload", "result", "first_seen", "lease", "window", "updated",
	"owner", "mac",
}

// joinOwner packs a record's salt and secret hash into the one 'owner'
// field: the salt's length (one byte), the salt, the secret hash. One field
// instead of two keeps a record's hash a field smaller in Redis (each field
// of a hash too large for a listpack costs about 60 bytes), which pays for
// the seal's own. "" when both are empty.
func joinOwner(salt, secretHash []byte) []byte {
	if len(salt) == 0 && len(secretHash) == 0 {
		return nil
	}
	b := make([]byte, 0, 1+len(salt)+len(secretHash))
	b = append(b, byte(len(salt)))
	b = append(b, salt...)
	return append(b, secretHash...)
}

// splitOwner is the inverse of joinOwner; empty parts read back as nil.
func splitOwner(v string) (salt, secretHash []byte, err error) {
	if v == "" {
		return nil, nil, nil
	}
	n := int(v[0])
	if 1+n > len(v) {
		return nil, nil, fmt.Errorf("field owner: a salt of %d bytes in %d", n, len(v)-1)
	}
	return bytesOrNil(v[1 : 1+n]), bytesOrNil(v[1+n:]), nil
}

func parseInt(f []any, pos int) (int64, error) {
	n, err := strconv.ParseInt(str(f[pos]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %s: %w", fieldNames[pos], err)
	}
	return n, nil
}

// str returns a reply value as a string; an unset field (nil) is "".
func str(v any) string {
	s, _ := v.(string)
	return s
}

// bytesOrNil returns a binary field; empty reads back as nil, as the record
// that was Put with nil or empty bytes cannot be told apart in a hash.
func bytesOrNil(v any) []byte {
	s := str(v)
	if s == "" {
		return nil
	}
	return []byte(s)
}

// fromMicros is the inverse of time.Time.UnixMicro, in UTC like the service
// clock.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
