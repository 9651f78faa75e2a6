package horizon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// KeySource says where a key came from. Its values and names follow the
// proto enum KeySource (KEY_SOURCE_EVENT_ID ...); horizon does not import
// the API, so the service maps one to the other (service/convert.go).
type KeySource uint8

// Sources of a key.
const (
	KeySourceUnspecified KeySource = iota
	// KeySourceEventID: the caller sent the provider's event id itself.
	KeySourceEventID
	// KeySourceHeader: read from a delivery header (header:<Name>).
	KeySourceHeader
	// KeySourceBodyField: read from the JSON body (json:<path>), or joined
	// from rules of which at least one reads the body.
	KeySourceBodyField
	// KeySourceBodyHash: the hash of the raw body, "sha256:<hex>", used by
	// the sha256 rule and whenever a rule's value is absent.
	KeySourceBodyHash
)

var keySourceNames = [...]string{"UNSPECIFIED", "EVENT_ID", "HEADER", "BODY_FIELD", "BODY_HASH"}

// String returns the name of s as in the proto enum, without its prefix:
// "BODY_HASH" for KEY_SOURCE_BODY_HASH.
func (s KeySource) String() string {
	if int(s) < len(keySourceNames) {
		return keySourceNames[s]
	}
	return fmt.Sprintf("KeySource(%d)", s)
}

// MaxKeyLen is the longest key a rule may derive, in bytes: the bound the
// API puts on an event_id, so a derived key is as valid as a sent one.
const MaxKeyLen = 255

// Sentinel errors of key derivation. The service maps both to
// INVALID_ARGUMENT with errors.Is; a *KeyError carries the rule for the
// message.
var (
	// ErrMalformedBody: the delivery cannot yield a key under the rule: a
	// json rule met a body that is not valid JSON, the value has the wrong
	// type or is not a valid key, a header is given twice with different
	// values, or the value is absent and the body is empty (there is nothing
	// to hash).
	ErrMalformedBody = errors.New("malformed delivery")
	// ErrNoKeyRule: the provider (or group) has no key rule, so the caller
	// must send the event id instead of the raw delivery.
	ErrNoKeyRule = errors.New("no key rule")
)

// KeyError reports a delivery from which a rule cannot derive a key. It
// unwraps to ErrMalformedBody and to the underlying cause, if any.
type KeyError struct {
	Rule   string // the rule, as written: "json:id"
	Reason string // what is wrong: "body is not valid JSON"
	Cause  error  // the parser's error, or nil

	// mismatch: a value on the rule's path has another type than the path
	// expects. Alternatives pass such a rule over (see firstYield).
	mismatch bool
}

// Error renders e as "key rule <rule>: <reason>[: <cause>]".
func (e *KeyError) Error() string {
	if e.Cause != nil {
		return "key rule " + e.Rule + ": " + e.Reason + ": " + e.Cause.Error()
	}
	return "key rule " + e.Rule + ": " + e.Reason
}

// Unwrap returns ErrMalformedBody and the cause.
func (e *KeyError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrMalformedBody, e.Cause}
	}
	return []error{ErrMalformedBody}
}

func malformed(rule, reason string, cause error) error {
	return &KeyError{Rule: rule, Reason: reason, Cause: cause}
}

// Derived is a key derived from a raw delivery, and how it was found.
type Derived struct {
	Key    string
	Source KeySource
	// Rule is the alternative of the provider's rule that yielded the key,
	// as written ("json:type+json:eventId"); "" when none did and the key is
	// the body hash.
	Rule string
	// Fallback is set when the provider's rule found no value in the
	// delivery and the key is therefore the body hash. A rule that is sha256,
	// or ends with the alternative sha256, declares the hash and never falls
	// back. A fallback is not an error (the provider resends the same bytes,
	// so the hash still recognises retries), but it is a sign that the
	// provider sent a delivery shaped as no rule expects: a new webhook
	// family, or a changed format.
	Fallback bool
}

