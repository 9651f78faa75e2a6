package auth

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/claimd/claimd/internal/clock"
)

// principal is a principal of the loaded file, ready to check calls.
type principal struct {
	cfg      *PrincipalConfig
	exact    map[string]bool
	prefixes []string // the namespace patterns without their "*"
	limiter  *rate.Limiter
}

func (p *principal) context(via string) Principal {
	return Principal{Name: p.cfg.Name, Roles: p.cfg.Roles, Via: via}
}

// allows reports whether p may use namespace ns.
func (p *principal) allows(ns string) bool {
	if p.exact[ns] {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(ns, pre) {
			return true
		}
	}
	return false
}

type tokenEntry struct {
	hash    [sha256.Size]byte
	expires time.Time // zero: never
	p       *principal
}

// state is one loaded auth file. It never changes once built: a reload
// builds a new one and swaps it in.
type state struct {
	sum    [sha256.Size]byte // of the file's bytes, to skip reloads that change nothing
	tokens []tokenEntry
	// identities maps the certificate identities of the file to their
	// principals; kind is the one part of a certificate that is looked up
	// (--tls-identity).
	identities map[string]*principal
	kind       IdentityKind
	// clk decides when a token has expired.
	clk        clock.Clock
	principals []*principal
	// labels maps the namespaces the file names exactly to themselves;
	// patterns lists the prefix patterns, longest first.
	labels   map[string]bool
	patterns []string
}

// newState compiles cfg. Limiters of principals that prev already had are
// kept (with their rate updated), so a reload does not refill a bucket that
// a flood emptied.
func newState(cfg *Config, sum [sha256.Size]byte, prev *state, kind IdentityKind, clk clock.Clock) *state {
	now := clk.Now()
	s := &state{sum: sum, identities: map[string]*principal{}, kind: kind, clk: clk, labels: map[string]bool{}}
	old := map[string]*rate.Limiter{}
	if prev != nil {
		for _, p := range prev.principals {
			old[p.cfg.Name] = p.limiter
		}
	}
	for _, pc := range cfg.Principals {
		p := &principal{cfg: pc, exact: map[string]bool{}}
		for _, ns := range pc.Namespaces {
			if pre, ok := strings.CutSuffix(ns, "*"); ok {
				p.prefixes = append(p.prefixes, pre)
				if !slices.Contains(s.patterns, ns) {
					s.patterns = append(s.patterns, ns)
				}
			} else {
				p.exact[ns] = true
				s.labels[ns] = true
			}
		}
		if !pc.Rate.Unlimited {
			lim := rate.Limit(pc.Rate.PerSecond)
			if l := old[pc.Name]; l != nil {
				l.SetLimitAt(now, lim)
				l.SetBurstAt(now, pc.Rate.Burst)
				p.limiter = l
			} else {
				p.limiter = rate.NewLimiter(lim, pc.Rate.Burst)
			}
		}
		for _, tok := range pc.Tokens {
			s.tokens = append(s.tokens, tokenEntry{hash: tok.Hash, expires: tok.Expires, p: p})
		}
		for _, id := range pc.Identities {
			s.identities[id] = p
		}
		s.principals = append(s.principals, p)
	}
	slices.SortFunc(s.patterns, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return s
}

// byToken returns the entry whose token hashes to the same SHA-256 as
// tok, or nil. Every listed hash is compared, in constant time, whichever
// matches: how long the lookup takes says nothing about the hashes.
func (s *state) byToken(tok string) *tokenEntry {
	sum := sha256.Sum256([]byte(tok))
	var found *tokenEntry
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(s.tokens[i].hash[:], sum[:]) == 1 {
			found = &s.tokens[i]
		}
	}
	return found
}

// unmatchable lists the identities of the file that no certificate can
// present under kind s.kind, for a warning: they grant nothing.
func (s *state) unmatchable() []string {
	var out []string
	for id := range s.identities {
		if !s.kind.matches(id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// label is the metric label of namespace ns: the namespace itself when the
// file names it, else the longest pattern of the file that matches it, else
// "other". The file bounds the label's values.
func (s *state) label(ns string) string {
	if s.labels[ns] {
		return ns
	}
	for _, pat := range s.patterns {
		if strings.HasPrefix(ns, strings.TrimSuffix(pat, "*")) {
			return pat
		}
	}
	return OtherNamespace
}

// OtherNamespace is the metric label of the namespaces the auth file does
// not name.
const OtherNamespace = "other"
