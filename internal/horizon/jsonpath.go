package horizon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// pathStep is one step of a JSON path: an object member or an array index.
type pathStep struct {
	key     string
	index   int
	isIndex bool
}

// maxIndexDigits bounds an array index; no webhook body has a billion items.
const maxIndexDigits = 9

// parsePath parses a dot path with array indexes: a.b[0].c, or [0].id for a
// body that is an array. Keys are any characters but . [ ] + | and white
// space or control characters (+ and | join and separate rules); indexes are
// decimal without leading zeros, so that each path has one spelling.
func parsePath(s string) ([]pathStep, error) {
	if s == "" {
		return nil, errors.New("path is empty")
	}
	var steps []pathStep
	i := 0
	for i < len(s) {
		switch {
		case s[i] == '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("path %q: '[' at byte %d is not closed", s, i)
			}
			digits := s[i+1 : i+end]
			n, err := parseIndex(digits)
			if err != nil {
				return nil, fmt.Errorf("path %q: index [%s] at byte %d: %w", s, digits, i, err)
			}
			steps = append(steps, pathStep{index: n, isIndex: true})
			i += end + 1
		case s[i] == '.' && len(steps) > 0:
			i++
			fallthrough
		default:
			start := i
			for i < len(s) && isKeyByte(s[i]) {
				i++
			}
			if i == start {
				if i < len(s) {
					return nil, fmt.Errorf("path %q: want a key at byte %d, found %q", s, i, s[i])
				}
				return nil, fmt.Errorf("path %q: ends with '.'", s)
			}
			steps = append(steps, pathStep{key: s[start:i]})
		}
		if i < len(s) && s[i] != '.' && s[i] != '[' {
			return nil, fmt.Errorf("path %q: unexpected %q at byte %d", s, s[i], i)
		}
	}
	return steps, nil
}

func parseIndex(digits string) (int, error) {
	switch {
	case digits == "":
		return 0, errors.New("is empty")
	case len(digits) > maxIndexDigits:
		return 0, fmt.Errorf("has more than %d digits", maxIndexDigits)
	case len(digits) > 1 && digits[0] == '0':
		return 0, errors.New("has a leading zero")
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, errors.New("is not a decimal number")
		}
	}
	return strconv.Atoi(digits)
}

func isKeyByte(c byte) bool {
	if c <= ' ' || c == 0x7f {
		return false
	}
	return c != '.' && c != '[' && c != ']' && c != '+' && c != '|'
}

// formatPath renders steps as parsePath reads them.
func formatPath(steps []pathStep) string {
	var b strings.Builder
	for i, st := range steps {
		switch {
		case st.isIndex:
			fmt.Fprintf(&b, "[%d]", st.index)
		case i > 0:
			b.WriteString(".")
			fallthrough
		default:
			b.WriteString(st.key)
		}
	}
	return b.String()
}

// lookupPath returns the string or number at steps in body, which must be
// valid JSON (the caller checks it with json.Valid). Numbers are returned as
// written in the body (1.50 stays 1.50); strings are unescaped as
// encoding/json does. found is false when a member is missing, an index is
// out of range, a value on the way or at the end is null, or the value is an
// empty string. A value of the wrong type on the way, or at the end (a
// boolean, an object), is an error: the body is not shaped as the rule
// expects. So is a member named twice in an object on the path: parsers
// disagree on which one wins, and the key must not depend on it.
//
// The walk reads the bytes in place instead of going through json.Decoder:
// the body is known valid, so skipping a value is counting brackets, and a
// key costs no allocation. FuzzJSONPath holds the walk to the answers of
// json.Decoder with UseNumber.
func lookupPath(body []byte, steps []pathStep) (value string, found bool, err error) {
	w := walker{b: body, steps: steps}
	w.space()
	return w.value(0)
}

// shapeError reports a value on the path of another type than the path
// expects: the body is valid JSON shaped otherwise, which a rule of
// alternatives reads as "another family's delivery".
type shapeError struct{ msg string }

func (e *shapeError) Error() string { return e.msg }

type walker struct {
	b     []byte
	i     int // next byte to read
	steps []pathStep
}

// value resolves steps[depth:] against the value at w.i and leaves w.i just
// past that value, so that the caller's scan of the enclosing container goes
// on (unless it returns an error).
func (w *walker) value(depth int) (string, bool, error) {
	c := w.b[w.i]
	if c == 'n' { // null: the value is absent
		w.i += len("null")
		return "", false, nil
	}
	if depth == len(w.steps) {
		switch {
		case c == '"':
			q := w.str()
			if !exactString(q) {
				// encoding/json would read it with U+FFFD in place of the
				// bad bytes, so distinct values would make one key.
				return "", false, fmt.Errorf("%s is not valid UTF-8", formatPath(w.steps))
			}
			v, err := unquote(q)
			return v, v != "", err
		case c == '-' || '0' <= c && c <= '9':
			start := w.i
			w.skip()
			return string(w.b[start:w.i]), true, nil
		}
		return "", false, &shapeError{fmt.Sprintf("%s is %s, want a string or a number", formatPath(w.steps), describe(c))}
	}
	st := w.steps[depth]
	if st.isIndex {
		if c != '[' {
			return "", false, &shapeError{fmt.Sprintf("%s is %s, want an array", w.at(depth), describe(c))}
		}
		return w.elements(depth, st.index)
	}
	if c != '{' {
		return "", false, &shapeError{fmt.Sprintf("%s is %s, want an object", w.at(depth), describe(c))}
	}
	return w.members(depth, st.key)
}

