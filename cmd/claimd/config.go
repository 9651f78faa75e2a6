package main

import (
	"flag"
	"time"

	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/filewatch"
	"github.com/claimd/claimd/internal/janitor"
	"github.com/claimd/claimd/internal/server"
	"github.com/claimd/claimd/internal/tiers/postgres"
	"github.com/claimd/claimd/internal/tiers/sqlite"
)

// The flags of the parts of server.Config that more than one command has.
// The URLs carry passwords: keep them out of process lists with
// CLAIMD_POSTGRES_URL and CLAIMD_REDIS_URL or a --config file.

// bindDurable registers the durable tier's flags (serve, migrate, prune).
func bindDurable(fs *flag.FlagSet, c *server.TierConfig) {
	fs.StringVar(&c.DataDir, "data-dir", "./data", "directory of the embedded tiers (used when no --postgres-url)")
	fs.StringVar(&c.SQLiteDurability, "sqlite-durability", sqlite.DurabilityFull.String(),
		"embedded tier: full fsyncs every commit; relaxed (synchronous=NORMAL) may lose the last answered claims on an OS crash or power loss")
	fs.StringVar(&c.PostgresURL, "postgres-url", "", "PostgreSQL durable tier URL; for TLS add ?sslmode=verify-full&sslrootcert=/path/ca.pem")
	fs.StringVar(&c.PostgresSchema, "postgres-schema", postgres.DefaultSchema, "PostgreSQL schema of claimd's tables, created by migrate when missing; "+
		"a deployment made with claimd 0.1 (tables in public) sets public")
}

// bindFast registers the fast tier's flags (serve).
func bindFast(fs *flag.FlagSet, c *server.TierConfig) {
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis fast tier URL; needs --postgres-url. One server: redis://host:6379/0; "+
		"Redis Cluster: redis://node1:6379?addr=node2:6379&addr=node3:6379 (or ?cluster=true with one seed); "+
		"Sentinel: redis://sentinel1:26379?addr=sentinel2:26379&master_name=NAME")
	fs.StringVar(&c.RedisCA, "redis-ca", "", "PEM CA bundle that verifies a rediss:// server (default: the system roots)")
	fs.StringVar(&c.RedisCert, "redis-cert", "", "PEM client certificate for a rediss:// server that requires one (Redis's tls-auth-clients); re-read when it changes")
	fs.StringVar(&c.RedisKey, "redis-key", "", "PEM private key of --redis-cert")
}

// bindRegistry registers the provider registry's flags (serve, providers).
func bindRegistry(fs *flag.FlagSet, c *server.RegistryConfig) {
	fs.StringVar(&c.Providers, "providers", "", "providers file replacing the built-in registry, or adding to it when the file says extends: builtin")
	fs.DurationVar(&c.ReviewAge, "horizon-review-age", 180*24*time.Hour, "reviewed_on older than this is overdue (warning and metric)")
}

// bindLog registers the log's flags.
func bindLog(fs *flag.FlagSet, c *server.LogConfig) {
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
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

// bindSecurity registers the flags that protect serve's listeners and
// its fast tier's records.
func bindSecurity(fs *flag.FlagSet, s *server.SecurityConfig) {
	fs.StringVar(&s.TLSCert, "tls-cert", "", "PEM certificate chain of both listeners (TLS 1.2+); re-read when it changes")
	fs.StringVar(&s.TLSKey, "tls-key", "", "PEM private key of --tls-cert; re-read when it changes")
	fs.StringVar(&s.TLSClientCA, "tls-client-ca", "", "PEM CA bundle: gRPC callers, HTTP API callers and /metrics scrapers must present a certificate it signed (mTLS); re-read when it changes")
	fs.StringVar(&s.TLSIdentity, "tls-identity", string(auth.IdentityURI), "the one part of a client certificate that names its principal in the auth file: uri (its first URI SAN, as a SPIFFE ID), dns (its first DNS SAN) or cn (its subject common name); no other part is read, and a certificate whose identity names no principal is refused")
	fs.StringVar(&s.TLSCRL, "tls-crl", "", "certificate revocation list of the --tls-client-ca CA (PEM or DER): a client certificate it lists is refused at the TLS handshake; re-read when it changes")
	fs.StringVar(&s.AuthFile, "auth-file", "", "auth file (YAML): principals, their token hashes (optionally with expires:) or client certificate identities, namespaces and roles; re-read on SIGHUP and when it changes (see --file-check-interval); with it, /metrics needs a principal with role metrics or admin. Empty: no authentication")
	fs.StringVar(&s.FastTierKeyFile, "fast-tier-key-file", "", "file of the keys that seal every record claimd keeps in Redis (HMAC-SHA-256), so that whoever can write to Redis cannot forge an answer: one hex key a line (openssl rand -hex 32), at least 32 bytes, # comments; the first key signs, every key verifies (rotate: add the new key first on every replica, remove the old one after the longest provider ttl). Required with --redis-url, the same file on every replica; with --insecure and none, one is generated into --data-dir")
	fs.BoolVar(&s.Insecure, "insecure", false, "waive the start-up checks (a non-loopback listener without TLS and authentication, --tls-client-ca without --auth-file, an auth file, TLS key or fast-tier key file that other users may read, --redis-url without --fast-tier-key-file); logs a warning at every start")
	fs.BoolVar(&s.Reflection, "reflection", true, "serve gRPC server reflection (grpcurl list/describe)")
	fs.DurationVar(&s.FileCheckInterval, "file-check-interval", filewatch.DefaultInterval,
		"how often, at most, the TLS files and the auth file are checked for a replacement (on the next handshake or call after it); SIGHUP re-reads them at once")
}
