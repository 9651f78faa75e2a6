// Package yamlconf reads the YAML files claimd is configured by — the
// providers file, the auth file and the --config file — in one strict way:
// one document, no anchors or aliases, no unknown or repeated keys, and
// every rule a file breaks reported at once, each with its file and line in
// the shape compilers use, so that editors and CI annotations can jump to it.
//
// It works on yaml.v3's node tree rather than decoding into structs: a
// struct or a map loses the line of a key, and the line is what a person
// fixing the file needs.
package yamlconf

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/claimd/claimd/internal/textclip"
	"go.yaml.in/yaml/v3"
)

// Error is one rule a file breaks.
type Error struct {
	File    string // the file's name as the caller gave it
	Line    int    // 1-based; 0 when the file as a whole is at fault
	Subject string // the entry concerned (a provider, a principal), or ""
	Msg     string // the rule broken
}

// Error renders e as "file:line: subject: msg".
func (e *Error) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Subject != "" {
		s += ": " + e.Subject
	}
	return s + ": " + e.Msg
}

// Loader collects the errors of one file. The zero value with File set is
// ready to use.
type Loader struct {
	File string
	errs []error
}

// Errorf records a rule broken at n (nil: the whole file) by subject.
func (l *Loader) Errorf(n *yaml.Node, subject, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.errs = append(l.errs, &Error{File: l.File, Line: line, Subject: subject, Msg: fmt.Sprintf(format, args...)})
}

// Count is how many errors were recorded so far: a caller compares it
// before and after a part of the file to know whether that part was sound.
func (l *Loader) Count() int { return len(l.errs) }

// Err returns every recorded error, joined, in the order of the file's
// lines (as a reader fixing them goes through it), or nil.
func (l *Loader) Err() error {
	if len(l.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(l.errs, func(a, b error) int {
		return cmp.Compare(a.(*Error).Line, b.(*Error).Line)
	})
	return errors.Join(l.errs...)
}

// Load reads data, a file whose root is a mapping of want ("version and
// principals"), with l: build reads the root mapping, recording the rules
// it breaks, into the value Load returns. An empty file, a root that is not
// a mapping and every rule recorded are Load's error (Err). what names the
// file's kind, as for Document.
func Load[T any](l *Loader, data []byte, what, want string, build func(root *yaml.Node) T) (T, error) {
	var zero T
	root, empty := l.Document(data, what)
	switch {
	case empty:
		l.Errorf(nil, "", "file is empty: want %s", want)
	case root != nil && root.Kind != yaml.MappingNode:
		l.Errorf(root, "", "the file must be a mapping with %s", want)
	case root != nil:
		v := build(root)
		if err := l.Err(); err != nil {
			return zero, err
		}
		return v, nil
	}
	return zero, l.Err()
}

// Document returns the root node of the single YAML document in data, or
// nil. empty is true when data holds no document or an empty one (a caller
// decides whether that is an error); a syntax error, a second document or
// an anchor or alias anywhere is recorded and returns nil. what names the
// file's kind in the messages ("a providers file").
func (l *Loader) Document(data []byte, what string) (root *yaml.Node, empty bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, true
		}
		l.syntaxError(data, err)
		return nil, false
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		l.Errorf(&next, "", "a second YAML document: %s holds one", what)
		return nil, false
	} else if !errors.Is(err, io.EOF) {
		l.syntaxError(data, err)
		return nil, false
	}
	if len(doc.Content) == 0 {
		return nil, true
	}
	root = doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, true
	}
	if l.aliases(root) {
		return nil, false
	}
	return root, false
}

// aliases reports (and records) anchors and aliases under n. They let one
// entry silently follow another, and a reviewer must read every value where
// it applies.
func (l *Loader) aliases(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		l.Errorf(n, "", "anchors and aliases are not allowed: write each value out")
		return true
	}
	found := false
	for _, c := range n.Content {
		found = l.aliases(c) || found
	}
	return found
}

