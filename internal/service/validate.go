package service

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/textclip"
	"github.com/claimd/claimd/internal/tiers"
)

// Bounds of the API (DESIGN §2). They are part of the contract: clients rely
// on them, so they are constants, not configuration.
const (
	MaxKeyBytes       = 255
	MaxHolderBytes    = 255
	MaxAttemptIDBytes = 128
	MaxResultBytes    = 64 << 10
	MaxWait           = 30 * time.Second
	// MaxWindow bounds ClaimRequest.window (the API's 400 days). A window
	// longer than the audit retention (--retention, 35 days by default)
	// outlives the audit rows of its first claim in the live log; the
	// exported months (--audit-export-dir) still explain it.
	MaxWindow   = 400 * 24 * time.Hour
	sha256Bytes = 32
)

var namespacePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// maxNamespaceBytes is the longest name namespacePattern admits; a longer
// one is refused by its length, which says more than the pattern.
const maxNamespaceBytes = 63

// checker collects every violation of one request, so a caller fixes all of
// them at once.
type checker struct {
	msg string // request message name, e.g. "ClaimRequest"
	vs  []violation
}

// add records a violation. Callers quote a caller's string with quote;
// the description is clipped as well, because some embed text derived from
// the request (a delivery's JSON member names).
func (c *checker) add(field, format string, args ...any) {
	c.vs = append(c.vs, violation{field: c.msg + "." + field, desc: textclip.Cut(fmt.Sprintf(format, args...), maxDescBytes)})
}

func (c *checker) err() error {
	if len(c.vs) == 0 {
		return nil
	}
	return &invalidArgument{violations: c.vs}
}

func (c *checker) namespace(ns string) {
	switch {
	case ns == "":
		c.add("namespace", "required")
	case len(ns) > maxNamespaceBytes:
		c.add("namespace", "%d bytes exceeds the maximum of %d", len(ns), maxNamespaceBytes)
	case !namespacePattern.MatchString(ns):
		c.add("namespace", "%s must match %s", quote(ns), namespacePattern)
	}
}

func (c *checker) provider(name string) {
	if name == "" {
		c.add("provider", "required")
	}
}

// text checks a key-like string: valid UTF-8, no control characters, and
// between min and max bytes. It reports whether s passed.
func (c *checker) text(field, s string, minBytes, maxBytes int) bool {
	switch {
	case len(s) < minBytes && minBytes == 1:
		c.add(field, "required")
	case len(s) > maxBytes:
		c.add(field, "%d bytes exceeds the maximum of %d", len(s), maxBytes)
	case !utf8.ValidString(s):
		c.add(field, "must be valid UTF-8")
	default:
		for i, r := range s {
			if unicode.IsControl(r) {
				c.add(field, "control character %U at byte %d is not allowed", r, i)
				return false
			}
		}
		return true
	}
	return false
}

func (c *checker) key(field, k string) bool { return c.text(field, k, 1, MaxKeyBytes) }

// ScopeSeparator joins a key and its scope into the canonical key of a
// scoped claim: <key> U+001F <scope>. An event_id, a scope and a derived key
// may not hold control characters, so no unscoped key equals a scoped one
// and no two (key, scope) pairs compose alike. Unscoped keys are stored
// exactly as sent, as they always were.
const ScopeSeparator = "\x1f"

// recordKey checks the canonical key of a follow-up call: a key as Claim
// takes it, or a scoped key whose only control character is the one
// ScopeSeparator between two non-empty parts.
func (c *checker) recordKey(field, k string) bool {
	sep := strings.Index(k, ScopeSeparator)
	if sep < 0 {
		return c.key(field, k)
	}
	switch {
	case len(k) > MaxKeyBytes:
		c.add(field, "%d bytes exceeds the maximum of %d", len(k), MaxKeyBytes)
	case !utf8.ValidString(k):
		c.add(field, "must be valid UTF-8")
	case sep == 0 || sep == len(k)-1:
		c.add(field, "a scoped key is <key> U+001F <scope>, and neither part may be empty")
	default:
		for i, r := range k {
			if unicode.IsControl(r) && i != sep {
				c.add(field, "control character %U at byte %d is not allowed", r, i)
				return false
			}
		}
		return true
	}
	return false
}

func (c *checker) token(t uint64) {
	if t == 0 {
		c.add("fencing_token", "required (the token Claim returned, > 0)")
	}
}

// secret checks a presented lease secret's size only: whether it is the
// owner's is the store's decision, made with the token.
func (c *checker) secret(s []byte) {
	switch {
	case len(s) == 0:
		c.add("lease_secret", "required (the lease_secret Claim returned with the token, %d bytes)", LeaseSecretBytes)
	case len(s) != LeaseSecretBytes:
		c.add("lease_secret", "%d bytes, want %d", len(s), LeaseSecretBytes)
	}
}

// state checks a target state on its wire value (an int32) before it is
// narrowed to a tiers.State, so that 259 cannot wrap around to PROCESSING.
// It returns StateUnspecified when v is not a target state.
func (c *checker) state(field string, v pb.EventState) tiers.State {
	if v <= pb.EventState_EVENT_STATE_UNSPECIFIED || v > pb.EventState(tiers.StateFailed) {
		c.add(field, "%d is not a target state (EVENT_STATE_RECEIVED … EVENT_STATE_FAILED)", int32(v))
		return tiers.StateUnspecified
	}
	return tiers.State(v)
}

// duration checks an optional duration in (0, max]. It returns 0 when d is
// unset or invalid (a violation is then recorded for an invalid one).
func (c *checker) duration(field string, d *durationpb.Duration, max time.Duration, maxName string) time.Duration {
	if d == nil {
		return 0
	}
	if err := d.CheckValid(); err != nil {
		c.add(field, "invalid duration: %v", err)
		return 0
	}
	v := d.AsDuration()
	switch {
	case v <= 0:
		c.add(field, "%v must be > 0", v)
		return 0
	case max > 0 && v > max:
		c.add(field, "%v exceeds %s %v", v, maxName, max)
		return 0
	}
	return v
}

// window checks ClaimRequest.window against prov and returns the dedup
// window a claim opens: prov's own (retry horizon + margin) when d is unset
// or zero, else d, which may be longer but never shorter (a retry of the
// provider after a shorter window would be claimed as a new delivery) and
// at most MaxWindow. An invalid d is recorded and prov's window returned.
func (c *checker) window(d *durationpb.Duration, prov *horizon.Provider) time.Duration {
	if d == nil {
		return prov.TTL
	}
	if err := d.CheckValid(); err != nil {
		c.add("window", "invalid duration: %v", err)
		return prov.TTL
	}
	switch v := d.AsDuration(); {
	case v == 0:
	case v < prov.TTL:
		c.add("window", "%v is shorter than the window of %s, %v (retry horizon %v + margin %v): a retry after it would be claimed as a new delivery",
			v, quote(prov.Name), prov.TTL, prov.RetryHorizon, prov.Margin)
	case v > MaxWindow:
		c.add("window", "%v exceeds the maximum window %v (400 days)", v, MaxWindow)
	default:
		return v
	}
	return prov.TTL
}
