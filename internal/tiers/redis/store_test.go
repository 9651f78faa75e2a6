package redis

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// failFast bounds how long a call may take to report a Redis that is gone:
// a refused connection, with go-redis's one retry.
const failFast = 300 * time.Millisecond

// ops are the calls of the fast tier, each as one function of a context.
func ops(s *Store, now time.Time) []struct {
	name string
	call func(ctx context.Context) error
} {
	k := tiers.Key{Namespace: "down", Provider: "stripe", Key: "evt_1"}
	return []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Reserve", func(ctx context.Context) error {
			_, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n", PendingTTL: testPendingTTL})
			return err
		}},
		{"Put", func(ctx context.Context) error { return s.Put(ctx, claimRecord(k, now)) }},
		{"Abort", func(ctx context.Context) error { return s.Abort(ctx, k, "n") }},
		{"Ping", s.Ping},
		{"LiveKeys", func(ctx context.Context) error { _, err := s.LiveKeys(ctx); return err }},
	}
}

// TestStoppedServer: with Redis gone every call fails quickly with an error
// wrapping tiers.ErrUnavailable, and the Store recovers when Redis is back
// (empty, scripts and all).
func TestStoppedServer(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	s := newStore(t, srv.URL())
	now := clock.NewFake(time.Now()).Now()
	for _, op := range ops(s, now) {
		if err := op.call(testCtx(t)); err != nil {
			t.Fatalf("%s() with Redis up error = %v", op.name, err)
		}
	}

	srv.Stop(t)
	for _, op := range ops(s, now) {
		start := time.Now()
		err := op.call(testCtx(t))
		elapsed := time.Since(start)
		t.Logf("%s() with Redis stopped failed after %v: %v", op.name, elapsed, err)
		if elapsed > failFast {
			t.Errorf("%s() with Redis stopped took %v, want under %v", op.name, elapsed, failFast)
		}
		if !errors.Is(err, tiers.ErrUnavailable) {
			t.Errorf("%s() with Redis stopped error = %v, want %v", op.name, err, tiers.ErrUnavailable)
		}
	}

	srv.Start(t)
	for _, op := range ops(s, now) {
		if err := op.call(testCtx(t)); err != nil {
			t.Errorf("%s() after Redis restarted error = %v", op.name, err)
		}
	}
}

// silentServer accepts connections and never answers: a hung Redis, or a
// network that drops replies.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "redis://" + ln.Addr().String() + "/0"
}

// TestSilentServer: a Redis that does not answer costs a claim the read
// timeouts (default 500ms, one retry), not go-redis's seconds, and then
// reads as unavailable.
func TestSilentServer(t *testing.T) {
	t.Parallel()
	url := silentServer(t)
	ctx := testCtx(t)
	start := time.Now()
	s := newStore(t, url) // New does not fail on a Redis that does not answer
	if elapsed := time.Since(start); elapsed > 3*DefaultTimeout {
		t.Errorf("New() over a silent server took %v, want under %v", elapsed, 3*DefaultTimeout)
	}
	start = time.Now()
	_, err := s.Reserve(ctx, tiers.ReserveParams{Key: tiers.Key{Namespace: "n", Provider: "p", Key: "k"}, Now: time.Now(), Nonce: "n", PendingTTL: testPendingTTL})
	elapsed := time.Since(start)
	if !errors.Is(err, tiers.ErrUnavailable) {
		t.Errorf("Reserve() against a silent server error = %v, want %v", err, tiers.ErrUnavailable)
	}
	if elapsed > 3*DefaultTimeout {
		t.Errorf("Reserve() against a silent server took %v, want under %v", elapsed, 3*DefaultTimeout)
	}
	t.Logf("Reserve() against a silent server failed after %v: %v", elapsed, err)
}

// TestContextErrors: a context that ends passes through as itself, not as
// an unavailable Redis, even when it ends inside go-redis.
func TestContextErrors(t *testing.T) {
	t.Parallel()
	k := tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_ctx"}
	p := tiers.ReserveParams{Key: k, Now: time.Now(), Nonce: "n", PendingTTL: testPendingTTL}
	tests := []struct {
		desc string
		url  string
		ctx  func(t *testing.T) context.Context
		want error
	}{
		{"cancelled before the call", testenv.Redis(t), func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled},
		{"deadline while Redis is silent", silentServer(t), func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s := newStore(t, tc.url)
			_, err := s.Reserve(tc.ctx(t), p)
			if !errors.Is(err, tc.want) || errors.Is(err, tiers.ErrUnavailable) {
				t.Fatalf("Reserve(%q) error = %v, want %v and not %v", k.Key, err, tc.want, tiers.ErrUnavailable)
			}
		})
	}
}

