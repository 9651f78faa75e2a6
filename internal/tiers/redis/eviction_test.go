package redis

import (
	"errors"
	"net/url"
	"testing"

	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// TestEvictionPolicy reads the policy of a real Redis configured each way,
// and of one whose ACL refuses CONFIG.
func TestEvictionPolicy(t *testing.T) {
	srv := testenv.StartRedis(t)
	raw := rawClient(t, srv.URL())
	s := newStore(t, srv.URL())
	for _, tc := range []struct {
		policy string
		evicts bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true},
		{"allkeys-lfu", true},
		{"allkeys-random", true},
		{"volatile-lru", true}, // every claim key has an expiry
		{"volatile-ttl", true},
	} {
		if err := raw.ConfigSet(testCtx(t), "maxmemory-policy", tc.policy).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := s.EvictionPolicy(testCtx(t))
		if err != nil || got != tc.policy {
			t.Fatalf("EvictionPolicy() = %q, %v; want %q", got, err, tc.policy)
		}
		if EvictsClaims(got) != tc.evicts {
			t.Errorf("EvictsClaims(%q) = %v, want %v", got, !tc.evicts, tc.evicts)
		}
	}

	// A user whose ACL refuses CONFIG: the policy is unknown, not an outage.
	if err := raw.Do(testCtx(t), "ACL", "SETUSER", "claimd", "on", ">secret", "~*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("claimd", "secret")
	limited := newStore(t, u.String())
	if _, err := limited.EvictionPolicy(testCtx(t)); !errors.Is(err, ErrPolicyHidden) || errors.Is(err, tiers.ErrUnavailable) {
		t.Fatalf("EvictionPolicy(no CONFIG permission) error = %v, want ErrPolicyHidden", err)
	}

	// A Redis that does not answer is unavailable, not hidden.
	srv.Stop(t)
	if _, err := s.EvictionPolicy(testCtx(t)); !errors.Is(err, tiers.ErrUnavailable) || errors.Is(err, ErrPolicyHidden) {
		t.Fatalf("EvictionPolicy(stopped Redis) error = %v, want ErrUnavailable", err)
	}
}
