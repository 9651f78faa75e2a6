// Package redis is the Redis fast tier of claimd: a cache of records in front
// of the durable tier that absorbs retry bursts (tiers.Fast).
//
// Each record is one Redis string under <prefix>{<namespace>:<provider>:<key>};
// the hash tag keeps a record on one Redis Cluster slot. Its value is
// compact (codec.go): a format byte and a protobuf-encoded message of
// tiers.TerminalCopy of the record, with its seal (internal/tiers/seal),
// which Reserve verifies before it answers from the record; a result longer
// than 64 bytes stays in the durable tier only. A pending marker is the same
// key holding "p<until_us>:<nonce>". Every step that reads and writes a key
// is one Lua script (reserve.lua, put.lua, abort.lua), run in one round
// trip.
//
// One string rather than a hash of fields: a settled record costs Redis
// about a third of what its hash of 18 fields did (issue 36: at most 300
// bytes, MEMORY USAGE, for a Stripe event with a small result), and Reserve
// parses one value instead of 19 replies. `claimd inspect` and Get read the
// durable tier, which is where a record should be looked at.
//
// The scripts never read Redis TIME: they decide against the time the
// service's clock gave in the call, like every other tier. Redis's own clock
// only expires keys, and a key's expiry is the record's window end, so the
// cache never holds a record the durable tier has already let go.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/seal"
)

// DefaultKeyPrefix prefixes every key of the fast tier.
const DefaultKeyPrefix = "idem:"

// DefaultTimeout bounds a dial, a read and a write when Config leaves them
// zero. It is short on purpose: a fast tier that does not answer quickly is
// worth less than going straight to the durable tier.
const DefaultTimeout = 500 * time.Millisecond

// DefaultPoolSize is the connection pool of a client built from a URL that
// names none: max(64, 10 per GOMAXPROCS). A claim holds a connection for
// one script, and the gRPC server admits any number of claims at once;
// with go-redis's own default (10 per GOMAXPROCS, 20 on two cores) 64
// callers retrying one key queued for connections instead of for Redis
// (BENCHMARKS.md's contended scenario ran about 12% faster with 64).
func DefaultPoolSize() int { return max(64, 10*runtime.GOMAXPROCS(0)) }

// Config configures a Store. Zero values mean defaults.
type Config struct {
	// URL is a go-redis URL (redis://, rediss://, unix://) naming one
	// server, a Redis Cluster or a Sentinel primary (see Deployment), e.g.
	// redis://127.0.0.1:6379/0. Timeouts and pool options given as URL
	// query parameters are kept unless the fields below override them.
	URL string
	// Client, when set, is used instead of URL (e.g. a *goredis.ClusterClient).
	// The Store does not close it and leaves its options alone.
	Client goredis.UniversalClient
	// PoolSize is the connection pool size of a client built from URL
	// (zero: the URL's pool_size, else DefaultPoolSize).
	PoolSize int
	// DialTimeout, ReadTimeout and WriteTimeout bound each network step of a
	// client built from URL (zero: DefaultTimeout). Waiting for a pooled
	// connection is bounded by ReadTimeout too.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// KeyPrefix prefixes every key (zero: DefaultKeyPrefix). It may not
	// hold '{' or '}': the hash tag after it must be the key's first.
	KeyPrefix string
	// TLS configures TLS for a client built from a rediss:// URL: the CA
	// that verifies the server, a client certificate. Its ServerName
	// defaults to the URL's host, and the URL's skip_verify=true still
	// wins. With a redis:// URL it is an error: it would be silently unused
	// and the connection plaintext.
	TLS *tls.Config
	// NoPipelining sends every script on its own round trip instead of
	// coalescing concurrent ones into pipelines (pipeline.go).
	NoPipelining bool
	// Keyring seals every record Put (internal/tiers/seal) and verifies
	// every record Reserve decides from. Every process that shares the
	// Redis must hold the same signing key: a record sealed by a key a
	// Store does not know is treated as absent there. Nil: a random key
	// of this Store's own, for a single process only (tests, a
	// development server).
	Keyring *seal.Keyring
}

// Store is the Redis fast tier. It is safe for concurrent use.
type Store struct {
	client goredis.UniversalClient
	owned  bool       // New built client, so Close closes it
	kind   Deployment // what URL named; 0 for a Client passed in
	prefix string

	reserve, put, abort, discard *goredis.Script
	coalesce                     *coalescer // nil with Config.NoPipelining
	keys                         *seal.Keyring
}

var _ tiers.Fast = (*Store)(nil)

// New returns a Store over cfg.Client, or over a client it builds from
// cfg.URL. It fails only on a bad configuration: a Redis that does not
// answer yet is not an error, because the fast tier is optional at run time
// (claims then go straight to the durable tier) and Ping reports it.
// New loads the scripts when Redis answers (waiting at most the client's
// timeouts when it does not), so the first claims skip the EVALSHA miss that
// Run would otherwise recover from.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.PoolSize < 0 {
		return nil, fmt.Errorf("redis: Config.PoolSize: %d is negative", cfg.PoolSize)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"DialTimeout", cfg.DialTimeout}, {"ReadTimeout", cfg.ReadTimeout}, {"WriteTimeout", cfg.WriteTimeout}} {
		if d.v < 0 {
			return nil, fmt.Errorf("redis: Config.%s: %v is negative (zero means %v)", d.name, d.v, DefaultTimeout)
		}
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		return nil, fmt.Errorf("redis: Config.KeyPrefix: %q holds a brace, which would move the hash tag", cfg.KeyPrefix)
	}
	s := &Store{
		client:  cfg.Client,
		prefix:  cfg.KeyPrefix,
		reserve: goredis.NewScript(reserveLua),
		put:     goredis.NewScript(putLua),
		abort:   goredis.NewScript(abortLua),
		discard: goredis.NewScript(discardLua),
		keys:    cfg.Keyring,
	}
	if s.keys == nil {
		s.keys = seal.Random()
	}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if s.client == nil {
		if cfg.URL == "" {
			return nil, errors.New("redis: Config needs a URL or a Client")
		}
		client, kind, err := newClient(cfg)
		if err != nil {
			// No error repeats the URL, which may hold a password.
			return nil, fmt.Errorf("redis: Config.URL: %w", err)
		}
		s.client, s.kind = client, kind
		s.owned = true
	}
	if !cfg.NoPipelining {
		s.coalesce = newCoalescer(s.client)
	}
	if err := s.loadScripts(ctx); err != nil && ctx.Err() != nil {
		s.Close()
		return nil, ctx.Err()
	}
	return s, nil
}

