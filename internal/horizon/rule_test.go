package horizon_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/horizon"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		desc    string
		rule    string
		wantSrc horizon.KeySource
	}{
		{desc: "header", rule: "header:X-GitHub-Delivery", wantSrc: horizon.KeySourceHeader},
		{desc: "header with token characters", rule: "header:X_Odd.Name~1", wantSrc: horizon.KeySourceHeader},
		{desc: "top-level field", rule: "json:id", wantSrc: horizon.KeySourceBodyField},
		{desc: "dot path", rule: "json:data.object.id", wantSrc: horizon.KeySourceBodyField},
		{desc: "array indexes", rule: "json:notificationItems[0].NotificationRequestItem.pspReference", wantSrc: horizon.KeySourceBodyField},
		{desc: "body that is an array", rule: "json:[0].id", wantSrc: horizon.KeySourceBodyField},
		{desc: "nested indexes", rule: "json:a[10][2]", wantSrc: horizon.KeySourceBodyField},
		{desc: "keys with punctuation", rule: "json:$meta.event-id", wantSrc: horizon.KeySourceBodyField},
		{desc: "body hash", rule: "sha256", wantSrc: horizon.KeySourceBodyHash},
		{desc: "joined json", rule: "json:a+json:b", wantSrc: horizon.KeySourceBodyField},
		{desc: "joined headers", rule: "header:A+header:B", wantSrc: horizon.KeySourceHeader},
		{desc: "joined header and json", rule: "header:A+json:b", wantSrc: horizon.KeySourceBodyField},
		{desc: "joined header and hash", rule: "header:A+sha256", wantSrc: horizon.KeySourceHeader},
		{desc: "alternatives", rule: "header:X-Shopify-Webhook-Id | header:Shopify-Webhook-Id", wantSrc: horizon.KeySourceUnspecified},
		{desc: "alternatives without spaces", rule: "json:a+json:b|json:c|sha256", wantSrc: horizon.KeySourceUnspecified},
		{desc: "alternatives spaced with tabs", rule: "json:a\t|\tjson:b", wantSrc: horizon.KeySourceUnspecified},
		{desc: "as many alternatives as allowed", rule: alternatives(24), wantSrc: horizon.KeySourceUnspecified},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r, err := horizon.ParseRule(tc.rule)
			if err != nil {
				t.Fatalf("ParseRule(%q) error = %v", tc.rule, err)
			}
			if got := r.String(); got != tc.rule {
				t.Errorf("ParseRule(%q).String() = %q, want the rule as written", tc.rule, got)
			}
			if got := r.Source(); got != tc.wantSrc {
				t.Errorf("ParseRule(%q).Source() = %v, want %v", tc.rule, got, tc.wantSrc)
			}
			if alts := r.Alternatives(); len(alts) != strings.Count(tc.rule, "|")+1 {
				t.Errorf("ParseRule(%q) has %d alternatives, want one per |-separated rule", tc.rule, len(alts))
			}
		})
	}
}

// alternatives returns a rule of n distinct alternatives: json:a0 | json:a1 ...
func alternatives(n int) string {
	alts := make([]string, n)
	for i := range alts {
		alts[i] = "json:a" + strconv.Itoa(i)
	}
	return strings.Join(alts, " | ")
}

