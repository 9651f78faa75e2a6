package horizon

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

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
// the same name whole; its groups are added, and replace a built-in group of
// the same name; a built-in group keeps its members and is derived again
// from them as merged (so a file that lengthens stripe's window lengthens
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
// extends names anything but builtin.
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

// yamlLine matches the line yaml.v3 puts in its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

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

// parserProblems are the messages of yaml.v3's parser (as opposed to its
// scanner). The scanner reports the offending line; the parser reports, 0-based,
// the line where the enclosing construct starts (a mapping of a hundred lines
// reports its first). parserLine finds the offending line itself.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
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

func (l *loader) yamlError(data []byte, err error) {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		if parserProblems[m[2]] {
			line = parserLine(data, m[2], line+1)
		}
		l.errs = append(l.errs, &ValidationError{File: l.file, Line: line, Msg: "YAML syntax: " + m[2]})
		return
	}
	l.errs = append(l.errs, &ValidationError{File: l.file, Msg: err.Error()})
}

// maxProbeLines bounds the quadratic search of parserLine; providers files
// are a few hundred lines.
const maxProbeLines = 2000

// parserLine returns the offending line of a parser error: the first line
// whose prefix of the file already fails with the same problem. A prefix
// that fails differently (it cut a multi-line value short) is passed over.
// fallback is returned when no prefix matches.
func parserLine(data []byte, problem string, fallback int) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxProbeLines {
		return fallback
	}
	var prefix []byte
	for i, ln := range lines {
		prefix = append(prefix, ln...)
		var n yaml.Node
		err := yaml.Unmarshal(prefix, &n)
		if m := yamlLine.FindStringSubmatch(errString(err)); m != nil && m[2] == problem {
			return i + 1
		}
	}
	return fallback
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
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

var providerFields = map[string]bool{
	"retry_horizon": true, "margin": true, "lease": true, "max_lease": true,
	"key": true, "families": true, "source": true, "reviewed_on": true,
}

// maxFamilyLen bounds a family's name: it is a label in a table, not prose.
const maxFamilyLen = 80

// providers returns the valid providers of n, and the names of all the
// providers it defines, valid or not (so that a group naming a broken
// provider reports the provider's error, not a missing member).
func (l *loader) providers(n *yaml.Node) ([]*Provider, map[string]bool) {
	names := make(map[string]bool)
	if n.Kind != yaml.MappingNode || (len(n.Content) == 0 && l.base == nil) {
		l.errorf(n, "", "providers must be a mapping of at least one provider name to its fields")
		return nil, names
	}
	var out []*Provider
	for _, f := range l.fields(n, "", nil) {
		name := f.key.Value
		names[name] = true
		if !namePattern.MatchString(name) {
			l.errorf(f.key, name, "provider name must match %s", nameSyntax)
		}
		if g, ok := l.baseGroup(name); ok {
			l.errorf(f.key, name, "provider shadows the built-in group of the same name (members %s): a claim naming it would be ambiguous",
				strings.Join(g.Members, ", "))
		}
		if p := l.provider(name, f.key, f.value); p != nil && namePattern.MatchString(name) {
			out = append(out, p)
		}
	}
	return out, names
}

// baseGroup returns the group called name in the registry the file
// extends.
func (l *loader) baseGroup(name string) (*Provider, bool) {
	if l.base == nil {
		return nil, false
	}
	p, ok := l.base.Lookup(name)
	return p, ok && p.IsGroup()
}

