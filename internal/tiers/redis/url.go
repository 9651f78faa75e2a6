package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Deployment is the shape of Redis a URL names.
type Deployment int

// The deployments a URL can name, told apart by URL alone so that starting
// claimd never depends on Redis answering (the fast tier is optional).
const (
	// Standalone is one server (or one primary behind a proxy or a
	// managed endpoint): redis://host:6379/0, rediss://…, unix://….
	Standalone Deployment = iota + 1
	// Cluster is Redis Cluster, reached through seed nodes:
	// redis://host1:6379?addr=host2:6379&addr=host3:6379 (go-redis's
	// cluster URL), or redis://host:6379?cluster=true for one seed name
	// (a Kubernetes Service in front of every node).
	Cluster
	// Sentinel is a primary watched by Redis Sentinel, reached through the
	// sentinels: redis://sentinel1:26379?addr=sentinel2:26379&master_name=mymaster
	// (go-redis's failover URL; password= names the data nodes' password,
	// the URL's user info the sentinels').
	Sentinel
)

// String returns the deployment's name as the start-up log shows it.
func (d Deployment) String() string {
	switch d {
	case Standalone:
		return "standalone"
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return fmt.Sprintf("Deployment(%d)", int(d))
}

// clusterParam asks for Redis Cluster when the URL names a single seed. It is
// claimd's, not go-redis's, and is removed before go-redis parses the URL.
const clusterParam = "cluster"

// ParseDeployment tells which deployment rawURL names: Sentinel when it has a
// master_name parameter, Cluster when it names more than one address (addr=
// parameters) or has cluster=true, else Standalone. It checks only what
// decides the shape; New reports every other error.
func ParseDeployment(rawURL string) (Deployment, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return 0, err
	}
	return deployment(u)
}

func deployment(u *url.URL) (Deployment, error) {
	q := u.Query()
	cluster := false
	if v := q.Get(clusterParam); v != "" {
		switch strings.ToLower(v) {
		case "true", "1", "yes":
			cluster = true
		case "false", "0", "no":
		default:
			return 0, fmt.Errorf("cluster=%.20q: want true or false", v)
		}
	}
	switch {
	case q.Has("master_name"):
		if cluster {
			return 0, errors.New("cluster=true with master_name: a URL names Redis Cluster or a Sentinel primary, not both")
		}
		if q.Get("master_name") == "" {
			return 0, errors.New("master_name is empty: name the primary the sentinels watch")
		}
		return Sentinel, nil
	case cluster || q.Has("addr"):
		if u.Scheme == "unix" {
			return 0, errors.New("a unix:// URL names one server, not a cluster")
		}
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return 0, fmt.Errorf("database %.10q: Redis Cluster has only database 0", p)
		}
		return Cluster, nil
	}
	return Standalone, nil
}

// parseURL parses rawURL without ever repeating it in an error: it may hold
// a password.
func parseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a URL: %w", err)
	}
	return u, nil
}

// newClient builds the client of cfg.URL for its deployment, with cfg's
// values and the short defaults of applyConfig. Errors name no part of the
// URL but the one at fault; go-redis's parsers never repeat a password.
func newClient(cfg Config) (goredis.UniversalClient, Deployment, error) {
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, 0, err
	}
	d, err := deployment(u)
	if err != nil {
		return nil, 0, err
	}
	switch d {
	case Sentinel:
		opts, err := goredis.ParseFailoverURL(cfg.URL)
		if err != nil {
			return nil, 0, err
		}
		if err := applyFailover(opts, cfg); err != nil {
			return nil, 0, err
		}
		return goredis.NewFailoverClient(opts), d, nil
	case Cluster:
		q := u.Query()
		q.Del(clusterParam)
		u.RawQuery = q.Encode()
		u.Path = ""
		opts, err := goredis.ParseClusterURL(u.String())
		if err != nil {
			return nil, 0, err
		}
		if err := applyCluster(opts, cfg); err != nil {
			return nil, 0, err
		}
		return goredis.NewClusterClient(opts), d, nil
	}
	opts, err := goredis.ParseURL(cfg.URL)
	if err != nil {
		return nil, 0, err
	}
	if err := applyTLS(opts, cfg.TLS); err != nil {
		return nil, 0, err
	}
	applyConfig(opts, cfg)
	return goredis.NewClient(opts), d, nil
}

// applyCluster is applyTLS and applyConfig for a cluster client: the same
// settings apply to the client of each node. MaxRedirects (MOVED and ASK
// replies followed per command, default 3) is left to go-redis: a reshard
// needs at most a MOVED and an ASK per command.
func applyCluster(o *goredis.ClusterOptions, cfg Config) error {
	return nodeSettings{&o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
		&o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled, &o.TLSConfig}.apply(cfg)
}

// applyFailover is applyTLS and applyConfig for a Sentinel-backed client
// (TLS then covers the sentinels and the data nodes alike). A retry after a
// failover is what MaxRetries is for: the dead primary's pooled connections
// fail once, and the next attempt asks the sentinels for the new one.
func applyFailover(o *goredis.FailoverOptions, cfg Config) error {
	return nodeSettings{&o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
		&o.MaxRetries, &o.DialerRetries, &o.ContextTimeoutEnabled, &o.TLSConfig}.apply(cfg)
}

// nodeSettings points at the per-node settings that go-redis's cluster and
// failover options carry under the same names as a single client's, so that
// applyTLS and applyConfig, written for *goredis.Options, set them once.
type nodeSettings struct {
	poolSize                                            *int
	dialTimeout, readTimeout, writeTimeout, poolTimeout *time.Duration
	maxRetries, dialerRetries                           *int
	contextTimeout                                      *bool
	tlsConfig                                           **tls.Config
}

func (n nodeSettings) apply(cfg Config) error {
	t := &goredis.Options{
		PoolSize: *n.poolSize, DialTimeout: *n.dialTimeout, ReadTimeout: *n.readTimeout, WriteTimeout: *n.writeTimeout,
		PoolTimeout: *n.poolTimeout, MaxRetries: *n.maxRetries, DialerRetries: *n.dialerRetries,
		ContextTimeoutEnabled: *n.contextTimeout, TLSConfig: *n.tlsConfig,
	}
	if err := applyTLS(t, cfg.TLS); err != nil {
		return err
	}
	applyConfig(t, cfg)
	*n.poolSize, *n.dialTimeout, *n.readTimeout, *n.writeTimeout = t.PoolSize, t.DialTimeout, t.ReadTimeout, t.WriteTimeout
	*n.poolTimeout, *n.maxRetries, *n.dialerRetries = t.PoolTimeout, t.MaxRetries, t.DialerRetries
	*n.contextTimeout, *n.tlsConfig = t.ContextTimeoutEnabled, t.TLSConfig
	return nil
}
