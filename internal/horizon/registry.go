// Package horizon is claimd's provider registry: for each webhook sender it
// knows how long the sender may deliver one event again (its retry horizon),
// derives the dedup window from it (ttl = retry_horizon + margin), bounds the
// processing lease, and derives a delivery's key from its raw headers and
// body by the provider's key rule. Where the provider declares entity
// lifecycles, it also places a delivery at its entity and event type and
// says whether the event may arrive in the entity's state, must wait for a
// later one, or is stale (lifecycle.go).
//
// The registry is read from a versioned YAML file, providers.yaml, embedded
// in the binary as the default (see Default) and replaceable as a whole by a
// file of the operator's (LoadFile), or extended by one that says
// `extends: builtin` (see Load). Loading validates the file and refuses
// it, naming the line and the rule broken, when any window could be too short
// or any rule could read a value that changes between retries.
//
// The package knows nothing of gRPC or storage: it returns sentinel and typed
// errors that the service maps to status codes.
package horizon

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

//go:embed providers.yaml
var defaultYAML []byte

// Provider is one registered webhook sender, or a group of them, with the
// window and lease claimd derives for it. A *Provider from a Registry is
// shared and must not be modified.
type Provider struct {
	Name string

	// RetryHorizon is the longest time after an event during which the
	// provider may deliver it again; Margin is added to it to give TTL, the
	// dedup window. For a group, both are those of the member whose TTL the
	// group takes (DrivenBy).
	RetryHorizon, Margin, TTL time.Duration
	// Lease is the default processing lease of a claim; MaxLease bounds the
	// lease a caller may ask for. Lease <= MaxLease <= TTL.
	Lease, MaxLease time.Duration

	KeyRule string // as written in the file; "" for a group without a rule
	Rule    Rule   // parsed KeyRule; nil when KeyRule is ""
	// Families names the webhook families of the provider that the key rule
	// covers ("classic payments notifications", "Tokenization webhooks"), as
	// the file lists them; what `claimd providers` and the README show.
	Families []string

	Source     string    // where the horizon is documented; a group shows DrivenBy's
	ReviewedOn time.Time // date, UTC midnight; a group shows its oldest member's

	Members  []string // set for a group only, sorted
	DrivenBy string   // for a group: the member whose TTL the group takes

	// Lifecycles are the provider's entity lifecycles, in the file's order;
	// a group has none. No two of them declare the same event type.
	Lifecycles []*Lifecycle
}

// IsGroup reports whether p is a group of providers.
func (p *Provider) IsGroup() bool { return len(p.Members) > 0 }

// ReviewOverdue reports whether p's horizon was last checked against its
// source more than maxAge before now. maxAge <= 0 disables the check.
func (p *Provider) ReviewOverdue(now time.Time, maxAge time.Duration) bool {
	return maxAge > 0 && now.Sub(p.ReviewedOn) > maxAge
}

// Registry is a validated set of providers and groups. It is immutable and
// safe for concurrent use.
type Registry struct {
	version int
	byName  map[string]*Provider
	sorted  []*Provider // providers and groups, by name
}

// Default loads the embedded providers.yaml. It fails only if the embedded
// file is invalid, which the package's tests rule out.
func Default() (*Registry, error) {
	return Load("providers.yaml", defaultYAML)
}

// DefaultYAML returns a copy of the embedded providers.yaml, a starting point
// for an operator's own file.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// LoadFile reads and loads a providers file; errors name the file by path.
func LoadFile(path string) (*Registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("providers file: %w", err)
	}
	return Load(path, data)
}

// Version is the schema version of the file the registry was loaded from.
func (r *Registry) Version() int { return r.version }

// Lookup returns the provider or group called name.
func (r *Registry) Lookup(name string) (*Provider, bool) {
	p, ok := r.byName[name]
	return p, ok
}

// List returns the providers and groups sorted by name. The slice is the
// caller's; the providers are shared.
func (r *Registry) List() []*Provider { return slices.Clone(r.sorted) }

func newRegistry(version int, providers []*Provider) *Registry {
	r := &Registry{version: version, byName: make(map[string]*Provider, len(providers))}
	for _, p := range providers {
		r.byName[p.Name] = p
	}
	r.sorted = slices.Clone(providers)
	slices.SortFunc(r.sorted, byName)
	return r
}

func byName(a, b *Provider) int { return strings.Compare(a.Name, b.Name) }

// newGroup derives a group from its members. A group answers for the
// duplicates of every member, so it takes the longest window and the longest
// leases; it derives keys only when every member does so by the same rule.
func newGroup(name string, members []*Provider) *Provider {
	members = slices.Clone(members)
	slices.SortFunc(members, byName)
	g := &Provider{Name: name}
	var driver *Provider
	shared := members[0].KeyRule
	for _, m := range members {
		g.Members = append(g.Members, m.Name)
		if driver == nil || m.TTL > driver.TTL || (m.TTL == driver.TTL && m.RetryHorizon > driver.RetryHorizon) {
			driver = m
		}
		g.Lease = max(g.Lease, m.Lease)
		g.MaxLease = max(g.MaxLease, m.MaxLease)
		if g.ReviewedOn.IsZero() || m.ReviewedOn.Before(g.ReviewedOn) {
			g.ReviewedOn = m.ReviewedOn
		}
		if m.KeyRule != shared {
			shared = ""
		}
	}
	g.RetryHorizon, g.Margin, g.TTL = driver.RetryHorizon, driver.Margin, driver.TTL
	g.Source, g.DrivenBy = driver.Source, driver.Name
	if shared != "" {
		g.KeyRule, g.Rule, g.Families = shared, members[0].Rule, members[0].Families
	}
	return g
}
