package auth

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/claimd/claimd/internal/textclip"
	"github.com/claimd/claimd/internal/yamlconf"
)

// SchemaVersion is the version of the auth file schema this package reads;
// a file states it in its `version` field.
const SchemaVersion = 1

// DefaultRate applies to a principal that sets no rate when the file sets no
// default_rate. One replica answers several thousand claims a second, so a
// principal held to this leaves room for the others.
var DefaultRate = Rate{PerSecond: 1000, Burst: 2000}

// nameSyntax is the shape of principal names and namespaces (the API's
// namespace pattern): safe in a log line and a metric label.
const nameSyntax = `[a-z0-9][a-z0-9_.-]{0,62}`

var (
	namePattern   = regexp.MustCompile(`^` + nameSyntax + `$`)
	prefixPattern = regexp.MustCompile(`^([a-z0-9][a-z0-9_.-]{0,61})?\*$`)
)

// CheckPrincipalName returns an error unless name can name a principal of
// an auth file.
func CheckPrincipalName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("principal name %s must match %s", textclip.Quote(name, maxEcho), nameSyntax)
	}
	return nil
}

// maxIdentityBytes bounds an identity of the file; certificates' SANs are
// far shorter.
const maxIdentityBytes = 1024

// Config is a validated auth file.
type Config struct {
	// Principals, sorted by name.
	Principals []*PrincipalConfig
	// DefaultRate applies to the principals that set none.
	DefaultRate Rate
}

// PrincipalConfig is one principal of the file.
type PrincipalConfig struct {
	Name string
	// Tokens are the principal's bearer tokens, by hash.
	Tokens []Token
	// Identities are client certificate identities in the file's notation:
	// "spiffe://…" or "uri:…" (a URI SAN), "dns:…" (a DNS SAN, lower case),
	// "cn:…" (the subject common name).
	Identities []string
	// Namespaces the principal may use: exact names, or a prefix ending in
	// "*" ("*" alone is every namespace).
	Namespaces []string
	Roles      Roles
	Rate       Rate
}

// Token is a bearer token of the file: the SHA-256 of the token, and when
// it stops being accepted.
type Token struct {
	Hash [sha256.Size]byte
	// Expires is the first instant the token is refused (TOKEN_UNKNOWN,
	// "expired"); zero when it does not expire.
	Expires time.Time
}

// Rate is a token bucket: PerSecond calls a second on average, Burst at
// once. Unlimited turns the bucket off.
type Rate struct {
	PerSecond float64
	Burst     int
	Unlimited bool
}

// String renders r as the file writes it.
func (r Rate) String() string {
	if r.Unlimited {
		return "unlimited"
	}
	return fmt.Sprintf("{per_second: %s, burst: %d}", strconv.FormatFloat(r.PerSecond, 'g', -1, 64), r.Burst)
}

// ValidationError is one rule an auth file breaks. Parse returns all of
// them, joined, each rendered "file:line: subject: msg".
type ValidationError = yamlconf.Error

// LoadFile reads and parses the auth file at path.
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses and validates an auth file; name identifies it in errors.
// The file is refused, with every rule it breaks, when: a field is unknown,
// missing or given twice; version is not SchemaVersion; there is no
// principal; a principal name does not match [a-z0-9][a-z0-9_.-]{0,62}; a
// principal has no token and no identity, no namespace or no role; a token
// is not "sha256:" and 64 lowercase hex digits (alone, or as the hash of
// a mapping {hash, expires} whose expires is an RFC 3339 time), or is listed
// twice (within a principal or across principals); an identity is not one of
// spiffe://, uri:, dns:, cn: or is listed twice; a namespace is neither a
// name nor a prefix ending in "*"; a role is not claim, read, admin or
// metrics; a principal without the namespaces field has a role other than
// metrics (which reads /metrics, not a namespace); a rate is not "unlimited" or {per_second > 0, burst >= 1}. Anchors and
// aliases are refused: a reviewer must read every grant where it applies.
func Parse(name string, data []byte) (*Config, error) {
	l := &loader{Loader: yamlconf.Loader{File: name}, tokens: map[[sha256.Size]byte]string{}, identities: map[string]string{}}
	return yamlconf.Load(&l.Loader, data, "an auth file", "version and principals", l.document)
}

