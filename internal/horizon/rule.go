package horizon

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/claimd/claimd/internal/textclip"
)

// Rule derives a delivery's key from its headers and raw body. A Rule is
// immutable and safe for concurrent use. The only implementations are the
// ones ParseRule returns: header:<Name>, json:<path>, rules joined with +,
// sha256, and alternatives of those separated by |.
type Rule interface {
	// String returns the rule as ParseRule accepts it; ParseRule(r.String())
	// yields an equal rule.
	String() string
	// Source is where a key found by this rule comes from. A rule of
	// alternatives has no single source: it returns KeySourceUnspecified,
	// and each of its Alternatives has its own.
	Source() KeySource
	// Alternatives returns the rules tried in order, the first that yields a
	// value giving the key. A rule without | is its own only alternative.
	Alternatives() []Rule

	// eval returns the rule's value for d. found is false when the value is
	// absent, null or empty; err is a *KeyError when the delivery is malformed
	// under the rule.
	eval(d *Delivery) (value string, found bool, err error)
}

// Bounds of a rule. They keep a rule readable and keep the work of deriving a
// key proportional to the body, whatever a providers file says. A provider
// that sends several webhook families (Adyen) needs an alternative per family:
// Adyen's rule has 18 (its payment, platform and management webhooks, and the
// Terminal API notifications its terminals send), hence the room for 24.
const (
	maxRuleLen      = 2048
	maxJoinParts    = 8
	maxAlternatives = 24
)

// ParseRule parses a key rule:
//
//	header:<Name>      the value of header Name, matched case-insensitively
//	json:<path>        a string or number in a JSON body; path is a dot path
//	                   with array indexes, e.g. notificationItems[0].pspReference
//	<rule>+<rule>...   the values of several rules joined with ":" (all must
//	                   be present)
//	sha256             the hash of the raw body: "sha256:<hex>"
//	<alt> | <alt>...   alternatives, each one of the above: the first that
//	                   yields a value gives the key (+ binds tighter than |;
//	                   spaces around | are allowed)
//
// Alternatives select a webhook family by what its deliveries carry: a
// joined alternative yields only when every part is present, so
// json:type+json:eventId applies to the deliveries that have an eventId and
// is passed over by the others. An alternative that meets a value of the
// wrong type on its path (an object where it reads a string) is passed over
// too; the delivery is malformed under the rule only when no alternative
// yields and one of them met such a value, or when the body is not JSON, a
// member on a path is named twice, or a header is given twice with different
// values.
//
// ParseRule refuses a header rule that reads a per-delivery signature or
// timestamp header (Stripe-Signature, webhook-timestamp, ...): those change on
// every retry, so a key read from them would let each retry of one event
// through as a new event. It refuses alternatives given twice, and any after
// sha256, which always yields.
func ParseRule(s string) (Rule, error) {
	switch {
	case s == "":
		return nil, fmt.Errorf("key rule is empty: want header:<Name>, json:<path>, rules joined with +, sha256, or alternatives of those separated by |")
	case len(s) > maxRuleLen:
		return nil, fmt.Errorf("key rule is %d bytes long, more than %d", len(s), maxRuleLen)
	case !utf8.ValidString(s):
		return nil, fmt.Errorf("key rule %q is not valid UTF-8", clipRule(s))
	}
	if !strings.Contains(s, "|") {
		return parseJoinedRule(s)
	}
	texts := strings.Split(s, "|")
	if len(texts) > maxAlternatives {
		return nil, fmt.Errorf("key rule %q has %d alternatives, more than %d", clipRule(s), len(texts), maxAlternatives)
	}
	a := &alternativesRule{text: s}
	seen := make(map[string]bool, len(texts))
	for i, t := range texts {
		t = strings.Trim(t, " \t")
		switch {
		case t == "":
			return nil, fmt.Errorf("key rule %q has an empty alternative (number %d): separate rules with |, as in header:A | header:B", clipRule(s), i+1)
		case seen[t]:
			return nil, fmt.Errorf("key rule %q lists alternative %s twice", clipRule(s), t)
		case seen["sha256"]:
			return nil, fmt.Errorf("key rule %q: sha256 always yields a key (the body hash), so alternative %s after it is never tried", clipRule(s), t)
		}
		seen[t] = true
		alt, err := parseJoinedRule(t)
		if err != nil {
			return nil, err
		}
		a.alts = append(a.alts, alt)
	}
	return a, nil
}

