package horizon

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// SchemaVersion is the version of the providers file schema this package
// reads; a file states it in its `version` field.
const SchemaVersion = 1

// nameSyntax is the shape of provider and group names; it is the namespace
// pattern of the API, so a name is safe in a storage key and a metric label.
const nameSyntax = `[a-z0-9][a-z0-9_.-]{0,62}`

var namePattern = regexp.MustCompile(`^` + nameSyntax + `$`)

// ValidationError is one rule a providers file breaks. Load returns all of
// them, joined with errors.Join, so one run shows every mistake in a file.
type ValidationError struct {
	File    string // the name given to Load
	Line    int    // 1-based; 0 when the file as a whole is at fault
	Subject string // the provider or group concerned, or ""
	Msg     string // the rule broken
}

// Error renders e as "file:line: subject: msg", the shape compilers use, so
// editors and CI annotations can jump to the line.
func (e *ValidationError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Subject != "" {
		s += ": " + e.Subject
	}
	return s + ": " + e.Msg
}

// Load parses and validates a providers file. name identifies the file in
// error messages.
//
// A file with `extends: builtin` adds to the embedded registry instead of
// replacing it: its providers are added, and replace a built-in provider of
// the same name whole, lifecycles included (a file that restates stripe to
// change its margin restates its lifecycles too, or turns its ordering
// off); its groups are added, and replace a built-in group of the same
// name; a built-in group keeps its members and is derived again from them
// as merged (so a file that lengthens stripe's window lengthens
// billing's). Its groups may list built-in providers, and it need not
// define a provider of its own.
//
// The file is refused, with every rule it breaks, when:
// a field is unknown, missing or given twice; a duration does not parse;
// retry_horizon <= 0; margin <= 0; ttl (= retry_horizon + margin) <=
// retry_horizon; lease <= 0 or lease > ttl; max_lease < lease or max_lease >
// ttl; a key rule does not parse (or reads a signature or timestamp header);
// families is not a list of distinct one-line names, or is given without a
// key rule;
// source is not an http(s) URL; reviewed_on is not a date (YYYY-MM-DD); a
// name does not match [a-z0-9][a-z0-9_.-]{0,62}; a group is empty, shadows a
// provider, or lists a member that is not a provider of the file (or of the
// built-in registry it extends); a provider shadows a built-in group;
// extends names anything but builtin;
// a lifecycle (see lifecyclefile.go) has a name not matching the name
// pattern, lacks entity, event_type, states, events or source, or has an
// entity or event_type rule that does not parse or hashes the body; its
// states are empty, more than 64, listed twice or do not match the name
// pattern (a state is a storage value and a log field); it declares
// no event or more than 256, or an event type longer than 255 bytes, not
// matching [A-Za-z0-9][A-Za-z0-9_.:/-]*, or already declared by a lifecycle
// of the same provider; an event lacks from or to, or names a state the
// lifecycle does not list; a state is unreachable from the initial state
// (the first listed). A provider has at most 16 lifecycles; a group has
// none (its entry is a list of members, with no room for them): a claim
// is ordered only when it names the provider itself.
// max_lease defaults to lease.
func Load(name string, data []byte) (*Registry, error) {
	l := &loader{file: name}
	root := l.parse(data)
	if root == nil {
		return nil, l.joined()
	}
	reg := l.document(root)
	if len(l.errs) > 0 {
		return nil, l.joined()
	}
	return reg, nil
}

// joined returns the errors in the order of the file's lines, as a reader
// fixing them goes through it.
func (l *loader) joined() error {
	slices.SortStableFunc(l.errs, func(a, b error) int {
		return cmp.Compare(a.(*ValidationError).Line, b.(*ValidationError).Line)
	})
	return errors.Join(l.errs...)
}

type loader struct {
	file string
	errs []error
	// base is the registry the file extends (extends: builtin), or nil.
	base *Registry
}

func (l *loader) errorf(n *yaml.Node, subject, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.errs = append(l.errs, &ValidationError{File: l.file, Line: line, Subject: subject, Msg: fmt.Sprintf(format, args...)})
}

// parse returns the root mapping of the single YAML document in data.
func (l *loader) parse(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			l.errorf(nil, "", "file is empty: want version, providers and groups")
		} else {
			l.yamlError(data, err)
		}
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		l.errorf(&next, "", "a second YAML document: a providers file holds one")
		return nil
	} else if !errors.Is(err, io.EOF) {
		l.yamlError(data, err)
		return nil
	}
	if len(doc.Content) == 0 {
		l.errorf(nil, "", "file is empty: want version, providers and groups")
		return nil
	}
	root := doc.Content[0]
	if l.aliases(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		l.errorf(root, "", "the file must be a mapping with version, providers and groups")
		return nil
	}
	return root
}

// aliases reports (and records) anchors and aliases under n. They let one
// entry silently follow another, and a reviewer must read every value where
// it applies.
func (l *loader) aliases(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		l.errorf(n, "", "anchors and aliases are not allowed: write each value out")
		return true
	}
	found := false
	for _, c := range n.Content {
		found = l.aliases(c) || found
	}
	return found
}

// field is one key: value pair of a mapping.
type field struct {
	key, value *yaml.Node
}

