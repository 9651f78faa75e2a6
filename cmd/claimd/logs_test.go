package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
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
			c := &commonConfig{LogLevel: "info", LogFormat: format}
			log, err := c.logger(&buf)
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
