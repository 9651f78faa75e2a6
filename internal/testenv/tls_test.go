package testenv_test

import (
	"crypto/tls"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/testenv/testcert"
)

func TestRedisTLS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ca := testcert.NewCA(t, "test CA")
	other := testcert.NewCA(t, "other CA")
	s := testenv.StartRedisTLS(t, ca)
	if !strings.HasPrefix(s.URL(), "rediss://127.0.0.1:") {
		t.Fatalf("URL() = %q, want rediss://127.0.0.1:PORT/0", s.URL())
	}
	client := ca.Issue(t, "client")

	tests := []struct {
		desc    string
		url     string
		roots   *testcert.CA
		cert    *testcert.Leaf
		wantErr string
	}{
		{desc: "verified, with a client certificate", url: s.URL(), roots: ca, cert: client},
		{desc: "server signed by another CA", url: s.URL(), roots: other, cert: client, wantErr: "certificate signed by unknown authority"},
		{desc: "no client certificate", url: s.URL(), roots: ca, wantErr: "certificate required"},
		// --port 0: the TLS port answers a plaintext PING by hanging up.
		{desc: "plaintext", url: strings.Replace(s.URL(), "rediss://", "redis://", 1), wantErr: "EOF"},
	}
	for _, tc := range tests {
		opts, err := redis.ParseURL(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if tc.roots != nil {
			opts.TLSConfig.RootCAs = tc.roots.Pool()
		}
		if tc.cert != nil {
			opts.TLSConfig.Certificates = []tls.Certificate{tc.cert.TLS}
		}
		opts.MaxRetries = -1
		c := redis.NewClient(opts)
		err = c.Ping(ctx).Err()
		c.Close()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: PING = %v, want PONG", tc.desc, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: PING = %v, want an error containing %q", tc.desc, err, tc.wantErr)
		}
	}
}

func TestPostgresTLS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ca := testcert.NewCA(t, "test CA")
	other := testcert.NewCA(t, "other CA")
	s := testenv.StartPostgresWith(t, testenv.Options{TLS: ca}, migrate)
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if q := u.Query(); q.Get("sslmode") != "verify-full" || q.Get("sslrootcert") != ca.File() {
		t.Fatalf("URL() = %q, want sslmode=verify-full and sslrootcert=%s", s.URL(), ca.File())
	}

	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatalf("connect with verify-full: %v", err)
	}
	var ssl bool
	err = conn.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl)
	conn.Close(ctx)
	if err != nil || !ssl {
		t.Fatalf("pg_stat_ssl.ssl = %v, %v; want true", ssl, err)
	}

	with := func(key, value string) string {
		v := *u
		q := v.Query()
		q.Set(key, value)
		v.RawQuery = q.Encode()
		return v.String()
	}
	for _, tc := range []struct{ desc, url, wantErr string }{
		{"plaintext", with("sslmode", "disable"), "no pg_hba.conf entry"},
		{"server signed by another CA", with("sslrootcert", other.File()), "certificate signed by unknown authority"},
	} {
		err := pingPostgres(ctx, tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: connect = %v, want an error containing %q", tc.desc, err, tc.wantErr)
		}
	}
}
