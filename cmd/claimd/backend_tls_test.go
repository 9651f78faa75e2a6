package main

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/testenv/testcert"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/seal"
)

// TestBackendTLS opens the tiers the way serve does, from its flags, on a
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
	flags := func(args ...string) *commonConfig {
		t.Helper()
		c := commonConfig{FastKeyring: seal.Random()} // serve loads it from --fast-tier-key-file
		fs := newFlagSet("serve")
		bindCommon(fs, &c)
		if err := parse(fs, args); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	redisFlags := []string{"--redis-url", rd.URL(), "--redis-ca", ca.File(), "--redis-cert", client.CertFile, "--redis-key", client.KeyFile}

	c := flags(append(redisFlags, "--postgres-url", pg.URL())...)
	st, err := openStores(ctx, c, nil, log)
	if err != nil {
		t.Fatalf("openStores over TLS: %v", err)
	}
	defer st.Close()
	if st.mode != "redis+postgres" {
		t.Fatalf("stores mode = %q, want redis+postgres", st.mode)
	}
	res, err := st.store.Claim(ctx, tiers.ClaimParams{
		Key: tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_tls"},
		Now: time.Now(), Lease: time.Minute, TTL: time.Hour,
	})
	if err != nil || res.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim over TLS = %+v, %v; want ACQUIRED", res, err)
	}
	if n, err := st.sources.FastLiveKeys(ctx); err != nil || n != 1 {
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
	if _, err := openStores(ctx, flags("--postgres-url", u.String()), nil, log); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("openStores with PostgreSQL verified against another CA = %v, want certificate signed by unknown authority", err)
	}

	// Redis's: the fast tier is optional at run time, so the store opens
	// and its Ping reports the refused certificate.
	wrong := flags("--redis-url", rd.URL(), "--redis-ca", other.File(), "--redis-cert", client.CertFile, "--redis-key", client.KeyFile)
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
	plain := flags("--redis-url", strings.Replace(rd.URL(), "rediss://", "redis://", 1), "--redis-ca", ca.File(), "--postgres-url", pg.URL())
	if err := plain.validate(); err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Errorf("--redis-ca with a redis:// URL: validate = %v, want an error asking for rediss://", err)
	}
}
