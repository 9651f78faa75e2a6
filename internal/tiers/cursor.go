package tiers

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// The cursors of the listings (ListClaims, ListAudit, ListDeferred). A cursor is the keyset position of
// a page's last item, prefixed with a fingerprint of the listing it belongs
// to (the method, and its filter or key), base64url-encoded so that it
// survives a URL and a log line. A cursor presented with another filter
// than the one that made it is ErrInvalidCursor: paging on with it would
// silently skip or repeat rows of the other listing. The fingerprint is a
// check against mistakes, not a secret: a caller that forges a position
// only moves where its own listing, in its own namespace, resumes.
//
// Both durable tiers use these encodings, so a cursor reads the same
// whichever tier made it.

// fingerprintBytes is how much of the listing's SHA-256 a cursor carries.
const fingerprintBytes = 8

// ClaimsPosition is where a ListClaims page ended: its last record's
// FirstSeenAt (at microsecond precision), Provider and Key.
type ClaimsPosition struct {
	FirstSeenAt time.Time
	Provider    string
	Key         string
}

// AuditPosition is where a ListAudit page ended: its last entry's At (at
// microsecond precision) and the store's row id, which orders entries of
// one instant.
type AuditPosition struct {
	At time.Time
	ID int64
}

// DeferredPosition is where a ListDeferred page ended: its last event's
// LastSeen (at microsecond precision) and Key.
type DeferredPosition struct {
	LastSeen time.Time
	Key      string
}

// fingerprint hashes a listing's identity: each part length-prefixed, so
// that no two listings share an encoding.
func fingerprint(parts ...string) []byte {
	h := sha256.New()
	for _, p := range parts {
		h.Write(binary.AppendUvarint(nil, uint64(len(p))))
		h.Write([]byte(p))
	}
	return h.Sum(nil)[:fingerprintBytes]
}

func (f ClaimFilter) fingerprint() []byte {
	keys := slices.Clone(f.Keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	states := slices.Clone(f.States)
	slices.Sort(states)
	states = slices.Compact(states)
	parts := []string{"claims", f.Namespace, f.Provider, f.EntityID,
		bound(f.FirstSeenAfter), bound(f.FirstSeenBefore), fmt.Sprint(len(keys))}
	parts = append(parts, keys...)
	for _, s := range states {
		parts = append(parts, s.String())
	}
	return fingerprint(parts...)
}

// bound renders a filter's time bound as the stores compare it.
func bound(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return fmt.Sprint(CeilMicro(t).UnixMicro())
}

// EncodeClaimsCursor is the cursor of a ListClaims page of f that ended at
// pos.
func EncodeClaimsCursor(f ClaimFilter, pos ClaimsPosition) string {
	b := f.fingerprint()
	b = binary.BigEndian.AppendUint64(b, uint64(pos.FirstSeenAt.UnixMicro()))
	b = binary.AppendUvarint(b, uint64(len(pos.Provider)))
	b = append(b, pos.Provider...)
	b = append(b, pos.Key...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeClaimsCursor reads a cursor of a ListClaims page of f. Errors:
// ErrInvalidCursor, for a cursor not made by EncodeClaimsCursor with f.
func DecodeClaimsCursor(f ClaimFilter, c string) (ClaimsPosition, error) {
	b, err := openCursor(c, f.fingerprint())
	if err != nil {
		return ClaimsPosition{}, err
	}
	if len(b) < 8 {
		return ClaimsPosition{}, errCursor("list claims")
	}
	pos := ClaimsPosition{FirstSeenAt: time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC()}
	b = b[8:]
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return ClaimsPosition{}, errCursor("list claims")
	}
	pos.Provider, pos.Key = string(b[w:w+int(n)]), string(b[w+int(n):])
	return pos, nil
}

// EncodeAuditCursor is the cursor of a ListAudit page of k that ended at
// pos.
func EncodeAuditCursor(k Key, pos AuditPosition) string {
	b := fingerprint("audit", k.Namespace, k.Provider, k.Key)
	b = binary.BigEndian.AppendUint64(b, uint64(pos.At.UnixMicro()))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.ID))
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeAuditCursor reads a cursor of a ListAudit page of k. Errors:
// ErrInvalidCursor, for a cursor not made by EncodeAuditCursor with k.
func DecodeAuditCursor(k Key, c string) (AuditPosition, error) {
	b, err := openCursor(c, fingerprint("audit", k.Namespace, k.Provider, k.Key))
	if err != nil {
		return AuditPosition{}, err
	}
	if len(b) != 16 {
		return AuditPosition{}, errCursor("list audit")
	}
	return AuditPosition{
		At: time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC(),
		ID: int64(binary.BigEndian.Uint64(b[8:])),
	}, nil
}

// Cursor is the cursor of a ListClaims page of f whose last record is last.
func (f ClaimFilter) Cursor(last Record) string {
	return EncodeClaimsCursor(f, ClaimsPosition{FirstSeenAt: last.FirstSeenAt, Provider: last.Key.Provider, Key: last.Key.Key})
}

// Cursor is the cursor of a ListDeferred page of p whose last event is
// last.
func (p ListDeferredParams) Cursor(last DeferredEvent) string {
	return EncodeDeferredCursor(p, DeferredPosition{LastSeen: last.LastSeen, Key: last.Key})
}

// EncodeDeferredCursor is the cursor of a ListDeferred page of p that
// ended at pos.
func EncodeDeferredCursor(p ListDeferredParams, pos DeferredPosition) string {
	b := fingerprint("deferred", p.Namespace, p.Provider, p.EntityID)
	b = binary.BigEndian.AppendUint64(b, uint64(pos.LastSeen.UnixMicro()))
	b = append(b, pos.Key...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeDeferredCursor reads p.After, a cursor of a ListDeferred page of
// the same listing as p. Errors: ErrInvalidCursor.
func DecodeDeferredCursor(p ListDeferredParams) (DeferredPosition, error) {
	b, err := openCursor(p.After, fingerprint("deferred", p.Namespace, p.Provider, p.EntityID))
	if err != nil {
		return DeferredPosition{}, err
	}
	if len(b) < 8 {
		return DeferredPosition{}, errCursor("list deferred")
	}
	return DeferredPosition{
		LastSeen: time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC(),
		Key:      string(b[8:]),
	}, nil
}

// openCursor decodes c and checks its fingerprint against fp; it returns
// the position's bytes.
func openCursor(c string, fp []byte) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < fingerprintBytes {
		return nil, errCursor("list")
	}
	if string(b[:fingerprintBytes]) != string(fp) {
		return nil, fmt.Errorf("%w: it was made by another listing (other filters or another key)", ErrInvalidCursor)
	}
	return b[fingerprintBytes:], nil
}

func errCursor(op string) error { return fmt.Errorf("%s: %w", op, ErrInvalidCursor) }
