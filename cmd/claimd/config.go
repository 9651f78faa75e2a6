package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/claimd/claimd/internal/horizon"
)

// commonConfig is what every command that touches the tiers or the registry
// needs. Zero values are never used: defaults come from the flags.
type commonConfig struct {
	DataDir     string
	RedisURL    string
	PostgresURL string
	Providers   string
	ReviewAge   time.Duration
	LogLevel    string
	LogFormat   string
}

// bindCommon registers the common flags on fs. URLs default to their
// environment variables so that secrets need not appear in a process list.
func bindCommon(fs *flag.FlagSet, c *commonConfig) {
	fs.StringVar(&c.DataDir, "data-dir", "./data", "directory of the embedded tiers (used when no --postgres-url)")
	fs.StringVar(&c.RedisURL, "redis-url", os.Getenv("CLAIMD_REDIS_URL"), "Redis fast tier URL (env CLAIMD_REDIS_URL); needs --postgres-url")
	fs.StringVar(&c.PostgresURL, "postgres-url", os.Getenv("CLAIMD_POSTGRES_URL"), "PostgreSQL durable tier URL (env CLAIMD_POSTGRES_URL)")
	fs.StringVar(&c.Providers, "providers", "", "providers file replacing the embedded registry")
	fs.DurationVar(&c.ReviewAge, "horizon-review-age", 180*24*time.Hour, "reviewed_on older than this is overdue (warning and metric)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log format: json or text")
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("claimd "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	return nil
}

// validate checks the flags that need no I/O, before anything is opened.
func (c *commonConfig) validate() error {
	if c.RedisURL != "" && c.PostgresURL == "" {
		return fmt.Errorf("%w: --redis-url needs --postgres-url: Redis is a cache, PostgreSQL the source of truth", errUsage)
	}
	return nil
}

func (c *commonConfig) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: %v", errUsage, c.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.LogFormat) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want json or text", errUsage, c.LogFormat)
}

func (c *commonConfig) registry() (*horizon.Registry, error) {
	if c.Providers != "" {
		return horizon.LoadFile(c.Providers)
	}
	return horizon.Default()
}
