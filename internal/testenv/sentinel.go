package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SentinelMaster is the name the sentinels started here monitor.
const SentinelMaster = "claimd"

// sentinels is how many sentinels watch the primary; quorum is a majority.
const (
	sentinels = 3
	quorum    = 2
)

// SentinelOptions configures StartRedisSentinel. Zero values mean defaults.
type SentinelOptions struct {
	// DownAfter is how long the primary must not answer before a sentinel
	// deems it down (down-after-milliseconds). Default 5s: long enough that a
	// loaded machine causes no failover nobody asked for. A failover test
	// sets it short.
	DownAfter time.Duration
}

// Sentinel is a real local Redis Sentinel setup: a primary, one replica and
// three sentinels (quorum two) on free loopback ports, without persistence.
type Sentinel struct {
	primary, replica *Server // as started; a failover swaps their roles
	sentinels        []*Server
}

// StartRedisSentinel starts a private Sentinel setup for one test, which may
// stop and start its nodes; it is closed in t.Cleanup.
func StartRedisSentinel(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	s, err := StartRedisSentinelProcess("", opts)
	if err != nil {
		t.Fatalf("testenv: private Redis Sentinel: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("testenv: close Redis Sentinel: %v", err)
		}
	})
	return s
}

// The Sentinel setup shared by a test binary (see RedisSentinel).
var (
	sentinelOnce   sync.Once
	sentinelShared *Sentinel
	sentinelErr    error
)

// RedisSentinel returns the URL of the Sentinel setup shared by this test
// binary (default options), started on first use and stopped by Main. Tests
// sharing it must use their own keys and leave its nodes running.
func RedisSentinel(t testing.TB) string {
	t.Helper()
	sentinelOnce.Do(func() {
		sentinelShared, sentinelErr = StartRedisSentinelProcess("", SentinelOptions{})
		if sentinelErr == nil {
			addCloser(sentinelShared.Close)
		}
	})
	if sentinelErr != nil {
		t.Fatalf("testenv: shared Redis Sentinel: %v", sentinelErr)
	}
	return sentinelShared.URL()
}