// fields returns the pairs of mapping n, refusing keys outside allowed (when
// allowed is non-nil) and keys given twice: YAML decoders disagree on which
// of two equal keys wins, and a reviewer reads the first.
func (l *loader) fields(n *yaml.Node, subject string, allowed map[string]bool) []field {
	var out []field
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.errorf(k, subject, "keys must be plain names")
			continue
		}
		if allowed != nil && !allowed[k.Value] {
			l.errorf(k, subject, "unknown field %q", k.Value)
			continue
		}
		if seen[k.Value] {
			l.errorf(k, subject, "%q is given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, field{k, v})
	}
	return out
}

// record returns the fields of the mapping n by name (allowed: the names
// it may have), recording at key each of required that is missing; why,
// when not empty, follows each "is required".
func (l *loader) record(key, n *yaml.Node, subject string, allowed map[string]bool, why string, required ...string) map[string]*yaml.Node {
	vals := make(map[string]*yaml.Node)
	for _, f := range l.fields(n, subject, allowed) {
		vals[f.key.Value] = f.value
	}
	for _, req := range required {
		if vals[req] == nil {
			l.errorf(key, subject, "%s is required%s", req, why)
		}
	}
	return vals
}

// entries reports whether n, the value of field, is a mapping of at least
// one and at most max entries, recording the rule it breaks: shape says
// what one entry maps, noun what the entries are.
func (l *loader) entries(n *yaml.Node, subject, field, shape, noun string, max int) bool {
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		l.errorf(n, subject, "%s must be a mapping of at least one %s", field, shape)
		return false
	}
	if len(n.Content)/2 > max {
		l.errorf(n, subject, "%s declares %d %s, more than %d", field, len(n.Content)/2, noun, max)
		return false
	}
	return true
}

var topFields = map[string]bool{"version": true, "extends": true, "providers": true, "groups": true}

func (l *loader) document(root *yaml.Node) *Registry {
	var version int
	var versionNode, extendsNode, provNode, groupNode *yaml.Node
	for _, f := range l.fields(root, "", topFields) {
		switch f.key.Value {
		case "version":
			versionNode = f.value
		case "extends":
			extendsNode = f.value
		case "providers":
			provNode = f.value
		case "groups":
			groupNode = f.value
		}
	}
	if versionNode == nil {
		l.errorf(root, "", "version is required (this schema is version %d)", SchemaVersion)
	} else {
		version = l.version(versionNode)
	}
	if extendsNode != nil {
		l.base = l.extends(extendsNode)
	}
	if provNode == nil && extendsNode == nil {
		l.errorf(root, "", "providers is required (or extends: builtin, to add to the built-in registry)")
		return nil
	}
	var providers []*Provider
	names := make(map[string]bool)
	if provNode != nil {
		providers, names = l.providers(provNode)
	}
	if l.base != nil {
		providers, names = l.underlay(providers, names)
	}
	var groups []*Provider
	if groupNode != nil {
		groups = l.groups(groupNode, providers, names)
	}
	if l.base != nil {
		groups = append(groups, l.baseGroups(groupNode, providers)...)
	}
	return newRegistry(version, append(providers, groups...))
}

// extends returns the registry that n (the value of extends) names. The
// only one is builtin: the registry embedded in claimd.
func (l *loader) extends(n *yaml.Node) *Registry {
	if n.Kind != yaml.ScalarNode || n.Value != "builtin" {
		l.errorf(n, "", "extends must be builtin (the registry embedded in claimd), got %q", clipRule(n.Value))
		return nil
	}
	base, err := Default()
	if err != nil {
		l.errorf(n, "", "the built-in registry does not load: %v", err)
		return nil
	}
	return base
}

// underlay adds the base registry's providers that the file does not
// define to the file's (a provider of the file replaces the built-in one
// of its name, whole), and returns them with every provider name known.
func (l *loader) underlay(providers []*Provider, names map[string]bool) ([]*Provider, map[string]bool) {
	for _, p := range l.base.List() {
		switch {
		case p.IsGroup():
		case names[p.Name]:
		default:
			providers = append(providers, p)
			names[p.Name] = true
		}
	}
	return providers, names
}

// baseGroups returns the base registry's groups that the file's groups
// (n, or nil) do not replace, each derived again from the providers as
// merged: a group of built-in members takes a member's window as the file
// redefines it.
func (l *loader) baseGroups(n *yaml.Node, providers []*Provider) []*Provider {
	replaced := make(map[string]bool)
	if n != nil && n.Kind == yaml.MappingNode {
		for i := 0; i < len(n.Content); i += 2 {
			replaced[n.Content[i].Value] = true
		}
	}
	byName := make(map[string]*Provider, len(providers))
	for _, p := range providers {
		byName[p.Name] = p
	}
	var out []*Provider
	for _, g := range l.base.List() {
		if !g.IsGroup() || replaced[g.Name] {
			continue
		}
		members := make([]*Provider, 0, len(g.Members))
		for _, m := range g.Members {
			if p := byName[m]; p != nil {
				members = append(members, p)
			}
		}
		// A member missing here is a provider of the file that failed
		// validation: its error is recorded and the registry is refused.
		if len(members) == len(g.Members) {
			out = append(out, newGroup(g.Name, members))
		}
	}
	return out
}

func (l *loader) version(n *yaml.Node) int {
	if n.Kind != yaml.ScalarNode || n.Value != strconv.Itoa(SchemaVersion) {
		l.errorf(n, "", "version must be %d (got %q): this claimd reads schema version %d only", SchemaVersion, n.Value, SchemaVersion)
		return 0
	}
	return SchemaVersion
}
