package horizon

import (
	"bytes"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

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

// maxProbeLines bounds the quadratic search of syntaxLine; providers files
// are a few hundred lines.
const maxProbeLines = 2000

// yamlError records err, a syntax error yaml.v3 found in data, with the
// offending line when it can be told.
func (l *loader) yamlError(data []byte, err error) {
	reported, problem, ok := splitSyntaxError(err)
	if !ok {
		l.errs = append(l.errs, &ValidationError{File: l.file, Msg: err.Error()})
		return
	}
	l.errs = append(l.errs, &ValidationError{File: l.file, Line: syntaxLine(data, problem, reported), Msg: "YAML syntax: " + problem})
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
