package horizon

import (
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The entries of a providers file, providers and groups, each validated
// against every rule that Load lists.

var providerFields = map[string]bool{
	"retry_horizon": true, "margin": true, "lease": true, "max_lease": true,
	"key": true, "families": true, "source": true, "reviewed_on": true,
	"lifecycles": true,
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
		l.errorf(n, name, "must be a mapping of retry_horizon, margin, lease, max_lease, key, families, source, reviewed_on, lifecycles")
		return nil
	}
	before := len(l.errs)
	vals := l.record(key, n, name, providerFields, "", "retry_horizon", "margin", "lease", "source", "reviewed_on")
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
	if v := vals["lifecycles"]; v != nil {
		p.Lifecycles = l.lifecycles(v, name)
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