// StartRedisSentinelProcess starts the primary, its replica and the sentinels
// under dir ("" means os.TempDir()) and waits until the replica is in sync
// and every sentinel knows the replica and the other sentinels, so that a
// failover can happen at once. The caller must Close it.
func StartRedisSentinelProcess(dir string, opts SentinelOptions) (*Sentinel, error) {
	if opts.DownAfter <= 0 {
		opts.DownAfter = 5 * time.Second
	}
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	s := &Sentinel{}
	s.primary, err = startNode(bin, dir, "claimd-redis-primary-", "redis-server (primary)", dataNodeArgs)
	if err != nil {
		return nil, err
	}
	primaryPort := strconv.Itoa(s.primary.port)
	s.replica, err = startNode(bin, dir, "claimd-redis-replica-", "redis-server (replica)", func(port int, tmp string) []string {
		return append(dataNodeArgs(port, tmp), "--replicaof", "127.0.0.1", primaryPort)
	})
	if err != nil {
		return nil, errors.Join(err, s.Close())
	}
	for range sentinels {
		sn, err := startNode(bin, dir, "claimd-redis-sentinel-", "redis-server (sentinel)", func(port int, tmp string) []string {
			return []string{sentinelConfig(port, tmp, primaryPort, opts.DownAfter), "--sentinel"}
		})
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
		s.sentinels = append(s.sentinels, sn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := s.waitReady(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// sentinelConfig writes a sentinel's configuration file on its first start
// and returns its path. A sentinel rewrites its file with what it learns
// (replicas, other sentinels, the current primary); a restart keeps that.
func sentinelConfig(port int, tmp, primaryPort string, downAfter time.Duration) string {
	path := filepath.Join(tmp, "sentinel.conf")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %s
sentinel monitor %s 127.0.0.1 %s %d
sentinel down-after-milliseconds %[3]s %[6]d
sentinel failover-timeout %[3]s 10000
sentinel parallel-syncs %[3]s 1
`, port, tmp, SentinelMaster, primaryPort, quorum, downAfter.Milliseconds())
	// A write error shows up as the sentinel failing to start, with its log.
	os.WriteFile(path, []byte(conf), 0o644)
	return path
}

// waitReady polls until the replica's link is up and every sentinel sees one
// replica and the other sentinels.
func (s *Sentinel) waitReady(ctx context.Context) error {
	r := nodeClient(loopback(s.replica.port))
	err := poll(ctx, func(ctx context.Context) error {
		info, err := r.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up\r\n") {
			return errors.New("replica's link to the primary is not up")
		}
		return nil
	})
	r.Close()
	if err != nil {
		return err
	}
	for _, sn := range s.sentinels {
		c := nodeClient(loopback(sn.port))
		err := poll(ctx, func(ctx context.Context) error {
			m, err := c.Do(ctx, "SENTINEL", "MASTER", SentinelMaster).Result()
			if err != nil {
				return err
			}
			fields := sentinelFields(m)
			if fields["num-slaves"] != "1" || fields["num-other-sentinels"] != strconv.Itoa(sentinels-1) {
				return fmt.Errorf("sentinel sees %s replicas and %s other sentinels", fields["num-slaves"], fields["num-other-sentinels"])
			}
			return nil
		})
		c.Close()
		if err != nil {
			return fmt.Errorf("sentinel on port %d: %w", sn.port, err)
		}
	}
	return nil
}

// sentinelFields reads SENTINEL MASTER's reply: a flat list of names and
// values (RESP2) or a map (RESP3).
func sentinelFields(reply any) map[string]string {
	out := map[string]string{}
	switch v := reply.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			out[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, val := range v {
			out[fmt.Sprint(k)] = fmt.Sprint(val)
		}
	}
	return out
}

// URL returns the Sentinel URL claimd's --redis-url and go-redis's
// ParseFailoverURL read: redis://S1?addr=S2&addr=S3&master_name=claimd.
func (s *Sentinel) URL() string {
	var b strings.Builder
	b.WriteString("redis://" + loopback(s.sentinels[0].port) + "?")
	for _, sn := range s.sentinels[1:] {
		b.WriteString("addr=" + loopback(sn.port) + "&")
	}
	b.WriteString("master_name=" + SentinelMaster)
	return b.String()
}

// Primary and Replica return the data nodes in the roles they were started
// in; after a failover the sentinels may have swapped them.
func (s *Sentinel) Primary() *Server { return s.primary }

// Replica returns the node started as the primary's replica.
func (s *Sentinel) Replica() *Server { return s.replica }

// WaitPrimary polls until every sentinel names node as the primary, and
// node itself answers as one (role:master): the end of a failover.
func (s *Sentinel) WaitPrimary(ctx context.Context, node *Server) error {
	want := loopback(node.port)
	for _, sn := range s.sentinels {
		c := nodeClient(loopback(sn.port))
		err := poll(ctx, func(ctx context.Context) error {
			addr, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
			if err != nil {
				return err
			}
			if len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != want {
				return fmt.Errorf("sentinel names %v as the primary, want %s", addr, want)
			}
			return nil
		})
		c.Close()
		if err != nil {
			return fmt.Errorf("sentinel on port %d: %w", sn.port, err)
		}
	}
	n := nodeClient(want)
	defer n.Close()
	return poll(ctx, func(ctx context.Context) error {
		info, err := n.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master\r\n") {
			return fmt.Errorf("%s is not a primary yet", want)
		}
		return nil
	})
}

// Close stops every process and removes their directories.
func (s *Sentinel) Close() error {
	var errs []error
	for _, n := range append([]*Server{s.primary, s.replica}, s.sentinels...) {
		if n != nil {
			errs = append(errs, n.Close())
		}
	}
	return errors.Join(errs...)
}
