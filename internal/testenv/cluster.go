package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// A Redis Cluster of three primaries, each with one replica: the smallest
// layout redis-cli --cluster create accepts with replicas, and the one Redis's
// own tutorial starts.
const (
	clusterPrimaries = 3
	clusterNodes     = 2 * clusterPrimaries
	// clusterNodeTimeout is long on purpose: a replica takes over when its
	// primary has not answered for this long, and a loaded 2-core machine
	// running tests under -race must not cause a failover nobody asked for.
	clusterNodeTimeout = 15 * time.Second
	// clusterSlots is the number of hash slots of every Redis Cluster.
	clusterSlots = 16384
)

// Cluster is a real local Redis Cluster: six redis-server processes with
// --cluster-enabled yes on free loopback ports (three primaries, three
// replicas), joined by redis-cli --cluster create. Like StartRedisProcess's
// server it runs without persistence, so a restart comes back empty (but
// keeps its place in the cluster: nodes.conf survives).
type Cluster struct {
	nodes []*Server
}

// StartRedisCluster starts a private Redis Cluster for one test, which may
// stop, start and reshard it; it is closed in t.Cleanup.
func StartRedisCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := StartRedisClusterProcess("")
	if err != nil {
		t.Fatalf("testenv: private Redis Cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("testenv: close Redis Cluster: %v", err)
		}
	})
	return c
}

// The Redis Cluster shared by a test binary (see RedisCluster).
var (
	clusterOnce   sync.Once
	clusterShared *Cluster
	clusterErr    error
)

// RedisCluster returns the URL of the Redis Cluster shared by this test
// binary, started on first use and stopped by Main. Tests sharing it must
// use their own keys and must not change its layout.
func RedisCluster(t testing.TB) string {
	t.Helper()
	clusterOnce.Do(func() {
		clusterShared, clusterErr = StartRedisClusterProcess("")
		if clusterErr == nil {
			addCloser(clusterShared.Close)
		}
	})
	if clusterErr != nil {
		t.Fatalf("testenv: shared Redis Cluster: %v", clusterErr)
	}
	return clusterShared.URL()
}

// StartRedisClusterProcess starts the six nodes under dir ("" means
// os.TempDir()), creates the cluster and waits until every node reports
// cluster_state:ok. The caller must Close it.
func StartRedisClusterProcess(dir string) (*Cluster, error) {
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found on PATH; %s", installHint)
	}
	c := &Cluster{}
	nodes := make([]*Server, clusterNodes)
	errs := make([]error, clusterNodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { nodes[i], errs[i] = startClusterNode(bin, dir) })
	}
	wg.Wait()
	for _, n := range nodes {
		if n != nil {
			c.nodes = append(c.nodes, n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, c.Close())
	}

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	// The first three addresses become primaries, the next three their
	// replicas.
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, errors.Join(fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out), c.Close())
	}
	if err := c.waitOK(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// startClusterNode starts one cluster-enabled redis-server. Its cluster bus
// port is chosen like its client port, not as port+10000 (which may be taken
// or out of range), and kept across restarts: the other nodes have it in
// their nodes.conf.
func startClusterNode(bin, dir string) (*Server, error) {
	busPort := 0
	var busErr error
	s, err := startNode(bin, dir, "claimd-redis-cluster-", "redis-server (cluster node)", func(port int, tmp string) []string {
		if busPort == 0 {
			busPort, busErr = freePort()
		}
		return append(dataNodeArgs(port, tmp),
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(busPort),
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout/time.Millisecond)),
		)
	})
	return s, errors.Join(err, busErr)
}

// dataNodeArgs are the arguments of every redis-server started here that
// holds data: loopback only, no persistence, in its own directory.
func dataNodeArgs(port int, tmp string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", tmp,
		"--save", "", "--appendonly", "no",
		"--daemonize", "no",
	}
}

// startNode starts a redis-server (data node or sentinel) whose command line
// args builds for a port and the node's new directory, and waits until it
// answers PING.
func startNode(bin, dir, prefix, name string, args func(port int, tmp string) []string) (*Server, error) {
	tmp, err := newDir(dir, prefix)
	if err != nil {
		return nil, err
	}
	s := &Server{
		name:    name,
		dir:     tmp,
		stopSig: syscall.SIGTERM,
		probe:   pingNode,
		command: func(port int) *exec.Cmd {
			cmd := exec.Command(bin, args(port, tmp)...)
			cmd.Dir = tmp
			cmd.SysProcAttr = sysProcAttr(nil)
			return cmd
		},
	}
	if err := s.launch(); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	s.url = fmt.Sprintf("redis://%s/0", loopback(s.port))
	return s, nil
}

