package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestParseDeployment: the URL alone tells one server, a cluster and a
// Sentinel primary apart, and contradictions are refused.
func TestParseDeployment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc    string
		url     string
		want    Deployment
		wantErr string
	}{
		{"one server", "redis://127.0.0.1:6379/0", Standalone, ""},
		{"one server over TLS with a password", "rediss://:pw@redis.example:6380/2", Standalone, ""},
		{"unix socket", "unix:///run/redis.sock?db=1", Standalone, ""},
		{"cluster by seeds", "redis://10.0.0.1:6379?addr=10.0.0.2:6379&addr=10.0.0.3:6379", Cluster, ""},
		{"cluster by one seed name", "redis://redis-cluster:6379?cluster=true", Cluster, ""},
		{"cluster=false is one server", "redis://redis:6379/0?cluster=false", Standalone, ""},
		{"cluster with database 0", "redis://a:1/0?addr=b:1", Cluster, ""},
		{"sentinel", "redis://s1:26379?addr=s2:26379&master_name=mymaster", Sentinel, ""},
		{"sentinel with one sentinel", "redis://s1:26379/0?master_name=mymaster", Sentinel, ""},
		{"cluster value not a bool", "redis://a:1?cluster=maybe", 0, "cluster="},
		{"empty master_name", "redis://s1:26379?master_name=", 0, "master_name is empty"},
		{"cluster and sentinel", "redis://s1:26379?master_name=m&cluster=true", 0, "not both"},
		{"cluster over a unix socket", "unix:///run/redis.sock?cluster=true", 0, "unix://"},
		{"cluster with database 3", "redis://a:1/3?addr=b:1", 0, "only database 0"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := ParseDeployment(tc.url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseDeployment(%q) error = %v, want one containing %q", tc.url, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseDeployment(%q) = %v, %v; want %v", tc.url, got, err, tc.want)
			}
		})
	}
}

// TestNewBuildsTheClientOfEachDeployment: New builds go-redis's client for
// the deployment, with the same short defaults as for one server, and no
// error ever repeats a password.
func TestNewBuildsTheClientOfEachDeployment(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: New must not need Redis to answer.
	tests := []struct {
		desc string
		url  string
		want Deployment
		// opts reads the options of the client New built.
		opts func(goredis.UniversalClient) (read time.Duration, pool int, ok bool)
	}{
		{"one server", "redis://127.0.0.1:1/0", Standalone, func(c goredis.UniversalClient) (time.Duration, int, bool) {
			cc, ok := c.(*goredis.Client)
			if !ok {
				return 0, 0, false
			}
			return cc.Options().ReadTimeout, cc.Options().PoolSize, true
		}},
		{"cluster", "redis://127.0.0.1:1?addr=127.0.0.1:2", Cluster, func(c goredis.UniversalClient) (time.Duration, int, bool) {
			cc, ok := c.(*goredis.ClusterClient)
			if !ok {
				return 0, 0, false
			}
			return cc.Options().ReadTimeout, cc.Options().PoolSize, true
		}},
		{"sentinel", "redis://127.0.0.1:1?master_name=m", Sentinel, func(c goredis.UniversalClient) (time.Duration, int, bool) {
			cc, ok := c.(*goredis.Client) // go-redis's failover client is a *Client
			if !ok {
				return 0, 0, false
			}
			return cc.Options().ReadTimeout, cc.Options().PoolSize, true
		}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := New(testCtx(t), Config{URL: tc.url, DialTimeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatalf("New(%q) error = %v", tc.url, err)
			}
			defer s.Close()
			if s.Deployment() != tc.want {
				t.Fatalf("New(%q).Deployment() = %v, want %v", tc.url, s.Deployment(), tc.want)
			}
			read, pool, ok := tc.opts(s.client)
			if !ok {
				t.Fatalf("New(%q) built a %T", tc.url, s.client)
			}
			if read != DefaultTimeout || pool != DefaultPoolSize() {
				t.Fatalf("New(%q) read timeout, pool = %v, %d; want %v, %d", tc.url, read, pool, DefaultTimeout, DefaultPoolSize())
			}
		})
	}

	for _, url := range []string{
		"redis://:s3cret@127.0.0.1:1?addr=no-port&cluster=true",
		"redis://user:s3cret@127.0.0.1:1?master_name=m&bogus=1",
		"redis://:s3cret@127.0.0.1:1/0?cluster=maybe",
		"redis://:s3cret@[::1/0",
	} {
		_, err := New(testCtx(t), Config{URL: url})
		if err == nil {
			t.Fatalf("New(%q) error = nil, want one", url)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("New(%q) error = %q repeats the password", url, err)
		}
	}
}
