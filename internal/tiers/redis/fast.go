package redis

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/tiers"
)

// The scripts, each documented in its own file. They run through go-redis's
// Script.Run: EVALSHA of the SHA-1 of the source, and on a NOSCRIPT reply
// (script cache flushed, failover to a replica that never saw it) EVAL of the
// full source, which caches it again. A Reserve or Put is one plain command
// in the common case (reserveFast, putFast) and a script only in the rest;
// an Abort, a Fill or a discard is one script. Concurrent calls share
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
	verdictRecord
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

// Reserve decides a claim in one round trip: one plain command places our
// pending marker or names the one it met, or returns the record the key
// holds (reserveFast; reserve.lua decides the rare rest, in a second), from
// which Reserve decides as tiers.DecideFast does once
// the record's seal verifies under the Store's keyring. A record that does
// not verify (forged, copied from another key, edited, sealed with a key
// this Store does not know, or not a record of this layout) is discarded
// (discard.lua, a second round trip, only then) and answered FastTakeover
// with Unverified set: the durable tier decides, and its answer is put in
// the record's place.
func (s *Store) Reserve(ctx context.Context, p tiers.ReserveParams) (tiers.FastResult, error) {
	if p.Nonce == "" {
		// An empty nonce could never be aborted: refuse it rather than
		// leave a marker only its expiry removes.
		return tiers.FastResult{}, fmt.Errorf("redis: Reserve %s: empty nonce", p.Key)
	}
	key := s.key(p.Key)
	verdict, arg, err := s.reserveFast(ctx, key, p)
	if err != nil {
		return tiers.FastResult{}, err
	}
	if verdict == 0 {
		// The rest, in reserve.lua, which decides them in one step.
		v, err := s.run(ctx, s.reserve, []string{key}, p.Now.UnixMicro(), p.Nonce, ceilMillis(p.PendingTTL)).Slice()
		if err != nil {
			return tiers.FastResult{}, s.fail(ctx, "reserve", key, err)
		}
		if verdict, arg, err = replyOf(v); err != nil {
			// A reply the script never gives. The durable tier can
			// still answer.
			return tiers.FastResult{}, tiers.Unavailable("redis", fmt.Errorf("reserve %s: %w", key, err))
		}
	}
	switch verdict {
	case verdictReserved:
		return tiers.FastResult{Verdict: tiers.FastReserved, Record: tiers.Record{Key: p.Key}}, nil
	case verdictAskDurable:
		return tiers.FastResult{Verdict: tiers.FastAskDurable, Record: tiers.Record{Key: p.Key}, Marker: arg}, nil
	}
	rec, mac, err := DecodeRecord(p.Key, []byte(arg))
	if err == nil && s.keys.Verify(&rec, mac) {
		inDurable := bytes.Equal(rec.Result, resultInDurable)
		if inDurable {
			rec.Result = nil
		}
		res, _ := tiers.DecideFast(&rec, nil, p)
		res.ResultInDurable = inDurable && res.Verdict == tiers.FastDecided
		return res, nil
	}
	// Not a record claimd wrote: discard it, so that the durable tier's
	// answer can take its place (a Put would not replace a forged record
	// that claims a newer version). A failed discard changes nothing the
	// answer depends on: the next Reserve of the key finds the record again.
	if err := s.run(ctx, s.discard, []string{key}, arg).Err(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return tiers.FastResult{}, ctxErr
		}
	}
	return tiers.FastResult{Verdict: tiers.FastTakeover, Record: tiers.Record{Key: p.Key}, Unverified: true}, nil
}

// reserveFast decides what it can of a Reserve in one plain command, no
// script: SET of our pending marker, only where the key is free, answering
// what the key held (SET NX GET). A free key is reserved (verdictReserved),
// a record comes back to be verified and decided (verdictRecord), another
// claim's live marker is named (verdictAskDurable): reserve.lua's answers,
// from what its GET would have read. What remains, a marker that is ours
// or past its time by our clock and a value of another type (a record in
// an earlier layout), is left to reserve.lua (verdict 0), which replaces
// them.
func (s *Store) reserveFast(ctx context.Context, key string, p tiers.ReserveParams) (verdict int64, arg string, err error) {
	ttl := ceilMillis(p.PendingTTL)
	now := p.Now.UnixMicro()
	v, err := s.run(ctx, nil, nil, "set", key, pendingMarker(now+ttl*1000, p.Nonce), "nx", "px", ttl, "get").Text()
	switch {
	case errors.Is(err, goredis.Nil):
		return verdictReserved, "", nil
	case goredis.HasErrorPrefix(err, "WRONGTYPE"):
		return 0, "", nil
	case err != nil:
		return 0, "", s.fail(ctx, "reserve", key, err)
	}
	if till, owner, ok := parseMarker(v); ok {
		if owner != p.Nonce && till > now {
			return verdictAskDurable, owner, nil
		}
		return 0, "", nil
	}
	return verdictRecord, v, nil
}