type loader struct {
	yamlconf.Loader
	// tokens and identities map what was seen to the principal listing it.
	tokens     map[[sha256.Size]byte]string
	identities map[string]string
}

var topFields = []string{"version", "default_rate", "principals"}

func (l *loader) document(root *yaml.Node) *Config {
	vals := map[string]*yaml.Node{}
	for _, f := range l.Fields(root, "", topFields) {
		vals[f.Key.Value] = f.Value
	}
	if v := vals["version"]; v == nil {
		l.Errorf(root, "", "version is required (this schema is version %d)", SchemaVersion)
	} else if v.Kind != yaml.ScalarNode || v.Value != strconv.Itoa(SchemaVersion) {
		l.Errorf(v, "", "version must be %d: this claimd reads auth schema version %d only", SchemaVersion, SchemaVersion)
	}
	cfg := &Config{DefaultRate: DefaultRate}
	if v := vals["default_rate"]; v != nil {
		cfg.DefaultRate, _ = l.rate(v, "", "default_rate")
	}
	n := vals["principals"]
	if n == nil {
		l.Errorf(root, "", "principals is required")
		return nil
	}
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		l.Errorf(n, "", "principals must be a mapping of at least one principal name to its grants")
		return nil
	}
	for _, f := range l.Fields(n, "", nil) {
		if p := l.principal(f.Key, f.Value, cfg.DefaultRate); p != nil {
			cfg.Principals = append(cfg.Principals, p)
		}
	}
	slices.SortFunc(cfg.Principals, func(a, b *PrincipalConfig) int { return cmp.Compare(a.Name, b.Name) })
	return cfg
}

var principalFields = []string{"tokens", "identities", "namespaces", "roles", "rate"}

// principal validates one principal entry; it returns nil if any rule is
// broken (the errors are recorded).
func (l *loader) principal(key, n *yaml.Node, defaultRate Rate) *PrincipalConfig {
	name := key.Value
	before := l.Count()
	subject := name
	if !namePattern.MatchString(name) {
		subject = textclip.Quote(name, maxEcho)
		l.Errorf(key, subject, "principal name must match %s", nameSyntax)
	}
	if n.Kind != yaml.MappingNode {
		l.Errorf(n, subject, "must be a mapping of %s", strings.Join(principalFields, ", "))
		return nil
	}
	vals := map[string]*yaml.Node{}
	for _, f := range l.Fields(n, subject, principalFields) {
		vals[f.Key.Value] = f.Value
	}
	p := &PrincipalConfig{Name: name, Rate: defaultRate}
	for _, v := range l.tokenList(vals["tokens"], subject) {
		if tok, ok := l.token(v, subject); ok {
			p.Tokens = append(p.Tokens, tok)
		}
	}
	for _, v := range l.list(vals["identities"], subject, "identities") {
		id, err := parseIdentity(v.Value)
		switch {
		case err != nil:
			l.Errorf(v, subject, "identity %s: %v", textclip.Quote(v.Value, maxEcho), err)
		case l.identities[id] == name:
			l.Errorf(v, subject, "identity %s is listed twice", textclip.Quote(v.Value, maxEcho))
		case l.identities[id] != "":
			l.Errorf(v, subject, "identity %s is also listed by principal %s: an identity names exactly one principal", textclip.Quote(v.Value, maxEcho), l.identities[id])
		default:
			l.identities[id] = name
			p.Identities = append(p.Identities, id)
		}
	}
	if vals["tokens"] == nil && vals["identities"] == nil {
		l.Errorf(key, subject, "a principal needs tokens or identities (or both): without them nobody can act as it")
	}
	for _, v := range l.list(vals["namespaces"], subject, "namespaces") {
		switch {
		case !namePattern.MatchString(v.Value) && !prefixPattern.MatchString(v.Value):
			l.Errorf(v, subject, "namespace %s must be a namespace (%s) or a prefix of one followed by * (as in payouts-*; * alone is every namespace)", textclip.Quote(v.Value, maxEcho), nameSyntax)
		case slices.Contains(p.Namespaces, v.Value):
			l.Errorf(v, subject, "namespace %s is listed twice", v.Value)
		default:
			p.Namespaces = append(p.Namespaces, v.Value)
		}
	}
	for _, v := range l.list(vals["roles"], subject, "roles") {
		r, ok := roleNames[v.Value]
		switch {
		case !ok:
			l.Errorf(v, subject, "role %s is not one of claim, read, admin, metrics", textclip.Quote(v.Value, maxEcho))
		case p.Roles&r != 0:
			l.Errorf(v, subject, "role %s is listed twice", v.Value)
		default:
			p.Roles |= r
		}
	}
	if vals["roles"] == nil {
		l.Errorf(key, subject, "roles is required: claim, read, admin and/or metrics")
	}
	// A scraper's principal (metrics alone) uses no namespace.
	if vals["namespaces"] == nil && (vals["roles"] == nil || p.Roles&^RoleMetrics != 0) {
		l.Errorf(key, subject, `namespaces is required: list the namespaces this principal may use ("*" for every one)`)
	}
	if v := vals["rate"]; v != nil {
		p.Rate, _ = l.rate(v, subject, "rate")
	}
	if l.Count() > before {
		return nil
	}
	return p
}

