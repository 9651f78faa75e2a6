package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/tiers"
)

// The scripts, each documented in its own file. They run through go-redis's
// Script.Run: EVALSHA of the SHA-1 of the source, and on a NOSCRIPT reply
// (script cache flushed, failover to a replica that never saw it) EVAL of the
// full source, which caches it again. A Reserve or Put is therefore one round
// trip, two only right after the cache was lost. Concurrent calls share
// their round trips: the coalescer (pipeline.go) sends them as one pipeline.
var (
	//go:embed reserve.lua
	reserveLua string
	//go:embed put.lua
	putLua string
	//go:embed abort.lua
	abortLua string
	//go:embed discard.lua
	discardLua string
)

// Verdicts of reserve.lua (see its header).
const (
	verdictReserved = iota + 1
	_               // 2, PENDING, is no longer answered: a marker asks the durable tier
	verdictTakeover
	verdictMismatch
	verdictDuplicate
	verdictAgain
	verdictBusy
	verdictAskDurable
)

// key returns the Redis key of k: prefix{namespace:provider:key}. Namespaces
// and provider names cannot hold ':', so the layout is unambiguous; a '}' in
// the key only narrows the hash tag, and every script touches one key.
func (s *Store) key(k tiers.Key) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(k.Namespace) + len(k.Provider) + len(k.Key) + 4)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteString(k.Namespace)
	b.WriteByte(':')
	b.WriteString(k.Provider)
	b.WriteByte(':')
	b.WriteString(k.Key)
	b.WriteByte('}')
	return b.String()
}

// Reserve decides a claim from the cached record in one round trip
// (reserve.lua). A verdict reached on a record stands only when the record's
// seal verifies under the Store's keyring; one that does not (forged,
// copied from another key, edited, or sealed with a key this Store does not
// know) is discarded (discard.lua, a second round trip, only then) and
// answered FastTakeover with Unverified set: the durable tier decides, and
// its answer is put in the record's place.
func (s *Store) Reserve(ctx context.Context, p tiers.ReserveParams) (tiers.FastResult, error) {
	if p.Nonce == "" {
		// An empty nonce could never be aborted: refuse it rather than
		// leave a marker only its expiry removes.
		return tiers.FastResult{}, fmt.Errorf("redis: Reserve %s: empty nonce", p.Key)
	}
	key := s.key(p.Key)
	v, err := s.run(ctx, s.reserve, []string{key},
		p.Now.UnixMicro(), p.Nonce, ceilMillis(p.PendingTTL), p.PayloadHash, p.AttemptID).Slice()
	if err != nil {
		return tiers.FastResult{}, s.fail(ctx, "reserve", key, err)
	}
	r, err := decodeReserve(p.Key, v)
	if err != nil {
		// A reply the script never gives. The durable tier can still
		// answer.
		return tiers.FastResult{}, tiers.Unavailable("redis", fmt.Errorf("reserve %s: %w", key, err))
	}
	if !r.record || (r.bad == nil && s.keys.Verify(&r.res.Record, []byte(r.mac))) {
		return r.res, nil
	}
	// Not a record claimd wrote: discard it, so that the durable tier's
	// answer can take its place (a Put would not replace a forged record
	// that claims a newer version). A failed discard changes nothing the
	// answer depends on: the next Reserve of the key finds the record again.
	if err := s.run(ctx, s.discard, []string{key}, r.mac).Err(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return tiers.FastResult{}, ctxErr
		}
	}
	return tiers.FastResult{Verdict: tiers.FastTakeover, Record: tiers.Record{Key: p.Key}, Unverified: true}, nil
}

// Put caches rec until its window ends, unless Redis holds the same or a
// newer version (put.lua).
func (s *Store) Put(ctx context.Context, rec tiers.Record) error {
	_, err := s.putRecord(ctx, rec, "")
	return err
}

// Fill caches rec in place of the pending marker carrying nonce, and only
// there (put.lua with the marker's nonce).
func (s *Store) Fill(ctx context.Context, rec tiers.Record, nonce string) error {
	if nonce == "" {
		return fmt.Errorf("redis: Fill %s: empty nonce", rec.Key)
	}
	_, err := s.putRecord(ctx, rec, nonce)
	return err
}

// putRecord is Put (marker "") or Fill, also reporting whether it wrote.
func (s *Store) putRecord(ctx context.Context, rec tiers.Record, marker string) (bool, error) {
	if rec.Version == 0 || rec.State == tiers.StateUnspecified {
		return false, fmt.Errorf("redis: Put %s: record without version or state", rec.Key)
	}
	key := s.key(rec.Key)
	n, err := s.run(ctx, s.put, []string{key},
		rec.Version,
		windowEndMillis(rec.WindowExpiresAt),
		rec.State.String(),
		rec.Token,
		rec.Attempt,
		rec.Reason.String(),
		rec.Released, // go-redis sends a bool as 1 or 0
		rec.Holder,
		rec.AttemptID,
		rec.PayloadHash,
		rec.Result,
		rec.FirstSeenAt.UnixMicro(),
		rec.LeaseExpiresAt.UnixMicro(),
		rec.WindowExpiresAt.UnixMicro(),
		rec.UpdatedAt.UnixMicro(),
		joinOwner(rec.Salt, rec.SecretHash),
		s.keys.Sign(&rec),
		marker,
	).Int64()
	if err != nil {
		return false, s.fail(ctx, "put", key, err)
	}
	return n == 1, nil
}

// Abort deletes k's pending marker if it still carries nonce (abort.lua).
func (s *Store) Abort(ctx context.Context, k tiers.Key, nonce string) error {
	_, err := s.abortMarker(ctx, k, nonce)
	return err
}

// abortMarker is Abort, also reporting whether it deleted the marker.
func (s *Store) abortMarker(ctx context.Context, k tiers.Key, nonce string) (bool, error) {
	key := s.key(k)
	n, err := s.run(ctx, s.abort, []string{key}, nonce).Int64()
	if err != nil {
		return false, s.fail(ctx, "abort", key, err)
	}
	return n == 1, nil
}

// run runs script on key's arguments, through the coalescer unless the
// Store was configured without one.
func (s *Store) run(ctx context.Context, script *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	if s.coalesce == nil {
		return script.Run(ctx, s.client, keys, args...)
	}
	return s.coalesce.run(ctx, script, keys, args...)
}