func TestParseRuleRefuses(t *testing.T) {
	tests := []struct {
		desc    string
		rule    string
		wantMsg string // a part of the error that says why
	}{
		{desc: "empty", rule: "", wantMsg: "key rule is empty"},
		{desc: "unknown kind", rule: "query:id", wantMsg: "unknown kind"},
		{desc: "prefix case matters", rule: "JSON:id", wantMsg: "unknown kind"},
		{desc: "empty header name", rule: "header:", wantMsg: "header name is empty"},
		{desc: "header name with a space", rule: "header:X Id", wantMsg: "not allowed in a header name"},
		{desc: "header name with a colon", rule: "header:X:Id", wantMsg: "not allowed in a header name"},
		{desc: "empty path", rule: "json:", wantMsg: "path is empty"},
		{desc: "path with an empty key", rule: "json:a..b", wantMsg: "want a key at byte 2"},
		{desc: "path ending with a dot", rule: "json:a.", wantMsg: "ends with '.'"},
		{desc: "path starting with a dot", rule: "json:.a", wantMsg: "want a key at byte 0"},
		{desc: "unclosed index", rule: "json:a[0", wantMsg: "is not closed"},
		{desc: "empty index", rule: "json:a[]", wantMsg: "is empty"},
		{desc: "negative index", rule: "json:a[-1]", wantMsg: "is not a decimal number"},
		{desc: "index with a leading zero", rule: "json:a[01]", wantMsg: "has a leading zero"},
		{desc: "huge index", rule: "json:a[9999999999]", wantMsg: "has more than 9 digits"},
		{desc: "text after an index", rule: "json:a[0]b", wantMsg: `unexpected 'b'`},
		{desc: "stray bracket", rule: "json:a]", wantMsg: `unexpected ']'`},
		{desc: "space in a path", rule: "json:a b", wantMsg: `unexpected ' '`},
		{desc: "empty joined part", rule: "json:a+", wantMsg: "has an empty part"},
		{desc: "part joined twice", rule: "json:a+json:a", wantMsg: "joins json:a twice"},
		{desc: "too many parts", rule: strings.Repeat("json:a+", 8) + "json:b", wantMsg: "more than 8"},
		{desc: "too long", rule: "json:" + strings.Repeat("a", 2100), wantMsg: "more than 2048"},
		{desc: "empty alternative", rule: "json:a | ", wantMsg: "has an empty alternative (number 2)"},
		{desc: "leading empty alternative", rule: "|json:a", wantMsg: "has an empty alternative (number 1)"},
		{desc: "alternative given twice", rule: "json:a | json:b | json:a", wantMsg: "lists alternative json:a twice"},
		{desc: "alternative after sha256", rule: "json:a | sha256 | json:b", wantMsg: "so alternative json:b after it is never tried"},
		{desc: "too many alternatives", rule: alternatives(25), wantMsg: "25 alternatives, more than 24"},
		{desc: "bad part inside an alternative", rule: "json:a | json:b+json:", wantMsg: `key rule "json:": path is empty`},
		{desc: "space inside an alternative", rule: "json:a | json:b + json:c", wantMsg: "unexpected ' '"},
		{desc: "a pipe is no header name character", rule: "header:A|", wantMsg: "has an empty alternative"},
		{desc: "sha256 with an argument", rule: "sha256:body", wantMsg: "unknown kind"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r, err := horizon.ParseRule(tc.rule)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("ParseRule(%q) = %v, %v; want an error containing %q", tc.rule, r, err, tc.wantMsg)
			}
		})
	}
}

// TestParseRuleRefusesVolatileHeaders: a header computed per delivery attempt
// would make each retry a new event, so no rule may read one, in any case
// spelling and inside a joined rule too.
func TestParseRuleRefusesVolatileHeaders(t *testing.T) {
	for _, h := range []string{
		"Stripe-Signature", "webhook-signature", "webhook-timestamp", "svix-signature", "svix-timestamp",
		"X-Hub-Signature", "X-Hub-Signature-256", "X-Shopify-Hmac-Sha256", "Paypal-Transmission-Sig",
		"Paypal-Transmission-Time", "X-Twilio-Signature", "X-Square-Hmacsha256-Signature", "X-Square-Signature",
		"HmacSignature", "Date", "STRIPE-SIGNATURE", "X-Acme-Signature", "X-Acme-Request-Timestamp",
	} {
		for _, rule := range []string{"header:" + h, "json:id+header:" + h, "json:id | header:" + h} {
			t.Run(rule, func(t *testing.T) {
				r, err := horizon.ParseRule(rule)
				if err == nil || !strings.Contains(err.Error(), "changes on every retry") {
					t.Errorf("ParseRule(%q) = %v, %v; want an error saying it changes on every retry", rule, r, err)
				}
			})
		}
	}
}

// TestAlternativesKeepTheirText: each alternative is the rule as written
// between the |, without the spaces around it, and parses alone to itself.
func TestAlternativesKeepTheirText(t *testing.T) {
	const rule = "json:items[0].ref+json:items[0].code |  json:type+json:eventId|\theader:X-Id  | sha256"
	r, err := horizon.ParseRule(rule)
	if err != nil {
		t.Fatalf("ParseRule(%q) error = %v", rule, err)
	}
	want := []string{"json:items[0].ref+json:items[0].code", "json:type+json:eventId", "header:X-Id", "sha256"}
	var got []string
	for _, a := range r.Alternatives() {
		got = append(got, a.String())
		alone, err := horizon.ParseRule(a.String())
		if err != nil || alone.String() != a.String() {
			t.Errorf("ParseRule(%q) = %v, %v; want the alternative back", a, alone, err)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ParseRule(%q).Alternatives() = %q, want %q", rule, got, want)
	}
	if r.String() != rule {
		t.Errorf("ParseRule(%q).String() = %q, want the rule as written", rule, r.String())
	}
}