// DeriveKey derives the key of a raw delivery by p's rule. The first
// alternative of the rule that finds a value gives the key (Source says where
// it came from); when none does, the key is the hash of the raw body,
// "sha256:<hex>", with Source = KeySourceBodyHash and Fallback set: the
// provider resends the same bytes, so the hash still recognises its retries.
//
// Errors: ErrNoKeyRule when p has no rule; a *KeyError (ErrMalformedBody)
// when the delivery is malformed under the rule. headers match
// case-insensitively; body is never modified or retained.
func (p *Provider) DeriveKey(d *Delivery) (Derived, error) {
	if p.Rule == nil {
		if p.IsGroup() {
			return Derived{}, fmt.Errorf("%w: group %s: its members derive keys by different rules; send event_id", ErrNoKeyRule, p.Name)
		}
		return Derived{}, fmt.Errorf("%w: provider %s derives no key from a delivery; send event_id", ErrNoKeyRule, p.Name)
	}
	return deriveKey(p.Rule, d)
}

func deriveKey(r Rule, d *Delivery) (Derived, error) {
	alts := r.Alternatives()
	i, v, err := firstYield(alts, d)
	if err != nil {
		return Derived{}, err
	}
	if i >= 0 {
		alt := alts[i]
		if reason := invalidKey(v); reason != "" {
			return Derived{}, malformed(alt.String(), reason, nil)
		}
		return Derived{Key: v, Source: alt.Source(), Rule: alt.String()}, nil
	}
	if len(d.body) == 0 {
		// Every such delivery would hash alike: one would be served as the
		// duplicate of another, unrelated one.
		return Derived{}, malformed(r.String(), "no value under the rule and the body is empty, so there is nothing to hash", nil)
	}
	return Derived{Key: bodyHashKey(d.body), Source: KeySourceBodyHash, Fallback: true}, nil
}

// bodyHashKey is the key of a raw body: "sha256:" and the hex of its hash.
func bodyHashKey(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// invalidKey says why v cannot be a key, or returns "". A key travels in
// proto string fields (which must be UTF-8) and in storage keys and logs
// (where control characters do harm).
func invalidKey(v string) string {
	if len(v) > MaxKeyLen {
		return fmt.Sprintf("value is %d bytes long, more than %d", len(v), MaxKeyLen)
	}
	if !utf8.ValidString(v) {
		return "value is not valid UTF-8"
	}
	for _, c := range v {
		if unicode.IsControl(c) {
			return fmt.Sprintf("value has a control character (%U)", c)
		}
	}
	return ""
}

// Delivery is one raw delivery, read once per Claim by every rule that
// asks about it: the key rule (DeriveKey) and the lifecycle rules
// (PlaceDelivery). It checks the body's JSON validity once and remembers
// each path's value, so a path that both read (Stripe's data.object.id is
// a key part and an entity id) walks the body once. Not safe for concurrent
// use; the body is never modified.
type Delivery struct {
	headers map[string]string
	body    []byte

	jsonChecked bool
	jsonErr     error
	// paths remembers lookupPath's answer per path text.
	paths map[string]pathValue
}

// pathValue is one lookupPath answer.
type pathValue struct {
	value string
	found bool
	err   error
}

// NewDelivery wraps a raw delivery as received: its headers (names matched
// case-insensitively) and body.
func NewDelivery(headers map[string]string, body []byte) *Delivery {
	return &Delivery{headers: headers, body: body}
}

// lookup returns the value at the path of r, walking the body the first
// time only.
func (d *Delivery) lookup(text string, steps []pathStep) (string, bool, error) {
	if v, ok := d.paths[text]; ok {
		return v.value, v.found, v.err
	}
	v, found, err := lookupPath(d.body, steps)
	if d.paths == nil {
		d.paths = make(map[string]pathValue, 4)
	}
	d.paths[text] = pathValue{v, found, err}
	return v, found, err
}

// checkJSON reports whether the body is one valid JSON value. The whole body
// is checked, not only the part a path reads: a truncated body is not the
// body the provider signed, whatever its first field says.
func (d *Delivery) checkJSON() error {
	if !d.jsonChecked {
		d.jsonChecked = true
		if !json.Valid(d.body) {
			// Valid says no without saying why; Unmarshal says why.
			d.jsonErr = json.Unmarshal(d.body, new(json.RawMessage))
			if d.jsonErr == nil {
				d.jsonErr = errors.New("invalid JSON")
			}
		}
	}
	return d.jsonErr
}
