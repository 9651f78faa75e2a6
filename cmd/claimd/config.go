package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/redis"
	"github.com/claimd/claimd/internal/tiers/seal"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tlsconfig"
)

// commonConfig is what the commands that touch the tiers or the registry
// need. Zero values are never used: defaults come from the flags.
type commonConfig struct {
	DataDir          string
	SQLiteDurability string
	RedisURL         string
	PostgresURL      string
	PostgresSchema   string
	// RedisCA, RedisCert and RedisKey are the TLS files of a rediss://
	// fast tier (PostgreSQL takes its own in the URL: sslrootcert,
	// sslcert, sslkey).
	RedisCA, RedisCert, RedisKey string
	// FastKeyring seals the Redis fast tier's records; serve loads it
	// (fastkey.go) before it opens the tiers.
	FastKeyring *seal.Keyring
	Providers   string
	ReviewAge   time.Duration
	LogLevel    string
	LogFormat   string
}

// bindCommon registers the flags of serve's tiers, registry and log. The
// URLs carry passwords: keep them out of process lists with
// CLAIMD_POSTGRES_URL and CLAIMD_REDIS_URL or a --config file.
func bindCommon(fs *flag.FlagSet, c *commonConfig) {
	bindDurable(fs, c)
	bindFast(fs, c)
	bindRegistry(fs, c)
	bindLog(fs, c)
}

// bindDurable registers the durable tier's flags (serve, migrate, prune).
func bindDurable(fs *flag.FlagSet, c *commonConfig) {
	fs.StringVar(&c.DataDir, "data-dir", "./data", "directory of the embedded tiers (used when no --postgres-url)")
	fs.StringVar(&c.SQLiteDurability, "sqlite-durability", sqlite.DurabilityFull.String(),
		"embedded tier: full fsyncs every commit; relaxed (synchronous=NORMAL) may lose the last answered claims on an OS crash or power loss")
	fs.StringVar(&c.PostgresURL, "postgres-url", "", "PostgreSQL durable tier URL; for TLS add ?sslmode=verify-full&sslrootcert=/path/ca.pem")
	fs.StringVar(&c.PostgresSchema, "postgres-schema", postgres.DefaultSchema, "PostgreSQL schema of claimd's tables, created by migrate when missing; "+
		"a deployment made with claimd 0.1 (tables in public) sets public")
}

// bindFast registers the fast tier's flags (serve).
func bindFast(fs *flag.FlagSet, c *commonConfig) {
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis fast tier URL; needs --postgres-url. One server: redis://host:6379/0; "+
		"Redis Cluster: redis://node1:6379?addr=node2:6379&addr=node3:6379 (or ?cluster=true with one seed); "+
		"Sentinel: redis://sentinel1:26379?addr=sentinel2:26379&master_name=NAME")
	fs.StringVar(&c.RedisCA, "redis-ca", "", "PEM CA bundle that verifies a rediss:// server (default: the system roots)")
	fs.StringVar(&c.RedisCert, "redis-cert", "", "PEM client certificate for a rediss:// server that requires one (Redis's tls-auth-clients); re-read when it changes")
	fs.StringVar(&c.RedisKey, "redis-key", "", "PEM private key of --redis-cert")
}

// bindRegistry registers the provider registry's flags (serve, providers).
func bindRegistry(fs *flag.FlagSet, c *commonConfig) {
	fs.StringVar(&c.Providers, "providers", "", "providers file replacing the built-in registry, or adding to it when the file says extends: builtin")
	fs.DurationVar(&c.ReviewAge, "horizon-review-age", 180*24*time.Hour, "reviewed_on older than this is overdue (warning and metric)")
}

// bindLog registers the log's flags.
func bindLog(fs *flag.FlagSet, c *commonConfig) {
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
}

