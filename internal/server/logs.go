package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// LogConfig is the log's flags (--log-level, --log-format), which every
// command has.
type LogConfig struct {
	LogLevel  string
	LogFormat string
}

// Logger is the log of c on w, every line through escapeLogAttr; the
// libraries' own messages join it (routeLibraryLogs).
func (c *LogConfig) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: %v", ErrUsage, c.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: escapeLogAttr}
	var log *slog.Logger
	switch strings.ToLower(c.LogFormat) {
	case "json":
		log = slog.New(slog.NewJSONHandler(w, opts))
	case "text":
		log = slog.New(slog.NewTextHandler(w, opts))
	default:
		return nil, fmt.Errorf("%w: --log-format %q: want json or text", ErrUsage, c.LogFormat)
	}
	routeLibraryLogs(log)
	return log, nil
}

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

// escapeLogAttr is the ReplaceAttr of claimd's log handler, so that every
// line goes through it: the service's request lines, the auth
// interceptor's refusals, the libraries' messages. It rewrites each
// invisible character that can reorder or split what a reader sees
// (invisibleRune) as the six characters \uXXXX, in string values, error
// values, lists of strings and the message itself. A caller chooses keys,
// holders, namespaces and certificate names; raw, U+202E makes a terminal
// or a log viewer show a line's text in another order than it is written,
// and U+0085, U+2028 and U+2029 end a line for some readers, which then
// see a line claimd never wrote. (JSON would escape U+2028 and U+2029
// itself, but neither the rest nor anything in the text format.) The
// rewrite is one way: a caller that sends the six characters \u202e reads
// the same, which is the price of a log line a human can trust at a
// glance. Control characters below U+0080 need nothing here: both
// handlers escape or quote them.
func escapeLogAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); hasInvisible(s) {
			a.Value = slog.StringValue(escapeInvisible(s))
		}
	case slog.KindAny:
		switch v := a.Value.Any().(type) {
		case error:
			if s := v.Error(); hasInvisible(s) {
				a.Value = slog.StringValue(escapeInvisible(s))
			}
		case []string:
			if slices.ContainsFunc(v, hasInvisible) {
				out := make([]string, len(v))
				for i, s := range v {
					out[i] = escapeInvisible(s)
				}
				a.Value = slog.AnyValue(out)
			}
		}
	}
	return a
}

// invisibleRune reports whether r is a character a log line must not carry
// raw: the C1 controls (U+0085 NEL among them, and U+009B, which some
// terminals take for an escape sequence), the line and paragraph
// separators U+2028 and U+2029, and the bidirectional controls: U+061C,
// U+200E and U+200F (marks), U+202A–U+202E (embeddings and overrides) and
// U+2066–U+2069 (isolates).
func invisibleRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f,
		r == 0x061c, r == 0x200e, r == 0x200f,
		r == 0x2028, r == 0x2029,
		r >= 0x202a && r <= 0x202e,
		r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

func hasInvisible(s string) bool { return strings.IndexFunc(s, invisibleRune) >= 0 }

// escapeInvisible rewrites each invisibleRune of s as \uXXXX.
func escapeInvisible(s string) string {
	if !hasInvisible(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s {
		if invisibleRune(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