// clipRule bounds a rule quoted in an error: a providers file is the
// operator's, but --check may be pointed at any file.
func clipRule(s string) string { return textclip.Cut(s, 120) }

func parseJoinedRule(s string) (Rule, error) {
	if !strings.Contains(s, "+") {
		return parseSingleRule(s)
	}
	texts := strings.Split(s, "+")
	if len(texts) > maxJoinParts {
		return nil, fmt.Errorf("key rule %q joins %d rules, more than %d", s, len(texts), maxJoinParts)
	}
	j := &joinedRule{text: s}
	seen := make(map[string]bool, len(texts))
	for _, t := range texts {
		if t == "" {
			return nil, fmt.Errorf("key rule %q has an empty part: join rules as json:a+json:b", s)
		}
		if seen[t] {
			return nil, fmt.Errorf("key rule %q joins %s twice", s, t)
		}
		seen[t] = true
		part, err := parseSingleRule(t)
		if err != nil {
			return nil, err
		}
		j.parts = append(j.parts, part)
	}
	return j, nil
}

func parseSingleRule(s string) (Rule, error) {
	switch {
	case s == "sha256":
		return bodyHashRule{}, nil
	case strings.HasPrefix(s, "header:"):
		return parseHeaderRule(s, strings.TrimPrefix(s, "header:"))
	case strings.HasPrefix(s, "json:"):
		steps, err := parsePath(strings.TrimPrefix(s, "json:"))
		if err != nil {
			return nil, fmt.Errorf("key rule %q: %w", s, err)
		}
		return &jsonRule{text: s, steps: steps}, nil
	default:
		return nil, fmt.Errorf("key rule %q: unknown kind: want header:<Name>, json:<path>, rules joined with +, sha256, or alternatives separated by |", s)
	}
}

// volatileHeaders are headers known to be computed per delivery attempt:
// signatures over a timestamp, and the timestamps themselves. The value says
// whose header it is, for the error message.
var volatileHeaders = map[string]string{
	"stripe-signature":              "Stripe's signature (with its t= timestamp)",
	"webhook-signature":             "the Standard Webhooks signature",
	"webhook-timestamp":             "the Standard Webhooks timestamp",
	"svix-signature":                "Svix's signature",
	"svix-timestamp":                "Svix's timestamp",
	"x-hub-signature":               "GitHub's signature",
	"x-hub-signature-256":           "GitHub's signature",
	"x-shopify-hmac-sha256":         "Shopify's signature",
	"paypal-transmission-sig":       "PayPal's transmission signature",
	"paypal-transmission-time":      "PayPal's transmission time",
	"x-twilio-signature":            "Twilio's signature",
	"x-square-hmacsha256-signature": "Square's signature",
	"x-square-signature":            "Square's signature",
	"hmacsignature":                 "Adyen's HMAC signature",
	"date":                          "the HTTP date of the attempt",
}

// volatileWords catch the signature and timestamp headers of senders not
// listed in volatileHeaders.
var volatileWords = []string{"signature", "hmac", "timestamp"}

func parseHeaderRule(rule, name string) (Rule, error) {
	if name == "" {
		return nil, fmt.Errorf("key rule %q: header name is empty", rule)
	}
	for i := 0; i < len(name); i++ {
		if !isHeaderNameByte(name[i]) {
			return nil, fmt.Errorf("key rule %q: header name %q has a character not allowed in a header name at byte %d", rule, name, i)
		}
	}
	lower := strings.ToLower(name)
	what, known := volatileHeaders[lower]
	if !known {
		for _, w := range volatileWords {
			if strings.Contains(lower, w) {
				what, known = "a signature or timestamp header", true
				break
			}
		}
	}
	if known {
		return nil, fmt.Errorf("key rule %q: header %s is %s: it changes on every retry of one event, "+
			"so a key read from it would let each retry through as a new event", rule, name, what)
	}
	return &headerRule{text: rule, name: name}, nil
}

