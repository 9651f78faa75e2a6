package horizon

import (
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/claimd/claimd/internal/yamlconf"
)

// SchemaVersion is the version of the providers file schema this package
// reads; a file states it in its `version` field.
const SchemaVersion = 1

// nameSyntax is the shape of provider and group names; it is the namespace
// pattern of the API, so a name is safe in a storage key and a metric label.
const nameSyntax = `[a-z0-9][a-z0-9_.-]{0,62}`

var namePattern = regexp.MustCompile(`^` + nameSyntax + `$`)

// ValidationError is one rule a providers file breaks. Load returns all of
// them, joined, each rendered "file:line: subject: msg".
type ValidationError = yamlconf.Error

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
	l := &loader{Loader: yamlconf.Loader{File: name}}
	return yamlconf.Load(&l.Loader, data, "a providers file", "version, providers and groups", l.document)
}

type loader struct {
	yamlconf.Loader
	// base is the registry the file extends (extends: builtin), or nil.
	base *Registry
}

// entries reports whether n, the value of field, is a mapping of at least
// one and at most max entries, recording the rule it breaks: shape says
// what one entry maps, noun what the entries are.
func (l *loader) entries(n *yaml.Node, subject, field, shape, noun string, max int) bool {
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		l.Errorf(n, subject, "%s must be a mapping of at least one %s", field, shape)
		return false
	}
	if len(n.Content)/2 > max {
		l.Errorf(n, subject, "%s declares %d %s, more than %d", field, len(n.Content)/2, noun, max)
		return false
	}
	return true
}

var topFields = []string{"version", "extends", "providers", "groups"}

func (l *loader) document(root *yaml.Node) *Registry {
	var version int
	var versionNode, extendsNode, provNode, groupNode *yaml.Node
	for _, f := range l.Fields(root, "", topFields) {
		switch f.Key.Value {
		case "version":
			versionNode = f.Value
		case "extends":
			extendsNode = f.Value
		case "providers":
			provNode = f.Value
		case "groups":
			groupNode = f.Value
		}
	}
	if versionNode == nil {
		l.Errorf(root, "", "version is required (this schema is version %d)", SchemaVersion)
	} else {
		version = l.version(versionNode)
	}
	if extendsNode != nil {
		l.base = l.extends(extendsNode)
	}
	if provNode == nil && extendsNode == nil {
		l.Errorf(root, "", "providers is required (or extends: builtin, to add to the built-in registry)")
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
		l.Errorf(n, "", "extends must be builtin (the registry embedded in claimd), got %q", clipRule(n.Value))
		return nil
	}
	base, err := Default()
	if err != nil {
		l.Errorf(n, "", "the built-in registry does not load: %v", err)
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
		l.Errorf(n, "", "version must be %d (got %q): this claimd reads schema version %d only", SchemaVersion, n.Value, SchemaVersion)
		return 0
	}
	return SchemaVersion
}
