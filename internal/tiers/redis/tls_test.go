package redis

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/testenv/testcert"
	"github.com/claimd/claimd/internal/tiers"
)

// TestTLS runs the tier against a redis-server that speaks only TLS and,
// like Redis by default, requires a client certificate.
func TestTLS(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	ca, other := testcert.NewCA(t, "test CA"), testcert.NewCA(t, "other CA")
	srv := testenv.StartRedisTLS(t, ca)
	client := ca.Issue(t, "claimd")
	open := func(url string, roots *testcert.CA) (*Store, error) {
		s, err := New(ctx, Config{URL: url, TLS: &tls.Config{RootCAs: roots.Pool(), Certificates: []tls.Certificate{client.TLS}}})
		if err == nil {
			t.Cleanup(func() { s.Close() })
		}
		return s, err
	}

	s, err := open(srv.URL(), ca)
	if err != nil {
		t.Fatalf("New(%s) = %v", srv.URL(), err)
	}
	now := clock.NewFake(time.Now()).Now()
	k := tiers.Key{Namespace: testNS(), Provider: "stripe", Key: "evt_tls"}
	if res, err := s.Reserve(ctx, tiers.ReserveParams{Key: k, Now: now, Nonce: "n", PendingTTL: testPendingTTL}); err != nil || res.Verdict != tiers.FastReserved {
		t.Fatalf("Reserve over TLS = %+v, %v; want the key reserved", res, err)
	}

	wrong, err := open(srv.URL(), other)
	if err != nil {
		t.Fatalf("New with another CA = %v; New fails only on configuration, Ping reports the server", err)
	}
	if err := wrong.Ping(ctx); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("Ping with another CA = %v, want certificate signed by unknown authority", err)
	}

	plain := strings.Replace(srv.URL(), "rediss://", "redis://", 1)
	if _, err := open(plain, ca); err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Errorf("New(%s) with Config.TLS = %v, want an error asking for rediss://", plain, err)
	}
}