// provider validates one provider entry; it returns nil if any rule is
// broken (the errors are recorded).
func (l *loader) provider(name string, key, n *yaml.Node) *Provider {
	if n.Kind != yaml.MappingNode {
		l.errorf(n, name, "must be a mapping of retry_horizon, margin, lease, max_lease, key, families, source, reviewed_on")
		return nil
	}
	before := len(l.errs)
	vals := make(map[string]*yaml.Node)
	for _, f := range l.fields(n, name, providerFields) {
		vals[f.key.Value] = f.value
	}
	for _, req := range []string{"retry_horizon", "margin", "lease", "source", "reviewed_on"} {
		if vals[req] == nil {
			l.errorf(key, name, "%s is required", req)
		}
	}
	p := &Provider{Name: name}
	horizonOK := l.duration(vals["retry_horizon"], name, "retry_horizon", &p.RetryHorizon)
	marginOK := l.duration(vals["margin"], name, "margin", &p.Margin)
	leaseOK := l.duration(vals["lease"], name, "lease", &p.Lease)
	maxLeaseOK := l.duration(vals["max_lease"], name, "max_lease", &p.MaxLease)
	if vals["max_lease"] == nil {
		p.MaxLease = p.Lease
	}

	if horizonOK && p.RetryHorizon <= 0 {
		l.errorf(vals["retry_horizon"], name, "retry_horizon must be > 0 (got %s)", FormatDuration(p.RetryHorizon))
		horizonOK = false
	}
	if marginOK && p.Margin <= 0 {
		l.errorf(vals["margin"], name, "margin must be > 0 (got %s)", FormatDuration(p.Margin))
		marginOK = false
	}
	ttlOK := false
	if horizonOK && marginOK {
		p.TTL = p.RetryHorizon + p.Margin
		if p.TTL <= p.RetryHorizon { // the sum overflowed
			l.errorf(vals["margin"], name, "ttl (retry_horizon %s + margin %s) must be > retry_horizon: the sum overflows",
				FormatDuration(p.RetryHorizon), FormatDuration(p.Margin))
		} else {
			ttlOK = true
		}
	}
	if leaseOK && p.Lease <= 0 {
		l.errorf(vals["lease"], name, "lease must be > 0 (got %s)", FormatDuration(p.Lease))
		leaseOK = false
	}
	if leaseOK && ttlOK && p.Lease > p.TTL {
		l.errorf(vals["lease"], name, "lease %s must not exceed ttl %s: the window would close while the first holder still works",
			FormatDuration(p.Lease), FormatDuration(p.TTL))
	}
	if leaseOK && maxLeaseOK && vals["max_lease"] != nil {
		if p.MaxLease < p.Lease {
			l.errorf(vals["max_lease"], name, "max_lease %s must be >= lease %s", FormatDuration(p.MaxLease), FormatDuration(p.Lease))
		} else if ttlOK && p.MaxLease > p.TTL {
			l.errorf(vals["max_lease"], name, "max_lease %s must not exceed ttl %s: the window would close while a holder still works",
				FormatDuration(p.MaxLease), FormatDuration(p.TTL))
		}
	}

	if v := vals["key"]; v != nil && l.scalar(v, name, "key") {
		r, err := ParseRule(v.Value)
		if err != nil {
			l.errorf(v, name, "%v", err)
		}
		p.KeyRule, p.Rule = v.Value, r
	}
	if v := vals["families"]; v != nil {
		p.Families = l.families(v, name, vals["key"] != nil)
		if p.Rule != nil && p.Families != nil {
			if n := len(p.Rule.Alternatives()); n > 1 && n != len(p.Families) {
				l.errorf(v, name, "families lists %d entries for the %d alternatives of the key rule: name what each alternative covers, in order",
					len(p.Families), n)
			}
		}
	}
	if v := vals["source"]; v != nil && l.scalar(v, name, "source") {
		u, err := url.Parse(v.Value)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			l.errorf(v, name, "source %q must be an http(s) URL of the page that documents the retry schedule", v.Value)
		}
		p.Source = v.Value
	}
	if v := vals["reviewed_on"]; v != nil && l.scalar(v, name, "reviewed_on") {
		t, err := time.Parse(time.DateOnly, v.Value)
		if err != nil {
			l.errorf(v, name, "reviewed_on %q must be a date (YYYY-MM-DD)", v.Value)
		}
		p.ReviewedOn = t
	}
	if len(l.errs) > before {
		return nil
	}
	return p
}