// elements scans the array at w.i, resolving the rest of the path against
// element index.
func (w *walker) elements(depth, index int) (v string, found bool, err error) {
	w.i++ // '['
	w.space()
	if w.b[w.i] == ']' {
		w.i++
		return "", false, nil
	}
	for n := 0; ; n++ {
		if n == index {
			if v, found, err = w.value(depth + 1); err != nil {
				return "", false, err
			}
		} else {
			w.skip()
		}
		w.space()
		if w.b[w.i] == ']' {
			w.i++
			return v, found, nil
		}
		w.i++ // ','
		w.space()
	}
}

// members scans the object at w.i, resolving the rest of the path against
// member key, and refuses an object that names key twice.
func (w *walker) members(depth int, key string) (v string, found bool, err error) {
	w.i++ // '{'
	w.space()
	if w.b[w.i] == '}' {
		w.i++
		return "", false, nil
	}
	seen := false
	for {
		match, err := keyIs(w.str(), key)
		if err != nil {
			return "", false, err
		}
		w.space()
		w.i++ // ':'
		w.space()
		switch {
		case match && seen:
			return "", false, fmt.Errorf("%s has member %q twice", w.at(depth), key)
		case match:
			seen = true
			if v, found, err = w.value(depth + 1); err != nil {
				return "", false, err
			}
		default:
			w.skip()
		}
		w.space()
		if w.b[w.i] == '}' {
			w.i++
			return v, found, nil
		}
		w.i++ // ','
		w.space()
	}
}

// str returns the string at w.i, quotes included and escapes kept, and moves
// past it.
func (w *walker) str() []byte {
	start := w.i
	for j := start + 1; ; j++ {
		switch w.b[j] {
		case '\\':
			j++ // the escaped byte cannot end the string
		case '"':
			w.i = j + 1
			return w.b[start:w.i]
		}
	}
}

// skip moves past the value at w.i.
func (w *walker) skip() {
	switch w.b[w.i] {
	case '"':
		w.str()
	case '{', '[':
		depth := 0
		for {
			switch w.b[w.i] {
			case '"':
				w.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			w.i++
			if depth == 0 {
				return
			}
		}
	default: // a number, true, false or null
		for w.i < len(w.b) && !isSpace(w.b[w.i]) && w.b[w.i] != ',' && w.b[w.i] != ']' && w.b[w.i] != '}' {
			w.i++
		}
	}
}

func (w *walker) space() {
	for w.i < len(w.b) && isSpace(w.b[w.i]) {
		w.i++
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// at names the value that steps[depth] is applied to, for messages.
func (w *walker) at(depth int) string {
	if depth == 0 {
		return "the body"
	}
	return formatPath(w.steps[:depth])
}

// plain reports whether the contents of quoted string q read as they are:
// no escapes, and valid UTF-8 (encoding/json replaces invalid bytes).
func plain(q []byte) bool {
	inner := q[1 : len(q)-1]
	return bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner)
}

// unquote returns the value of quoted JSON string q.
func unquote(q []byte) (string, error) {
	if plain(q) {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

// exactString reports whether quoted JSON string q decodes without a
// replacement: its bytes are valid UTF-8 and every \u escape of a surrogate
// is one half of a pair (high, then low). q is part of a valid JSON body, so
// each \u is followed by four hex digits.
func exactString(q []byte) bool {
	inner := q[1 : len(q)-1]
	if !utf8.Valid(inner) {
		return false
	}
	for i := 0; i < len(inner); i++ {
		if inner[i] != '\\' {
			continue
		}
		i++ // the escaped byte
		if inner[i] != 'u' {
			continue
		}
		r := hex4(inner[i+1 : i+5])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if r >= 0xdc00 || i+6 >= len(inner) || inner[i+1] != '\\' || inner[i+2] != 'u' {
			return false // a low half first, or a high half alone
		}
		if low := hex4(inner[i+3 : i+7]); low < 0xdc00 || low > 0xdfff {
			return false
		}
		i += 6
	}
	return true
}

// hex4 reads four hex digits.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// keyIs reports whether quoted JSON string q is key, without allocating for
// a key that has no escapes.
func keyIs(q []byte, key string) (bool, error) {
	if plain(q) {
		return string(q[1:len(q)-1]) == key, nil
	}
	s, err := unquote(q)
	return s == key, err
}

// describe names the JSON type of the value starting with c.
func describe(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