// pingNode is the readiness probe of the nodes started here: PING answered
// PONG (a node still loading answers LOADING).
func pingNode(ctx context.Context, port int) error {
	c := nodeClient(loopback(port))
	defer c.Close()
	return c.Ping(ctx).Err()
}

// nodeClient is a plain client of one node, for administration: no retries,
// so a failure is seen at once.
func nodeClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, PoolSize: 1})
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// URL returns a cluster URL naming every node as a seed, in the form
// claimd's --redis-url and go-redis's ParseClusterURL read:
// redis://127.0.0.1:P1?addr=127.0.0.1:P2&addr=…
func (c *Cluster) URL() string {
	addrs := c.Addrs()
	var b strings.Builder
	b.WriteString("redis://" + addrs[0])
	for i, a := range addrs[1:] {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString("addr=" + a)
	}
	return b.String()
}

// Addrs returns the nodes' host:port addresses, primaries first as created.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = loopback(n.port)
	}
	return addrs
}

// Nodes returns the node servers, in the order of Addrs.
func (c *Cluster) Nodes() []*Server { return c.nodes }

// Stop stops every node (at once, so no replica outlives its primary long
// enough to take over). Clients see refused connections until Start.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.each(func(s *Server) error { return s.stop() }); err != nil {
		t.Fatalf("testenv: stop Redis Cluster: %v", err)
	}
}

// Start starts every node again on its port and directory and waits until
// every node reports cluster_state:ok. The nodes come back empty, in the
// roles and with the slots they had.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	err := c.each(func(s *Server) error { return s.start() })
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		err = c.waitOK(ctx)
	}
	if err != nil {
		t.Fatalf("testenv: restart Redis Cluster: %v", err)
	}
}

// Close stops every node and removes their directories.
func (c *Cluster) Close() error {
	return c.each(func(s *Server) error { return s.Close() })
}

func (c *Cluster) each(f func(*Server) error) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitOK polls every node until it reports cluster_state:ok with all 16384
// slots assigned and every node known: redis-cli returns once the nodes
// agree on a configuration, not once each has seen the others up.
func (c *Cluster) waitOK(ctx context.Context) error {
	for _, addr := range c.Addrs() {
		n := nodeClient(addr)
		err := poll(ctx, func(ctx context.Context) error {
			info, err := n.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			want := []string{"cluster_state:ok", "cluster_slots_ok:" + strconv.Itoa(clusterSlots), "cluster_known_nodes:" + strconv.Itoa(clusterNodes)}
			for _, w := range want {
				if !strings.Contains(info, w+"\r\n") {
					return fmt.Errorf("CLUSTER INFO has no %s", w)
				}
			}
			return nil
		})
		n.Close()
		if err != nil {
			return fmt.Errorf("cluster node %s: %w", addr, err)
		}
	}
	return nil
}

// poll calls f until it succeeds or ctx ends; the error then carries f's last.
func poll(ctx context.Context, f func(context.Context) error) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		err := f(fctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// ErrorStats returns, summed over every node, how many error replies of each
// kind the nodes sent (INFO errorstats: MOVED, ASK, NOSCRIPT …). A test reads
// it to show that clients really were redirected.
func (c *Cluster) ErrorStats(ctx context.Context) (map[string]int64, error) {
	sum := map[string]int64{}
	for _, addr := range c.Addrs() {
		n := nodeClient(addr)
		info, err := n.Info(ctx, "errorstats").Result()
		n.Close()
		if err != nil {
			return nil, fmt.Errorf("INFO errorstats on %s: %w", addr, err)
		}
		// errorstat_MOVED:count=12
		for _, line := range strings.Split(info, "\r\n") {
			rest, ok := strings.CutPrefix(line, "errorstat_")
			if !ok {
				continue
			}
			name, count, _ := strings.Cut(rest, ":count=")
			count, _, _ = strings.Cut(count, ",") // later Redis versions may add fields
			v, err := strconv.ParseInt(count, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("INFO errorstats on %s: %q: %w", addr, line, err)
			}
			sum[name] += v
		}
	}
	return sum, nil
}