// tokenList returns the items of the tokens sequence: scalars (a hash) or
// mappings ({hash, expires}); n may be nil (the field is absent).
func (l *loader) tokenList(n *yaml.Node, subject string) []*yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.Errorf(n, subject, "tokens must be a list of at least one token hash, as in [\"sha256:…\"]")
		return nil
	}
	var out []*yaml.Node
	for _, v := range n.Content {
		if (v.Kind != yaml.ScalarNode || v.Value == "") && v.Kind != yaml.MappingNode {
			l.Errorf(v, subject, `tokens must list hashes ("sha256:…") or mappings {hash: "sha256:…", expires: <RFC 3339 time>}`)
			continue
		}
		out = append(out, v)
	}
	return out
}

// token validates one item of tokens and records its hash as seen.
func (l *loader) token(v *yaml.Node, subject string) (Token, bool) {
	var tok Token
	hashNode := v
	if v.Kind == yaml.MappingNode {
		hashNode = nil
		ok := true
		for _, f := range l.Fields(v, subject, []string{"hash", "expires"}) {
			switch {
			case f.Key.Value == "hash" && f.Value.Kind == yaml.ScalarNode:
				hashNode = f.Value
			case f.Key.Value == "hash":
				l.Errorf(f.Value, subject, `a token's hash must be one value "sha256:…"`)
				ok = false
			default:
				t, err := time.Parse(time.RFC3339, f.Value.Value)
				if f.Value.Kind != yaml.ScalarNode || err != nil {
					l.Errorf(f.Value, subject, "a token's expires %s must be an RFC 3339 time with its zone, as in 2027-01-31T00:00:00Z", textclip.Quote(f.Value.Value, maxEcho))
					ok = false
					continue
				}
				tok.Expires = t
			}
		}
		if hashNode == nil {
			if ok {
				l.Errorf(v, subject, `a token given as a mapping needs hash: "sha256:…"`)
			}
			return tok, false
		}
		if !ok {
			return tok, false
		}
	}
	h, ok := parseHash(hashNode.Value)
	switch {
	case !ok && strings.HasPrefix(hashNode.Value, TokenPrefix):
		// Never echo it: it is most likely a live token.
		l.Errorf(hashNode, subject, "tokens lists a token itself, not its hash: list %q and the hash that `claimd token new` prints, and treat that token as leaked", hashPrefix+"…")
	case !ok:
		l.Errorf(hashNode, subject, "a token must be listed as %q and 64 lowercase hex digits (the value `claimd token new` prints)", hashPrefix)
	case l.tokens[h] == subject:
		l.Errorf(hashNode, subject, "this token hash is listed twice")
	case l.tokens[h] != "":
		l.Errorf(hashNode, subject, "this token hash is also listed by principal %s: a token names exactly one principal", l.tokens[h])
	default:
		l.tokens[h] = subject
		tok.Hash = h
		return tok, true
	}
	return tok, false
}

