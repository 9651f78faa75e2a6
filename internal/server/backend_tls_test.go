package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/testenv/testcert"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/seal"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// TestBackendTLS opens the tiers the way serve does, from its flags' values, on a
// Redis that speaks only TLS and requires a client certificate and a
// PostgreSQL that refuses connections without TLS, both verified against a
// test CA (rediss:// with --redis-ca; sslmode=verify-full&sslrootcert=).
// A server certificate of another CA must be refused by both.
func TestBackendTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca, other := testcert.NewCA(t, "backend CA"), testcert.NewCA(t, "other CA")
	rd := testenv.StartRedisTLS(t, ca)
	pg := testenv.StartPostgresWith(t, testenv.Options{TLS: ca}, nil)
	client := ca.Issue(t, "claimd")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// config is the flags' defaults with c's values (New loads the keyring
	// from --fast-tier-key-file).
	config := func(c TierConfig) *TierConfig {
		c.SQLiteDurability, c.PostgresSchema, c.FastKeyring = sqlite.DurabilityFull.String(), postgres.DefaultSchema, seal.Random()
		return &c
	}
	c := config(TierConfig{RedisURL: rd.URL(), RedisCA: ca.File(), RedisCert: client.CertFile, RedisKey: client.KeyFile, PostgresURL: pg.URL()})
	st, err := OpenTiers(ctx, c, nil, log)
	if err != nil {
		t.Fatalf("OpenTiers over TLS: %v", err)
	}
	defer st.Close()
	if st.Mode != "redis+postgres" {
		t.Fatalf("tiers mode = %q, want redis+postgres", st.Mode)
	}
	res, err := st.Store.Claim(ctx, tiers.ClaimParams{
		Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_tls"},
		Now: time.Now(), Lease: time.Minute, TTL: time.Hour,
	})
	if err != nil || res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim over TLS = %+v, %v; want ACQUIRED", res, err)
	}
	if n, err := st.Sources.FastLiveKeys(ctx); err != nil || n != 1 {
		t.Errorf("Redis keys after a claim = %d, %v; want 1 (the claim went through the TLS fast tier)", n, err)
	}

	// PostgreSQL's server certificate checked against another CA.
	u, err := url.Parse(pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslrootcert", other.File())
	u.RawQuery = q.Encode()
	if _, err := OpenTiers(ctx, config(TierConfig{PostgresURL: u.String()}), nil, log); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("OpenTiers with PostgreSQL verified against another CA = %v, want certificate signed by unknown authority", err)
	}

	// Redis's: the fast tier is optional at run time, so the store opens
	// and its Ping reports the refused certificate.
	wrong := config(TierConfig{RedisURL: rd.URL(), RedisCA: other.File(), RedisCert: client.CertFile, RedisKey: client.KeyFile})
	rcfg, err := wrong.redisConfig(log)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := redis.New(ctx, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if err := rs.Ping(ctx); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("Redis verified against another CA: Ping = %v, want certificate signed by unknown authority", err)
	}

	// TLS files with a plaintext URL are a usage error, not plaintext.
	plain := config(TierConfig{RedisURL: strings.Replace(rd.URL(), "rediss://", "redis://", 1), RedisCA: ca.File(), PostgresURL: pg.URL()})
	if err := plain.Validate(); err == nil || !strings.Contains(err.Error(), "rediss://") || !errors.Is(err, ErrUsage) {
		t.Errorf("--redis-ca with a redis:// URL: Validate = %v, want an error asking for rediss://", err)
	}
}
