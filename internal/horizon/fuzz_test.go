package horizon

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The fuzz targets run their seed corpus (testdata/fuzz/<FuzzName>/ and the
// f.Add calls) as ordinary tests in `go test`; `go test -fuzz FuzzParseRule`
// explores further.

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"json:id", "header:X-GitHub-Delivery", "sha256", "json:a[0].b+json:c",
		"json:[0]", "header:Stripe-Signature", "json:a..b", "json:a[01]", "+", "json:é.ü",
	} {
		f.Add(s)
	}
	deliveries := []struct {
		headers map[string]string
		body    []byte
	}{
		{nil, nil},
		{map[string]string{"x-github-delivery": "d1", "A": "1"}, []byte(`{"id":"evt_1","a":[{"b":2}],"c":"x"}`)},
		{map[string]string{"X-Id": "\x00"}, []byte(`[{"id":null},{"id":true}]`)},
		{nil, []byte(`{"id":`)},
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if r != nil {
				t.Fatalf("ParseRule(%q) = %v, %v; want a nil rule with the error", s, r, err)
			}
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRule(%q).String() = %q, want the input", s, r.String())
		}
		if src := r.Source(); src < KeySourceHeader || src > KeySourceBodyHash {
			t.Fatalf("ParseRule(%q).Source() = %v, want HEADER, BODY_FIELD or BODY_HASH", s, src)
		}
		for _, part := range strings.Split(s, "+") {
			if name, ok := strings.CutPrefix(part, "header:"); ok {
				lower := strings.ToLower(name)
				if _, volatile := volatileHeaders[lower]; volatile || strings.Contains(lower, "signature") || strings.Contains(lower, "timestamp") {
					t.Fatalf("ParseRule(%q) accepted a rule reading the per-delivery header %s", s, name)
				}
			}
			if path, ok := strings.CutPrefix(part, "json:"); ok {
				steps, err := parsePath(path)
				if err != nil {
					t.Fatalf("ParseRule(%q) accepted path %q that parsePath refuses: %v", s, path, err)
				}
				if got := formatPath(steps); got != path {
					t.Fatalf("formatPath(parsePath(%q)) = %q, want the path back", path, got)
				}
			}
		}
		for _, d := range deliveries {
			key, src, err := deriveKey(r, d.headers, d.body)
			switch {
			case err != nil:
				if !errors.Is(err, ErrMalformedBody) {
					t.Fatalf("deriveKey(%q) error = %v, want one wrapping ErrMalformedBody", s, err)
				}
			case key == "" || invalidKey(key) != "":
				t.Fatalf("deriveKey(%q) = %q, %v: not a valid key", s, key, src)
			}
		}
	})
}

func FuzzJSONPath(f *testing.F) {
	f.Add("id", []byte(`{"id":"evt_1"}`))
	f.Add("a.b[1]", []byte(`{"a":{"b":[0, 1.50e3, 2]}}`))
	f.Add("a", []byte(`{"a":1,"a":2}`))
	f.Add("[0].id", []byte(`[{"id":"x"}]`))
	f.Add("x", []byte(`{"x":"\u00e9\ud800"}`))
	f.Add("x", []byte(`{"x":"\ud800\u0041"}`))
	f.Add("x", []byte(`{"x":"\ud83d\ude00\\ud800"}`))
	f.Add("x", []byte("{\"x\":\"A\xff\"}"))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		steps, err := parsePath(path)
		if err != nil {
			return
		}
		r := &jsonRule{text: "json:" + path, steps: steps}
		value, found, err := r.eval(&delivery{body: body})
		if !json.Valid(body) {
			if !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("eval(%q, %q) = %q, %v, %v; want ErrMalformedBody for invalid JSON", path, body, value, found, err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedBody) {
				t.Fatalf("eval(%q, %q) error = %v, want one wrapping ErrMalformedBody", path, body, err)
			}
			return
		}
		// A reference reading of the same path: decode everything, then
		// walk. Where the walker answers, there is no duplicate member on the
		// path, so the reference's last-wins maps agree with it.
		want, wantFound := referenceLookup(t, body, steps)
		if found != wantFound || value != want {
			t.Fatalf("eval(%q, %q) = %q, %v; the reference reads %q, %v", path, body, value, found, want, wantFound)
		}
	})
}

func referenceLookup(t *testing.T, body []byte, steps []pathStep) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("reference decode of valid JSON %q: %v", body, err)
	}
	for _, st := range steps {
		switch c := v.(type) {
		case map[string]any:
			if st.isIndex {
				t.Fatalf("walker accepted an object where %v indexes an array", st)
			}
			v = c[st.key]
		case []any:
			if !st.isIndex {
				t.Fatalf("walker accepted an array where %q names a member", st.key)
			}
			if st.index >= len(c) {
				return "", false
			}
			v = c[st.index]
		case nil:
			return "", false
		default:
			t.Fatalf("walker accepted a %T on the path", v)
		}
	}
	switch x := v.(type) {
	case string:
		return x, x != ""
	case json.Number:
		return string(x), true
	case nil:
		return "", false
	}
	t.Fatalf("walker accepted a %T as the value", v)
	return "", false
}

// FuzzLoad: any file an operator hands to `claimd providers --check` yields
// a registry or errors that name the file, never a panic; a registry it
// yields keeps the window invariants.
func FuzzLoad(f *testing.F) {
	f.Add(defaultYAML)
	f.Add([]byte("version: 1\nproviders:\n  a: {retry_horizon: 1h, margin: 1h, lease: 1s, source: 'https://x', reviewed_on: 2026-01-01}\ngroups:\n  g: [a]\n"))
	f.Add([]byte("# only a comment\n"))
	f.Add([]byte("version: 1\nproviders:\n  a: &x {}\n  b: *x\n"))
	f.Add([]byte("providers: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Load("f.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("Load() error = %q, want it to name the file", err)
			}
			return
		}
		for _, p := range r.List() {
			if p.TTL <= p.RetryHorizon || p.Lease <= 0 || p.Lease > p.MaxLease || p.MaxLease > p.TTL {
				t.Fatalf("Load() accepted %s with horizon %v, ttl %v, lease %v, max_lease %v", p.Name, p.RetryHorizon, p.TTL, p.Lease, p.MaxLease)
			}
		}
	})
}
