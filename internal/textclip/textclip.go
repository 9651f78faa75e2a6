// Package textclip bounds text before claimd echoes it in an error, a log
// line or a report. Such text may carry a caller's or a file's input, as long
// as a whole request and hostile: echoed in full it would multiply a
// request's size in every status message, detail and log line that repeats
// it. A clipped text keeps a prefix, cut on a character boundary, and says
// how long the whole was, so the reader still knows what was refused.
package textclip

import (
	"strconv"
	"unicode/utf8"
)

// Prefix returns s cut to at most n bytes without splitting a UTF-8
// sequence, and whether it was cut.
func Prefix(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n], true
}

// Cut returns s when it is at most n bytes, otherwise its prefix, an
// ellipsis and its length: aaaa… (1048576 bytes).
func Cut(s string, n int) string {
	p, cut := Prefix(s, n)
	if !cut {
		return s
	}
	return p + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Quote is Cut for a message that quotes the value (strconv.Quote, so
// control characters show as escapes): "aaaa"… (1048576 bytes).
func Quote(s string, n int) string {
	p, cut := Prefix(s, n)
	if !cut {
		return strconv.Quote(s)
	}
	return strconv.Quote(p) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
