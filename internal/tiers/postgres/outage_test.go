package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/postgres"
)

// TestTerminatedConnectionsAreNotUsed: every session of the store's pool
// is terminated by the server (as a restart does: each gets 57P01 and is
// closed), and the claims that follow at once, within pgxpool's one
// second without a ping, all succeed: no statement is sent on a connection
// the server already closed.
func TestTerminatedConnectionsAreNotUsed(t *testing.T) {
	e := newEnv(t)
	const app = "claimd_terminated_test"
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app) // to find its sessions
	u.RawQuery = q.Encode()
	s, err := postgres.New(context.Background(), postgres.Config{URL: u.String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	claimAll := func(prefix string, n int) []error {
		var (
			wg   sync.WaitGroup
			errs = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = s.Claim(e.ctx(), e.params(fmt.Sprintf("%s_%d", prefix, i)))
			})
		}
		wg.Wait()
		return errs
	}
	sessions := func() int {
		var n int
		if err := e.db.QueryRow(e.ctx(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, err := range claimAll("evt_warm", 32) {
		if err != nil {
			t.Fatalf("Claim(warm-up) error = %v", err)
		}
	}
	open := sessions()
	if open == 0 {
		t.Fatal("the store has no open session to terminate")
	}
	if _, err := e.db.Exec(e.ctx(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sessions() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the store's %d sessions still run 10s after pg_terminate_backend", open)
		}
	}
	for i, err := range claimAll("evt_after", 2*open+2) {
		if err != nil {
			t.Errorf("Claim %d after its %d sessions were terminated error = %v; want none sent on a closed connection", i, open, err)
		}
	}
	if _, err := s.Get(e.ctx(), tiers.Key{Namespace: "billing", Provider: "stripe", Key: "evt_after_0"}); err != nil {
		t.Errorf("Get(evt_after_0) error = %v", err)
	}
}
