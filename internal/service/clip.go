package service

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Bounds on how much of a caller's input an error or a log line repeats. A
// refused field may be as long as a whole request (MaxRequestBytes); echoed
// in full it would come back as the status message, again in its details,
// and again in the log line, several times the request's size each.
const (
	// maxEchoBytes is how much of a caller's string a message quotes.
	maxEchoBytes = 32
	// maxDescBytes bounds one violation's description (it may embed text
	// derived from a delivery, e.g. a JSON member name).
	maxDescBytes = 256
	// maxMessageBytes bounds a status message, whatever built it.
	maxMessageBytes = 1024
)

// quote renders a caller's string for an error message: quoted in full
// when short, otherwise its first bytes, an ellipsis and its length:
// "aaaa…" (1048576 bytes).
func quote(s string) string {
	if len(s) <= maxEchoBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q (%d bytes)", truncate(s, maxEchoBytes)+"…", len(s))
}

// clip bounds a text that may embed a caller's input to n bytes: a longer
// one is cut, and says how long it was: aaaa… (1048576 bytes).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", truncate(s, n), len(s))
}

// logField is a caller's string as a log line or span carries it: in full
// when it could be valid (keys are at most MaxKeyBytes, and the full key is
// what finds the record), otherwise clipped to maxEchoBytes.
func logField(s string) string {
	if len(s) <= MaxKeyBytes {
		return s
	}
	return clip(s, maxEchoBytes)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for i := 0; i < utf8.UTFMax-1 && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n]
}