// validate checks the flags that need no I/O, before anything is opened.
func (c *commonConfig) validate() error {
	if c.RedisURL != "" && c.PostgresURL == "" {
		return fmt.Errorf("%w: --redis-url needs --postgres-url: Redis is a cache, PostgreSQL the source of truth", errUsage)
	}
	if c.redisTLS() && !strings.HasPrefix(c.RedisURL, "rediss://") {
		return fmt.Errorf("%w: --redis-ca, --redis-cert and --redis-key need a rediss:// --redis-url", errUsage)
	}
	d, err := sqlite.ParseDurability(c.SQLiteDurability)
	if err != nil {
		return fmt.Errorf("%w: --sqlite-durability: %v", errUsage, err)
	}
	if d != sqlite.DurabilityFull && c.PostgresURL != "" {
		return fmt.Errorf("%w: --sqlite-durability=%s applies to the embedded tier only; PostgreSQL's durability is its own fsync and synchronous_commit", errUsage, d)
	}
	return nil
}

func (c *commonConfig) redisTLS() bool {
	return c.RedisCA != "" || c.RedisCert != "" || c.RedisKey != ""
}

// redisConfig is the fast tier's configuration: the URL and, for rediss://,
// the TLS files of the flags (go-redis's URL has no parameter for them).
func (c *commonConfig) redisConfig(log *slog.Logger) (redis.Config, error) {
	if c.FastKeyring == nil {
		return redis.Config{}, fmt.Errorf("%w: --redis-url needs --fast-tier-key-file", errUsage)
	}
	cfg := redis.Config{URL: c.RedisURL, Keyring: c.FastKeyring}
	if !c.redisTLS() {
		return cfg, nil
	}
	r, err := tlsconfig.New(tlsconfig.Config{
		Files:  tlsconfig.Files{CA: c.RedisCA, Cert: c.RedisCert, Key: c.RedisKey},
		Logger: log,
	})
	if err != nil {
		return cfg, fmt.Errorf("--redis-ca, --redis-cert, --redis-key: %w", err)
	}
	cfg.TLS = r.ClientConfig()
	return cfg, nil
}

func (c *commonConfig) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: %v", errUsage, c.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: escapeLogAttr}
	var log *slog.Logger
	switch strings.ToLower(c.LogFormat) {
	case "json":
		log = slog.New(slog.NewJSONHandler(w, opts))
	case "text":
		log = slog.New(slog.NewTextHandler(w, opts))
	default:
		return nil, fmt.Errorf("%w: --log-format %q: want json or text", errUsage, c.LogFormat)
	}
	routeLibraryLogs(log)
	return log, nil
}

func (c *commonConfig) registry() (*horizon.Registry, error) {
	if c.Providers != "" {
		return horizon.LoadFile(c.Providers)
	}
	return horizon.Default()
}

// retentionConfig is what a janitor pass needs; serve runs passes in the
// background, prune runs one.
type retentionConfig struct {
	Grace     time.Duration
	Batch     int
	Retention time.Duration
}

// bindRetention registers the retention flags, with the same names on serve
// and prune so that a manual pass deletes what the background ones would.
func bindRetention(fs *flag.FlagSet, r *retentionConfig) {
	fs.DurationVar(&r.Grace, "grace", janitor.DefaultGrace, "keep claims this long past the end of their window before deleting them")
	fs.IntVar(&r.Batch, "batch", janitor.DefaultBatchSize, "claims deleted per statement (each batch holds its locks briefly)")
	fs.DurationVar(&r.Retention, "retention", janitor.DefaultRetention, "keep audit entries this long (PostgreSQL drops whole months once all of a month is older)")
}

func (r *retentionConfig) check() error {
	switch {
	case r.Grace < 0:
		return fmt.Errorf("%w: --grace %v is negative", errUsage, r.Grace)
	case r.Batch <= 0:
		return fmt.Errorf("%w: --batch %d must be positive", errUsage, r.Batch)
	case r.Retention <= 0:
		return fmt.Errorf("%w: --retention %v must be positive", errUsage, r.Retention)
	}
	return nil
}

// janitor builds the janitor of st with these settings.
func (r *retentionConfig) janitor(st *stores, cfg janitor.Config) (*janitor.Janitor, error) {
	cfg.Target = st.target
	cfg.Grace, cfg.BatchSize, cfg.Retention = r.Grace, r.Batch, r.Retention
	return janitor.New(cfg)
}
