package server

import (
	goredis "github.com/redis/go-redis/v9"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// invisibleText holds every character escapeLogAttr rewrites, between letters.
const invisibleText = "a\u0085b\u009bc\u061cd\u200ee\u200ff\u2028g\u2029h\u202ai\u202bj\u202ck\u202dl\u202em\u2066n\u2067o\u2068p\u2069q"

// invisibleEscaped is invisibleText as a log line shows it, once decoded.
const invisibleEscaped = `a\u0085b\u009bc\u061cd\u200ee\u200ff\u2028g\u2029h\u202ai\u202bj\u202ck\u202dl\u202em\u2066n\u2067o\u2068p\u2069q`

// rawInvisible reports the first character of s that escapeLogAttr should
// have rewritten.
func rawInvisible(s string) (rune, bool) {
	for _, r := range s {
		if invisibleRune(r) {
			return r, true
		}
	}
	return 0, false
}

// TestLogEscapesInvisible: claimd's logger, in both formats, writes no
// bidi control, C1 control or line separator raw, wherever a caller's
// string sits in a line (a string field, an error, a list, a group, the
// message); the JSON line decodes to the escaped text. Ordinary text,
// non-Latin scripts included, is untouched.
func TestLogEscapesInvisible(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			c := &LogConfig{LogLevel: "info", LogFormat: format}
			log, err := c.Logger(&buf)
			if err != nil {
				t.Fatal(err)
			}
			log.Info("refused "+invisibleText,
				"key", invisibleText,
				"err", errors.New("bad holder "+invisibleText),
				"names", []string{"ok", invisibleText},
				slog.Group("peer", "identity", invisibleText),
				"plain", "évènement 支付 مرحبا")
			out := buf.String()
			if r, ok := rawInvisible(out); ok {
				t.Fatalf("%s line carries %U raw: %q", format, r, out)
			}
			if !strings.Contains(out, "évènement 支付 مرحبا") {
				t.Errorf("%s line changed ordinary text: %q", format, out)
			}
			if format != "json" {
				return
			}
			var rec struct {
				Msg, Key, Err string
				Names         []string
				Peer          struct{ Identity string }
			}
			if err := json.Unmarshal([]byte(out), &rec); err != nil {
				t.Fatalf("decoding %q: %v", out, err)
			}
			for _, f := range []struct{ name, got, want string }{
				{"msg", rec.Msg, "refused " + invisibleEscaped},
				{"key", rec.Key, invisibleEscaped},
				{"err", rec.Err, "bad holder " + invisibleEscaped},
				{"names[1]", rec.Names[1], invisibleEscaped},
				{"peer.identity", rec.Peer.Identity, invisibleEscaped},
			} {
				if f.got != f.want {
					t.Errorf("field %s = %q, want %q", f.name, f.got, f.want)
				}
			}
		})
	}
}

// TestRedisLogsJoinTheLog: go-redis's own messages (here a failed dial)
// become records of claimd's log, not plain text lines within it.
func TestRedisLogsJoinTheLog(t *testing.T) {
	var buf bytes.Buffer
	c := LogConfig{LogLevel: "info", LogFormat: "json"}
	if _, err := c.Logger(&buf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { routeLibraryLogs(slog.New(slog.DiscardHandler)) })

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	client := goredis.NewClient(&goredis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer client.Close()
	if err := client.Ping(context.Background()).Err(); err == nil {
		t.Fatal("Ping of a closed port succeeded")
	}

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	found := false
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", l)
		}
		if rec["component"] == "go-redis" && rec["level"] == "WARN" && strings.Contains(rec["msg"].(string), "failed to dial") {
			found = true
		}
	}
	if !found {
		t.Errorf("log = %q, want a WARN record of component go-redis about the failed dial", buf.String())
	}
}
