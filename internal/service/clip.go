package service

import "github.com/claimd/claimd/internal/textclip"

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
func quote(s string) string { return textclip.Quote(s, maxEchoBytes) }

// logField is a caller's string as a log line or span carries it: in full
// when it could be valid (keys are at most MaxKeyBytes, and the full key is
// what finds the record), otherwise clipped to maxEchoBytes.
func logField(s string) string {
	if len(s) <= MaxKeyBytes {
		return s
	}
	return textclip.Cut(s, maxEchoBytes)
}