// TestNewConfig: bad configurations fail New; a missing Redis does not.
func TestNewConfig(t *testing.T) {
	t.Parallel()
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "redis://" + ln.Addr().String() + "/0"
	ln.Close()
	tests := []struct {
		desc    string
		cfg     Config
		wantErr bool
	}{
		{"neither URL nor Client", Config{}, true},
		{"URL of another scheme", Config{URL: "http://127.0.0.1:6379"}, true},
		{"negative pool size", Config{URL: closedURL, PoolSize: -1}, true},
		{"negative read timeout", Config{URL: closedURL, ReadTimeout: -time.Second}, true},
		{"brace in the key prefix", Config{URL: closedURL, KeyPrefix: "idem{"}, true},
		{"Redis not running", Config{URL: closedURL}, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := New(testCtx(t), tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New(%+v) error = %v, want error %v", tc.cfg, err, tc.wantErr)
			}
			if s != nil {
				s.Close()
			}
		})
	}
}

// TestApplyConfig: Config's values win over the URL's, which win over the
// short defaults.
func TestApplyConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		url  string
		cfg  Config
		want [7]any // dial, read, write, pool timeout, pool size, max retries, dialer retries
	}{
		{"defaults", "redis://127.0.0.1:1/0", Config{},
			[7]any{DefaultTimeout, DefaultTimeout, DefaultTimeout, DefaultTimeout, DefaultPoolSize(), 1, 1}},
		{"URL options kept", "redis://127.0.0.1:1/0?read_timeout=2s&pool_timeout=3s&max_retries=4&pool_size=7", Config{},
			[7]any{DefaultTimeout, 2 * time.Second, DefaultTimeout, 3 * time.Second, 7, 4, 1}},
		{"Config wins", "redis://127.0.0.1:1/0?read_timeout=2s&pool_size=7", Config{DialTimeout: time.Second, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, PoolSize: 3},
			[7]any{time.Second, 100 * time.Millisecond, 200 * time.Millisecond, 100 * time.Millisecond, 3, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			opts, err := goredis.ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			applyConfig(opts, tc.cfg)
			got := [7]any{opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout, opts.PoolSize, opts.MaxRetries, opts.DialerRetries}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("applyConfig(%q) (-want +got):\n%s", tc.url, diff)
			}
			if !opts.ContextTimeoutEnabled {
				t.Fatalf("applyConfig(%q) ContextTimeoutEnabled = false, want true", tc.url)
			}
		})
	}
}

// TestClose: the Store closes the client it built, never one it was given.
func TestClose(t *testing.T) {
	t.Parallel()
	url := testenv.Redis(t)
	ctx := testCtx(t)
	given := rawClient(t, url)
	s, err := New(ctx, Config{Client: given, URL: "redis://127.0.0.1:1/0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping() over the given client error = %v (Client must win over URL)", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := given.Ping(ctx).Err(); err != nil {
		t.Fatalf("given client Ping() after Store.Close error = %v, want it left open", err)
	}

	own, err := New(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	if err := own.Ping(ctx); !errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("Ping() after Close error = %v, want %v", err, tiers.ErrUnavailable)
	}
}

// TestLiveKeys counts records and pending markers of a dedicated database.
func TestLiveKeys(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	s := newStore(t, srv.URL())
	ctx := testCtx(t)
	now := clock.NewFake(time.Now()).Now()
	for _, key := range []string{"a", "b", "c"} {
		k := tiers.Key{Namespace: "live", Provider: "stripe", Key: key}
		if _, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n", PendingTTL: testPendingTTL}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, claimRecord(tiers.Key{Namespace: "live", Provider: "stripe", Key: "d"}, now)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LiveKeys(ctx); err != nil || n != 4 {
		t.Fatalf("LiveKeys() = %d, %v, want 4", n, err)
	}
}
