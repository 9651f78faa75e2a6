package postgres

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// A ListDeferred cursor is the keyset position of a page's last row:
// its last_seen_at in microseconds (PostgreSQL's precision, so the position
// compares equal to the stored value) and its key, base64url-encoded so
// that callers treat it as opaque.

// errBadCursor: a cursor this package did not make.
var errBadCursor = fmt.Errorf("postgres: list deferred: %w", tiers.ErrInvalidCursor)

func encodeCursor(at time.Time, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + ":" + key))
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", errBadCursor
	}
	micros, key, ok := strings.Cut(string(b), ":")
	if !ok {
		return time.Time{}, "", errBadCursor
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return time.Time{}, "", errBadCursor
	}
	return time.UnixMicro(us).UTC(), key, nil
}