// isHeaderNameByte reports whether c may appear in a header name: an RFC 9110
// token character, except '+' and '|', which join and separate rules.
func isHeaderNameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*-.^_`~", c) >= 0
}

// headerRule reads one header, case-insensitively.
type headerRule struct {
	text string
	name string
}

func (r *headerRule) String() string       { return r.text }
func (r *headerRule) Source() KeySource    { return KeySourceHeader }
func (r *headerRule) Alternatives() []Rule { return []Rule{r} }

func (r *headerRule) eval(d *Delivery) (string, bool, error) {
	var value string
	seen := false
	for k, v := range d.headers {
		if !strings.EqualFold(k, r.name) {
			continue
		}
		v = strings.Trim(v, " \t")
		if seen && v != value {
			// Two spellings of one header with different values: which one
			// names the event is a guess, and a wrong guess is a false
			// duplicate or a double side effect.
			return "", false, malformed(r.text, fmt.Sprintf("header %s is given twice with different values", r.name), nil)
		}
		value, seen = v, true
	}
	return value, value != "", nil
}

// jsonRule reads a string or number at a path in a JSON body.
type jsonRule struct {
	text  string
	steps []pathStep
}

func (r *jsonRule) String() string       { return r.text }
func (r *jsonRule) Source() KeySource    { return KeySourceBodyField }
func (r *jsonRule) Alternatives() []Rule { return []Rule{r} }

func (r *jsonRule) eval(d *Delivery) (string, bool, error) {
	if err := d.checkJSON(); err != nil {
		return "", false, malformed(r.text, "body is not valid JSON", err)
	}
	v, found, err := d.lookup(r.text, r.steps)
	if err != nil {
		var shape *shapeError
		ke := &KeyError{Rule: r.text, Reason: err.Error(), mismatch: errors.As(err, &shape)}
		return "", false, ke
	}
	return v, found, nil
}

// joinedRule joins the values of several rules with ":". A key made of some
// of the parts would name a different thing than the rule says, so the joined
// value is absent unless every part is present.
type joinedRule struct {
	text  string
	parts []Rule
}

func (r *joinedRule) String() string       { return r.text }
func (r *joinedRule) Alternatives() []Rule { return []Rule{r} }

func (r *joinedRule) Source() KeySource {
	src := KeySourceBodyHash
	for _, p := range r.parts {
		switch p.Source() {
		case KeySourceBodyField:
			return KeySourceBodyField
		case KeySourceHeader:
			src = KeySourceHeader
		}
	}
	return src
}

func (r *joinedRule) eval(d *Delivery) (string, bool, error) {
	values := make([]string, 0, len(r.parts))
	all := true
	// Every part is evaluated even after one is absent, so that a malformed
	// body is reported whatever the order of the parts.
	for _, p := range r.parts {
		v, found, err := p.eval(d)
		if err != nil {
			return "", false, err
		}
		all = all && found
		values = append(values, v)
	}
	if !all {
		return "", false, nil
	}
	return strings.Join(values, ":"), true, nil
}

// bodyHashRule is the fallback rule: the hash of the raw body.
type bodyHashRule struct{}

func (bodyHashRule) String() string         { return "sha256" }
func (bodyHashRule) Source() KeySource      { return KeySourceBodyHash }
func (r bodyHashRule) Alternatives() []Rule { return []Rule{r} }

func (bodyHashRule) eval(d *Delivery) (string, bool, error) {
	if len(d.body) == 0 {
		return "", false, nil
	}
	return bodyHashKey(d.body), true, nil
}

// alternativesRule tries its alternatives in order; the first that yields a
// value gives the key.
type alternativesRule struct {
	text string
	alts []Rule
}

func (r *alternativesRule) String() string       { return r.text }
func (r *alternativesRule) Source() KeySource    { return KeySourceUnspecified }
func (r *alternativesRule) Alternatives() []Rule { return r.alts }

func (r *alternativesRule) eval(d *Delivery) (string, bool, error) {
	_, v, err := firstYield(r.alts, d)
	return v, err == nil && v != "", err
}

// firstYield returns the index and value of the first of alts that yields a
// value for d, or -1 when none does. An alternative that met a value of the
// wrong type is passed over (it describes another family's deliveries); its
// error is returned only when no later alternative yields. Any other error
// ends the search: the delivery is malformed whichever family it is.
func firstYield(alts []Rule, d *Delivery) (int, string, error) {
	var mismatch error
	for i, a := range alts {
		v, found, err := a.eval(d)
		var ke *KeyError
		switch {
		case err != nil && errors.As(err, &ke) && ke.mismatch:
			if mismatch == nil {
				mismatch = err
			}
		case err != nil:
			return -1, "", err
		case found:
			return i, v, nil
		}
	}
	return -1, "", mismatch
}
