package server

import (
	"errors"
	"strings"
	"testing"
)

// TestAllowedHosts: --http-allowed-hosts defaults to loopback's names and
// the host that --http-listen names, never an unspecified address; a
// value that could never match a Host (a URL) is refused.
func TestAllowedHosts(t *testing.T) {
	loop := []string{"localhost", "127.0.0.1", "::1"}
	for _, c := range []struct {
		desc, flag, listen string
		want               []string
	}{
		{"default", "", "127.0.0.1:8080", loop},
		{"a named listener", "", "claimd.internal:8080", append(loop[:3:3], "claimd.internal")},
		{"an address", "", "10.0.0.5:8080", append(loop[:3:3], "10.0.0.5")},
		{"all interfaces", "", "0.0.0.0:8080", loop},
		{"all interfaces, IPv6", "", "[::]:8080", loop},
		{"no host", "", ":8080", loop},
		{"given", " a.example ,b.example,", "0.0.0.0:8080", []string{"a.example", "b.example"}},
		{"any", "*", "127.0.0.1:8080", []string{"*"}},
	} {
		got, err := allowedHosts(c.flag, c.listen)
		if err != nil || strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: allowedHosts(%q, %q) = %q, %v, want %q", c.desc, c.flag, c.listen, got, err, c.want)
		}
	}
	for _, bad := range []string{"http://claimd.example", "claimd.example/v1", "user@claimd.example", "a b"} {
		if got, err := allowedHosts(bad, "127.0.0.1:8080"); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--http-allowed-hosts") {
			t.Errorf("allowedHosts(%q) = %q, %v; want a usage error naming --http-allowed-hosts", bad, got, err)
		}
	}
}