// list returns the items of a non-empty sequence of non-empty scalars; n
// may be nil (the field is absent).
func (l *loader) list(n *yaml.Node, subject, fieldName string) []*yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		l.Errorf(n, subject, "%s must be a list of at least one value, as in [a, b]", fieldName)
		return nil
	}
	var out []*yaml.Node
	for _, v := range n.Content {
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			l.Errorf(v, subject, "%s must list non-empty single values", fieldName)
			continue
		}
		out = append(out, v)
	}
	return out
}

// rate parses "unlimited" or {per_second: N, burst: N}.
func (l *loader) rate(n *yaml.Node, subject, fieldName string) (Rate, bool) {
	if n.Kind == yaml.ScalarNode && n.Value == "unlimited" {
		return Rate{Unlimited: true}, true
	}
	if n.Kind != yaml.MappingNode {
		l.Errorf(n, subject, `%s must be "unlimited" or {per_second: N, burst: N}`, fieldName)
		return Rate{}, false
	}
	var r Rate
	var perSecond, burst *yaml.Node
	for _, f := range l.Fields(n, subject, []string{"per_second", "burst"}) {
		if f.Key.Value == "per_second" {
			perSecond = f.Value
		} else {
			burst = f.Value
		}
	}
	ok := true
	if perSecond == nil {
		l.Errorf(n, subject, "%s.per_second is required", fieldName)
		ok = false
	} else if v, err := strconv.ParseFloat(perSecond.Value, 64); perSecond.Kind != yaml.ScalarNode || err != nil || !(v > 0) || math.IsInf(v, 0) {
		l.Errorf(perSecond, subject, "%s.per_second must be a number > 0", fieldName)
		ok = false
	} else {
		r.PerSecond = v
	}
	if burst == nil {
		l.Errorf(n, subject, "%s.burst is required", fieldName)
		ok = false
	} else if v, err := strconv.Atoi(burst.Value); burst.Kind != yaml.ScalarNode || err != nil || v < 1 {
		l.Errorf(burst, subject, "%s.burst must be a whole number >= 1", fieldName)
		ok = false
	} else {
		r.Burst = v
	}
	return r, ok
}

// parseIdentity normalises an identity of the file to the form identities()
// derives from a certificate.
func parseIdentity(s string) (string, error) {
	if len(s) > maxIdentityBytes {
		return "", fmt.Errorf("is %d bytes, more than %d", len(s), maxIdentityBytes)
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		return "", errors.New("contains a control character")
	}
	kind, rest, _ := strings.Cut(s, ":")
	switch {
	case kind == "spiffe" && strings.HasPrefix(rest, "//") && len(rest) > 2:
		return s, nil
	case kind == "uri" && strings.HasPrefix(rest, "spiffe://") && len(rest) > len("spiffe://"):
		return rest, nil // one spelling per identity, so duplicates are found
	case kind == "uri" && strings.Contains(rest, ":"):
		return s, nil
	case kind == "dns" && rest != "":
		return "dns:" + strings.ToLower(rest), nil
	case kind == "cn" && rest != "":
		return s, nil
	}
	return "", errors.New("must be spiffe://… or uri:<URI> (a URI SAN), dns:<name> (a DNS SAN) or cn:<name> (the subject common name)")
}

// maxEcho bounds what an error message or log line repeats of a value it
// refuses.
const maxEcho = 48