// families returns the list of webhook families n names, recording an error
// for anything but a list of distinct, short, one-line names. A list without
// a key rule to cover them is refused: it would claim a coverage that does
// not exist. For a rule of alternatives the caller checks that there is one
// entry per alternative, so that `claimd providers` pairs each alternative
// with what it covers.
func (l *loader) families(n *yaml.Node, subject string, hasKey bool) []string {
	if !hasKey {
		l.errorf(n, subject, "families names what the key rule covers, but there is no key rule")
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.errorf(n, subject, "families must be a list of at least one webhook family, as in [payments, disputes]")
		return nil
	}
	var out []string
	seen := make(map[string]bool, len(n.Content))
	for _, f := range n.Content {
		switch {
		case f.Kind != yaml.ScalarNode || f.Value == "":
			l.errorf(f, subject, "a family must be a non-empty name")
		case len(f.Value) > maxFamilyLen || strings.ContainsAny(f.Value, "\n\r\t"):
			l.errorf(f, subject, "family %q must be one line of at most %d bytes", clipRule(f.Value), maxFamilyLen)
		case seen[f.Value]:
			l.errorf(f, subject, "family %q is listed twice", f.Value)
		default:
			seen[f.Value] = true
			out = append(out, f.Value)
		}
	}
	return out
}

// scalar reports whether n is a non-empty scalar, recording an error if not.
func (l *loader) scalar(n *yaml.Node, subject, fieldName string) bool {
	switch {
	case n.Kind != yaml.ScalarNode:
		l.errorf(n, subject, "%s must be a single value", fieldName)
		return false
	case n.Value == "":
		l.errorf(n, subject, "%s must not be empty", fieldName)
		return false
	}
	return true
}

// duration parses n into *d. It returns false, recording an error if n is
// present, unless n holds a Go duration.
func (l *loader) duration(n *yaml.Node, subject, fieldName string, d *time.Duration) bool {
	if n == nil || !l.scalar(n, subject, fieldName) {
		return false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		l.errorf(n, subject, "%s %q is not a duration: use h, m and s, as in 72h or 90s (720h for 30 days)", fieldName, n.Value)
		return false
	}
	*d = v
	return true
}

// groups returns the valid groups of n.
func (l *loader) groups(n *yaml.Node, providers []*Provider, names map[string]bool) []*Provider {
	if n.Kind != yaml.MappingNode {
		l.errorf(n, "", "groups must be a mapping of group names to lists of providers")
		return nil
	}
	valid := make(map[string]*Provider, len(providers))
	for _, p := range providers {
		valid[p.Name] = p
	}
	groupNames := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		groupNames[n.Content[i].Value] = true
	}
	notMember := "member %q is not a provider of this file"
	if l.base != nil {
		for _, p := range l.base.List() {
			if p.IsGroup() {
				groupNames[p.Name] = true
			}
		}
		notMember = "member %q is not a provider of this file or of the built-in registry"
	}
	var out []*Provider
	for _, f := range l.fields(n, "", nil) {
		name := f.key.Value
		before := len(l.errs)
		if !namePattern.MatchString(name) {
			l.errorf(f.key, name, "group name must match %s", nameSyntax)
		}
		if names[name] {
			l.errorf(f.key, name, "group shadows the provider of the same name: a claim naming it would be ambiguous")
		}
		if f.value.Kind != yaml.SequenceNode {
			l.errorf(f.value, name, "group must be a list of providers, as in [stripe, paypal]")
			continue
		}
		if len(f.value.Content) == 0 {
			l.errorf(f.value, name, "group has no members")
			continue
		}
		var members []*Provider
		seen := make(map[string]bool)
		for _, m := range f.value.Content {
			switch {
			case m.Kind != yaml.ScalarNode:
				l.errorf(m, name, "members must be provider names")
			case seen[m.Value]:
				l.errorf(m, name, "member %q is listed twice", m.Value)
			case groupNames[m.Value] && !names[m.Value]:
				l.errorf(m, name, "member %q is a group: groups list providers only", m.Value)
			case !names[m.Value]:
				l.errorf(m, name, notMember, m.Value)
			case valid[m.Value] != nil:
				members = append(members, valid[m.Value])
			}
			seen[m.Value] = true
		}
		if len(l.errs) == before && len(members) == len(f.value.Content) {
			out = append(out, newGroup(name, members))
		}
	}
	return out
}