// applyTLS puts tc in place of the bare TLS settings go-redis derives
// from a rediss:// URL (server name and minimum version only).
func applyTLS(opts *goredis.Options, tc *tls.Config) error {
	if tc == nil {
		return nil
	}
	fromURL := opts.TLSConfig
	if fromURL == nil {
		return errors.New("redis: Config.TLS needs a rediss:// URL; with redis:// the connection would be plaintext")
	}
	tc = tc.Clone()
	if tc.ServerName == "" {
		tc.ServerName = fromURL.ServerName
	}
	tc.MinVersion = max(tc.MinVersion, fromURL.MinVersion)
	tc.InsecureSkipVerify = tc.InsecureSkipVerify || fromURL.InsecureSkipVerify
	opts.TLSConfig = tc
	return nil
}

// applyConfig sets the options of a client built from a URL: cfg's values
// first, then the URL's, then short defaults.
func applyConfig(opts *goredis.Options, cfg Config) {
	switch {
	case cfg.PoolSize > 0:
		opts.PoolSize = cfg.PoolSize
	case opts.PoolSize == 0: // the URL named none
		opts.PoolSize = DefaultPoolSize()
	}
	pick := func(cfgV, urlV time.Duration) time.Duration {
		switch {
		case cfgV > 0:
			return cfgV
		case urlV != 0:
			return urlV
		}
		return DefaultTimeout
	}
	opts.DialTimeout = pick(cfg.DialTimeout, opts.DialTimeout)
	opts.ReadTimeout = pick(cfg.ReadTimeout, opts.ReadTimeout)
	opts.WriteTimeout = pick(cfg.WriteTimeout, opts.WriteTimeout)
	if opts.PoolTimeout == 0 {
		// go-redis waits ReadTimeout+1s for a free connection; a fast tier
		// that makes a claim wait that long is no longer fast.
		opts.PoolTimeout = opts.ReadTimeout
	}
	if opts.MaxRetries == 0 {
		// One retry covers a pooled connection that died with a restarted
		// server; go-redis's three would triple the time to fall back. Every
		// script is safe to repeat: Reserve with its nonce, Put by version,
		// Abort by nonce.
		opts.MaxRetries = 1
	}
	if opts.DialerRetries == 0 {
		// One dial per attempt: go-redis's default of five dials 100ms apart
		// would spend half a second learning that Redis is down.
		opts.DialerRetries = 1
	}
	// A caller's deadline shorter than ReadTimeout must bound the call too.
	opts.ContextTimeoutEnabled = true
}

// loadScripts loads the scripts into Redis's script cache (SCRIPT LOAD; on a
// cluster client, into every primary). It stops at the first error.
func (s *Store) loadScripts(ctx context.Context) error {
	for _, src := range []string{reserveLua, putLua, abortLua, discardLua} {
		// go-redis's Script hashes its source as Redis does (SHA-1), so
		// EVALSHA then finds what SCRIPT LOAD put there.
		if err := s.client.ScriptLoad(ctx, src).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Deployment is the shape of Redis that Config.URL named (0 when Config
// passed a Client).
func (s *Store) Deployment() Deployment { return s.kind }

// Ping reports whether Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return s.fail(ctx, "ping", "", err)
	}
	return nil
}

// Close closes the client when New built it; a Client passed in Config
// belongs to its caller.
func (s *Store) Close() error {
	if s.coalesce != nil {
		s.coalesce.close()
	}
	if !s.owned {
		return nil
	}
	return s.client.Close()
}

// LiveKeys returns the number of keys Redis holds (DBSIZE, summed over the
// primaries of a cluster): the cached records plus pending markers. DBSIZE is
// O(1) where a SCAN of the prefix would walk the whole keyspace, so it is
// exact only when the database is dedicated to claimd, which is how the fast
// tier should be deployed (its eviction policy must not be shared with other
// data either).
func (s *Store) LiveKeys(ctx context.Context) (int64, error) {
	n, err := s.client.DBSize(ctx).Result()
	if err != nil {
		return 0, s.fail(ctx, "dbsize", "", err)
	}
	return n, nil
}

// fail translates an error of a Redis call. A done context passes through
// unwrapped: the caller gave up, Redis did not fail. Anything else, whether
// the network, a timeout, or a reply error (LOADING, READONLY after a
// failover, OOM), wraps tiers.ErrUnavailable: the fast tier is a cache, and
// the caller's answer to any failure of it is the same, going to the durable
// tier. For Put and Abort the write may or may not have happened; both
// outcomes are safe (Put is ordered by version, a marker left behind ends at
// pending_until).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		// A deadline reached inside go-redis surfaces as a network timeout.
		return ctxErr
	}
	if key != "" {
		err = fmt.Errorf("%s %s: %w", op, key, err)
	} else {
		err = fmt.Errorf("%s: %w", op, err)
	}
	return tiers.Unavailable("redis", err)
}
