package textclip_test

import (
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/textclip"
)

func TestClip(t *testing.T) {
	tests := []struct{ desc, got, want string }{
		{"short text as is", textclip.Cut("abc", 4), "abc"},
		{"long text cut, length said", textclip.Cut("abcdefghij", 4), "abcd… (10 bytes)"},
		{"a character is never split", textclip.Cut("abé", 3), "ab… (4 bytes)"},
		{"short text quoted", textclip.Quote("a\x01", 4), `"a\x01"`},
		{"long text quoted, cut", textclip.Quote(strings.Repeat("z", 5000), 2), `"zz"… (5000 bytes)`},
		{"a 4-byte character is never split", textclip.Quote("a😀", 3), `"a"… (5 bytes)`},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.desc, tc.got, tc.want)
		}
	}
	if p, cut := textclip.Prefix("abc", 3); p != "abc" || cut {
		t.Errorf("Prefix(abc, 3) = %q, %v; want abc, false", p, cut)
	}
}
