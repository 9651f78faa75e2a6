package horizon

import (
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The entries of a providers file, providers and groups, each validated
// against every rule that Load lists.

var providerFields = []string{
	"retry_horizon", "margin", "lease", "max_lease",
	"key", "families", "source", "reviewed_on",
	"lifecycles",
}

// maxFamilyLen bounds a family's name: it is a label in a table, not prose.
const maxFamilyLen = 80

// providers returns the valid providers of n, and the names of all the
// providers it defines, valid or not (so that a group naming a broken
// provider reports the provider's error, not a missing member).
func (l *loader) providers(n *yaml.Node) ([]*Provider, map[string]bool) {
	names := make(map[string]bool)
	if n.Kind != yaml.MappingNode || (len(n.Content) == 0 && l.base == nil) {
		l.Errorf(n, "", "providers must be a mapping of at least one provider name to its fields")
		return nil, names
	}
	var out []*Provider
	for _, f := range l.Fields(n, "", nil) {
		name := f.Key.Value
		names[name] = true
		if !namePattern.MatchString(name) {
			l.Errorf(f.Key, name, "provider name must match %s", nameSyntax)
		}
		if g, ok := l.baseGroup(name); ok {
			l.Errorf(f.Key, name, "provider shadows the built-in group of the same name (members %s): a claim naming it would be ambiguous",
				strings.Join(g.Members, ", "))
		}
		if p := l.provider(name, f.Key, f.Value); p != nil && namePattern.MatchString(name) {
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
		l.Errorf(n, name, "must be a mapping of retry_horizon, margin, lease, max_lease, key, families, source, reviewed_on, lifecycles")
		return nil
	}
	before := l.Count()
	vals := l.Record(key, n, name, providerFields, "", "retry_horizon", "margin", "lease", "source", "reviewed_on")
	p := &Provider{Name: name}
	horizonOK := l.duration(vals["retry_horizon"], name, "retry_horizon", &p.RetryHorizon)
	marginOK := l.duration(vals["margin"], name, "margin", &p.Margin)
	leaseOK := l.duration(vals["lease"], name, "lease", &p.Lease)
	maxLeaseOK := l.duration(vals["max_lease"], name, "max_lease", &p.MaxLease)
	if vals["max_lease"] == nil {
		p.MaxLease = p.Lease
	}

	if horizonOK && p.RetryHorizon <= 0 {
		l.Errorf(vals["retry_horizon"], name, "retry_horizon must be > 0 (got %s)", FormatDuration(p.RetryHorizon))
		horizonOK = false
	}
	if marginOK && p.Margin <= 0 {
		l.Errorf(vals["margin"], name, "margin must be > 0 (got %s)", FormatDuration(p.Margin))
		marginOK = false
	}
	ttlOK := false
	if horizonOK && marginOK {
		p.TTL = p.RetryHorizon + p.Margin
		if p.TTL <= p.RetryHorizon { // the sum overflowed
			l.Errorf(vals["margin"], name, "ttl (retry_horizon %s + margin %s) must be > retry_horizon: the sum overflows",
				FormatDuration(p.RetryHorizon), FormatDuration(p.Margin))
		} else {
			ttlOK = true
		}
	}
	if leaseOK && p.Lease <= 0 {
		l.Errorf(vals["lease"], name, "lease must be > 0 (got %s)", FormatDuration(p.Lease))
		leaseOK = false
	}
	if leaseOK && ttlOK && p.Lease > p.TTL {
		l.Errorf(vals["lease"], name, "lease %s must not exceed ttl %s: the window would close while the first holder still works",
			FormatDuration(p.Lease), FormatDuration(p.TTL))
	}
	if leaseOK && maxLeaseOK && vals["max_lease"] != nil {
		if p.MaxLease < p.Lease {
			l.Errorf(vals["max_lease"], name, "max_lease %s must be >= lease %s", FormatDuration(p.MaxLease), FormatDuration(p.Lease))
		} else if ttlOK && p.MaxLease > p.TTL {
			l.Errorf(vals["max_lease"], name, "max_lease %s must not exceed ttl %s: the window would close while a holder still works",
				FormatDuration(p.MaxLease), FormatDuration(p.TTL))
		}
	}

	if v := vals["key"]; v != nil && l.scalar(v, name, "key") {
		r, err := ParseRule(v.Value)
		if err != nil {
			l.Errorf(v, name, "%v", err)
		}
		p.KeyRule, p.Rule = v.Value, r
	}
	if v := vals["families"]; v != nil {
		p.Families = l.families(v, name, vals["key"] != nil)
		if p.Rule != nil && p.Families != nil {
			if n := len(p.Rule.Alternatives()); n > 1 && n != len(p.Families) {
				l.Errorf(v, name, "families lists %d entries for the %d alternatives of the key rule: name what each alternative covers, in order",
					len(p.Families), n)
			}
		}
	}
	if v := vals["source"]; v != nil && l.scalar(v, name, "source") {
		u, err := url.Parse(v.Value)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			l.Errorf(v, name, "source %q must be an http(s) URL of the page that documents the retry schedule", v.Value)
		}
		p.Source = v.Value
	}
	if v := vals["reviewed_on"]; v != nil && l.scalar(v, name, "reviewed_on") {
		t, err := time.Parse(time.DateOnly, v.Value)
		if err != nil {
			l.Errorf(v, name, "reviewed_on %q must be a date (YYYY-MM-DD)", v.Value)
		}
		p.ReviewedOn = t
	}
	if v := vals["lifecycles"]; v != nil {
		p.Lifecycles = l.lifecycles(v, name)
	}
	if l.Count() > before {
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
		l.Errorf(n, subject, "families names what the key rule covers, but there is no key rule")
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.Errorf(n, subject, "families must be a list of at least one webhook family, as in [payments, disputes]")
		return nil
	}
	var out []string
	seen := make(map[string]bool, len(n.Content))
	for _, f := range n.Content {
		switch {
		case f.Kind != yaml.ScalarNode || f.Value == "":
			l.Errorf(f, subject, "a family must be a non-empty name")
		case len(f.Value) > maxFamilyLen || strings.ContainsAny(f.Value, "\n\r\t"):
			l.Errorf(f, subject, "family %q must be one line of at most %d bytes", clipRule(f.Value), maxFamilyLen)
		case seen[f.Value]:
			l.Errorf(f, subject, "family %q is listed twice", f.Value)
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
		l.Errorf(n, subject, "%s must be a single value", fieldName)
		return false
	case n.Value == "":
		l.Errorf(n, subject, "%s must not be empty", fieldName)
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
		l.Errorf(n, subject, "%s %q is not a duration: use h, m and s, as in 72h or 90s (720h for 30 days)", fieldName, n.Value)
		return false
	}
	*d = v
	return true
}

// groups returns the valid groups of n.
func (l *loader) groups(n *yaml.Node, providers []*Provider, names map[string]bool) []*Provider {
	if n.Kind != yaml.MappingNode {
		l.Errorf(n, "", "groups must be a mapping of group names to lists of providers")
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
	for _, f := range l.Fields(n, "", nil) {
		name := f.Key.Value
		before := l.Count()
		if !namePattern.MatchString(name) {
			l.Errorf(f.Key, name, "group name must match %s", nameSyntax)
		}
		if names[name] {
			l.Errorf(f.Key, name, "group shadows the provider of the same name: a claim naming it would be ambiguous")
		}
		if f.Value.Kind != yaml.SequenceNode {
			l.Errorf(f.Value, name, "group must be a list of providers, as in [stripe, paypal]")
			continue
		}
		if len(f.Value.Content) == 0 {
			l.Errorf(f.Value, name, "group has no members")
			continue
		}
		var members []*Provider
		seen := make(map[string]bool)
		for _, m := range f.Value.Content {
			switch {
			case m.Kind != yaml.ScalarNode:
				l.Errorf(m, name, "members must be provider names")
			case seen[m.Value]:
				l.Errorf(m, name, "member %q is listed twice", m.Value)
			case groupNames[m.Value] && !names[m.Value]:
				l.Errorf(m, name, "member %q is a group: groups list providers only", m.Value)
			case !names[m.Value]:
				l.Errorf(m, name, notMember, m.Value)
			case valid[m.Value] != nil:
				members = append(members, valid[m.Value])
			}
			seen[m.Value] = true
		}
		if l.Count() == before && len(members) == len(f.Value.Content) {
			out = append(out, newGroup(name, members))
		}
	}
	return out
}
