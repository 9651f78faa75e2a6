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
	"github.com/claimd/claimd/internal/server"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// commonConfig is what the commands that touch the tiers or the registry
// need. Zero values are never used: defaults come from the flags.
type commonConfig struct {
	server.TierConfig
	Providers string
	ReviewAge time.Duration
	LogLevel  string
	LogFormat string
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

// bindRetention registers the retention flags, with the same names on serve
// and prune so that a manual pass deletes what the background ones would.
func bindRetention(fs *flag.FlagSet, r *server.RetentionConfig) {
	fs.DurationVar(&r.Grace, "grace", janitor.DefaultGrace, "keep claims this long past the end of their window before deleting them")
	fs.IntVar(&r.Batch, "batch", janitor.DefaultBatchSize, "claims deleted per statement (each batch holds its locks briefly)")
	fs.DurationVar(&r.Retention, "retention", janitor.DefaultRetention, "keep audit entries this long (PostgreSQL drops whole months once all of a month is older)")
	fs.StringVar(&r.AuditExportDir, "audit-export-dir", "", "PostgreSQL: before dropping an audit month, export it to this existing directory as <partition>.parquet "+
		"(claimd inspect --file reads it); a month whose export fails is kept and tried again")
}