// pendingMarker is the value of a claim's pending marker: 'p', the unix
// microsecond its claim's lease ends, ':', the claim's nonce (reserve.lua
// writes the same).
func pendingMarker(tillMicros int64, nonce string) string {
	return "p" + strconv.FormatInt(tillMicros, 10) + ":" + nonce
}

// parseMarker reads a pending marker; ok is false for any other value (a
// record's first byte is its format, never 'p').
func parseMarker(v string) (tillMicros int64, nonce string, ok bool) {
	rest, ok := strings.CutPrefix(v, "p")
	if !ok {
		return 0, "", false
	}
	digits, nonce, ok := strings.Cut(rest, ":")
	if !ok || digits == "" {
		return 0, "", false
	}
	till, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return till, nonce, true
}

// replyOf checks the shape of reserve.lua's reply: its verdict and, for a
// record or a marker met, the value that comes with it.
func replyOf(v []any) (verdict int64, arg string, err error) {
	if len(v) == 0 {
		return 0, "", errors.New("empty reply")
	}
	verdict, ok := v[0].(int64)
	if !ok {
		return 0, "", fmt.Errorf("verdict %v (%T), want an integer", v[0], v[0])
	}
	switch {
	case verdict == verdictReserved && len(v) == 1:
		return verdict, "", nil
	case (verdict == verdictRecord || verdict == verdictAskDurable) && len(v) == 2:
		if arg, ok = v[1].(string); ok {
			return verdict, arg, nil
		}
	}
	return 0, "", fmt.Errorf("verdict %d with %d values", verdict, len(v))
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
// It keeps stored(rec), sealed.
func (s *Store) putRecord(ctx context.Context, rec tiers.Record, marker string) (bool, error) {
	if rec.Version == 0 || rec.State == tiers.StateUnspecified {
		return false, fmt.Errorf("redis: Put %s: record without version or state", rec.Key)
	}
	key := s.key(rec.Key)
	rec = stored(rec)
	value := EncodeRecord(&rec, s.keys.Sign(&rec))
	if marker == "" {
		wrote, done, err := s.putFast(ctx, key, &rec, value)
		if done || err != nil {
			return wrote, err
		}
	}
	return s.putScript(ctx, key, rec.Version, rec.WindowExpiresAt, value, marker)
}

// putFast is a Put in one plain command, no script: SET of the record until
// its window ends, answering what the key held (SET PXAT GET). The key held
// nothing, a pending marker or an older version of the record in the common
// case, which the record replaces as put.lua would. When it held the same
// or a newer version (a repair overtaken by a later write), that value goes
// back with put.lua, which restores it only while the key still holds what
// this Put wrote: between the two commands a reader may meet this older
// copy, which is safe (a copy in progress is confirmed with the durable
// tier; a terminal one is final within its window, and a copy of an
// earlier window answers nothing). A value of another type (an earlier
// layout) is left to put.lua (done is false).
func (s *Store) putFast(ctx context.Context, key string, rec *tiers.Record, value []byte) (wrote, done bool, err error) {
	text, err := s.run(ctx, nil, nil, "set", key, value, "pxat", windowEndMillis(rec.WindowExpiresAt), "get").Text()
	prev := []byte(text)
	switch {
	case errors.Is(err, goredis.Nil):
		return true, true, nil
	case goredis.HasErrorPrefix(err, "WRONGTYPE"):
		return false, false, nil
	case err != nil:
		return false, true, s.fail(ctx, "put", key, err)
	}
	if len(prev) == 0 || prev[0] == 'p' {
		return true, true, nil // a pending marker, replaced as put.lua does
	}
	cur, _, derr := DecodeRecord(rec.Key, prev)
	if derr != nil || !sameOrNewer(&cur, rec) {
		return true, true, nil // older, or no record of this layout: replaced as put.lua does
	}
	if _, err := s.putScript(ctx, key, cur.Version, cur.WindowExpiresAt, prev, ""); err != nil {
		return false, true, err
	}
	return false, true, nil
}

// sameOrNewer reports whether cur is the same or a newer version than rec,
// by (window end, version) as put.lua orders them.
func sameOrNewer(cur, rec *tiers.Record) bool {
	cw, rw := cur.WindowExpiresAt.UnixMicro(), rec.WindowExpiresAt.UnixMicro()
	return cw > rw || (cw == rw && cur.Version >= rec.Version)
}

// putScript is put.lua: value, the record of version and window, replaces
// only what is older (or, with a marker, only that marker).
func (s *Store) putScript(ctx context.Context, key string, version uint64, window time.Time, value []byte, marker string) (bool, error) {
	n, err := s.run(ctx, s.put, []string{key},
		version,
		window.UnixMicro(),
		windowEndMillis(window),
		value,
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

// run runs script on key's arguments, or with a nil script the command
// args, through the coalescer unless the Store was configured without one.
func (s *Store) run(ctx context.Context, script *goredis.Script, keys []string, args ...any) *goredis.Cmd {
	if s.coalesce == nil {
		return scriptRun{script: script, keys: keys, args: args}.runAlone(ctx, s.client)
	}
	return s.coalesce.run(ctx, script, keys, args...)
}
