package main

import (
	"context"
	"fmt"
	"log/slog"

	goredis "github.com/redis/go-redis/v9"
)

// routeLibraryLogs sends the messages that libraries log on their own into
// log, so that every line claimd writes is one record of its format.
// go-redis writes plain text lines to stderr by default ("redis: connection
// pool: failed to dial after 5 attempts: …"), which would break a JSON log
// that a collector parses line by line. Its logger is process-wide, so the
// last log built wins; a process builds one.
func routeLibraryLogs(log *slog.Logger) {
	goredis.SetLogger(redisLogger{log.With("component", "go-redis")})
}

// redisLogger is go-redis's Logging interface over slog. go-redis gives its
// messages no level; what it logs is trouble (failed dials, bad pooled
// connections), so they are warnings.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...))
}
