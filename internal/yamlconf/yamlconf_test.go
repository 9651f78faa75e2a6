package yamlconf_test

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/claimd/claimd/internal/yamlconf"
)

// load reads data as the loaders of claimd do and returns every message.
func load(t *testing.T, data string, allowed []string) (root *yaml.Node, empty bool, msgs []string) {
	t.Helper()
	l := yamlconf.Loader{File: "f.yaml"}
	root, empty = l.Document([]byte(data), "a test file")
	if root != nil && root.Kind == yaml.MappingNode {
		l.Fields(root, "", allowed)
	}
	if err := l.Err(); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var ye *yamlconf.Error
			if !errors.As(e, &ye) || ye.File != "f.yaml" {
				t.Errorf("error %v is not a *yamlconf.Error naming f.yaml", e)
			}
			msgs = append(msgs, e.Error())
		}
	}
	return root, empty, msgs
}

func TestDocumentRefuses(t *testing.T) {
	tests := []struct {
		desc, data string
		want       []string // prefixes, in line order
	}{
		// The scanner's and the parser's errors are both sent to the
		// offending line: the unclosed bracket's, not the end of the file
		// (scanner) nor the first line of the mapping (parser).
		{"unclosed flow sequence", "a: 1\nb: [\n", []string{"f.yaml:2: YAML syntax: did not find expected node content"}},
		{"bad indentation in a long mapping", "a:\n  b: 1\n  c: 2\n d: 3\n", []string{"f.yaml:4: YAML syntax: "}},
		{"tab", "a:\n\tb: 1\n", []string{"f.yaml:2: YAML syntax: "}},
		{"second document", "a: 1\n---\nb: 2\n", []string{"f.yaml:2: a second YAML document: a test file holds one"}},
		{"anchor and alias", "a: &x 1\nb: *x\n", []string{"f.yaml:1: anchors and aliases are not allowed", "f.yaml:2: anchors and aliases are not allowed"}},
		{"unknown and repeated keys, in line order", "b: 1\nzz: 2\nb: 3\n", []string{
			`f.yaml:2: unknown field "zz" (want one of a, b)`,
			`f.yaml:3: "b" is given twice`,
		}},
		{"non-scalar key", "? [x]\n: 1\n", []string{"f.yaml:1: keys must be plain names"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			_, _, got := load(t, tc.data, []string{"a", "b"})
			if len(got) != len(tc.want) {
				t.Fatalf("errors = %q, want %d starting %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("error %d = %q, want it to start %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestDocumentEmpty(t *testing.T) {
	for _, data := range []string{"", "# only a comment\n", "---\n", "~\n"} {
		root, empty, msgs := load(t, data, nil)
		if root != nil || !empty || len(msgs) != 0 {
			t.Errorf("Document(%q) = %v, empty %v, errors %q; want nil, empty, none", data, root, empty, msgs)
		}
	}
	root, empty, msgs := load(t, "a: 1\n", nil)
	if root == nil || empty || len(msgs) != 0 {
		t.Errorf("Document(a: 1) = %v, empty %v, errors %q; want a root", root, empty, msgs)
	}
}

// TestLoad: Load refuses an empty file and a root that is not a mapping,
// naming what the file must hold; build's value comes back only when no
// rule was recorded.
func TestLoad(t *testing.T) {
	build := func(l *yamlconf.Loader) func(root *yaml.Node) string {
		return func(root *yaml.Node) string {
			for _, f := range l.Fields(root, "", []string{"version"}) {
				return f.Value.Value
			}
			return ""
		}
	}
	for _, c := range []struct {
		desc, data, want, wantErr string
	}{
		{desc: "a mapping", data: "version: 3\n", want: "3"},
		{desc: "empty", data: "", wantErr: "t.yaml: file is empty: want version"},
		{desc: "a list", data: "- version\n", wantErr: "t.yaml:1: the file must be a mapping with version"},
		{desc: "a rule broken", data: "version: 3\nother: 4\n", wantErr: "t.yaml:2"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			l := &yamlconf.Loader{File: "t.yaml"}
			got, err := yamlconf.Load(l, []byte(c.data), "a test file", "version", build(l))
			if c.wantErr == "" {
				if err != nil || got != c.want {
					t.Errorf("Load(%q) = %q, %v; want %q, nil", c.data, got, err, c.want)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.wantErr) || got != "" {
				t.Errorf("Load(%q) = %q, %v; want \"\" and an error starting %q", c.data, got, err, c.wantErr)
			}
		})
	}
}