// Field is one key: value pair of a mapping.
type Field struct {
	Key, Value *yaml.Node
}

// Fields returns the pairs of mapping n, recording keys that are not plain
// names, keys outside allowed (when allowed is non-nil) and keys given
// twice: YAML decoders disagree on which of two equal keys wins, and a
// reviewer reads the first.
func (l *Loader) Fields(n *yaml.Node, subject string, allowed []string) []Field {
	var out []Field
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			l.Errorf(k, subject, "keys must be plain names")
		case allowed != nil && !slices.Contains(allowed, k.Value):
			l.Errorf(k, subject, "unknown field %s (want one of %s)", textclip.Quote(k.Value, maxEcho), strings.Join(allowed, ", "))
		case seen[k.Value]:
			l.Errorf(k, subject, "%s is given twice", textclip.Quote(k.Value, maxEcho))
		default:
			seen[k.Value] = true
			out = append(out, Field{k, v})
		}
	}
	return out
}

// Record returns the fields of mapping n by name, recording at key each
// of required that is missing; why, when not empty, follows each
// "is required".
func (l *Loader) Record(key, n *yaml.Node, subject string, allowed []string, why string, required ...string) map[string]*yaml.Node {
	vals := make(map[string]*yaml.Node)
	for _, f := range l.Fields(n, subject, allowed) {
		vals[f.Key.Value] = f.Value
	}
	for _, req := range required {
		if vals[req] == nil {
			l.Errorf(key, subject, "%s is required%s", req, why)
		}
	}
	return vals
}

// maxEcho bounds how much of a refused key a message repeats: a file's
// values are untrusted and may be huge.
const maxEcho = 64

// yaml.v3 reports a syntax error only as text, "yaml: line N: <problem>",
// and N is not always the offending line: its scanner reports that line,
// its parser the line where the enclosing construct starts (0-based; a
// mapping of a hundred lines reports its first). Rather than sort problems
// into the two kinds by their wording, the offending line is found by
// asking the parser again: it is the first line from N on whose prefix of
// the file fails with the same problem. Only the "yaml: line N: " shape is
// read; should a release change it, the error is reported whole, without a
// line.

// syntaxShape matches the shape of yaml.v3's syntax errors.
var syntaxShape = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxProbeLines bounds the quadratic search of syntaxLine; claimd's files
// are a few hundred lines.
const maxProbeLines = 2000

// syntaxError records err, a syntax error yaml.v3 found in data, with the
// offending line when it can be told.
func (l *Loader) syntaxError(data []byte, err error) {
	reported, problem, ok := splitSyntaxError(err)
	if !ok {
		l.errs = append(l.errs, &Error{File: l.File, Msg: "YAML: " + err.Error()})
		return
	}
	l.errs = append(l.errs, &Error{File: l.File, Line: syntaxLine(data, problem, reported), Msg: "YAML syntax: " + problem})
}

// splitSyntaxError returns the line and the problem of a yaml.v3 syntax
// error; ok is false for an error of another shape.
func splitSyntaxError(err error) (line int, problem string, ok bool) {
	if err == nil {
		return 0, "", false
	}
	m := syntaxShape.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, "", false
	}
	line, convErr := strconv.Atoi(m[1])
	return line, m[2], convErr == nil
}

// syntaxLine returns the offending line of a syntax problem that yaml.v3
// reported at line reported: the first line, from reported on (the
// offending line is never before it, whichever base it was given in), whose
// prefix of data already fails with the same problem. A prefix that fails
// differently (it cut a multi-line value short) is passed over. When no
// prefix does, reported stands.
func syntaxLine(data []byte, problem string, reported int) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxProbeLines {
		return reported
	}
	var prefix []byte
	for i, ln := range lines {
		prefix = append(prefix, ln...)
		if i+1 < reported {
			continue
		}
		var n yaml.Node
		if _, p, ok := splitSyntaxError(yaml.Unmarshal(prefix, &n)); ok && p == problem {
			return i + 1
		}
	}
	return reported
}
