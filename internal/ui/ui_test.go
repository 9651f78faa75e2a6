package ui_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/claimd/claimd/internal/ui"
)

func serve(t *testing.T, method, target string) *http.Response {
	t.Helper()
	w := httptest.NewRecorder()
	ui.Handler().ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w.Result()
}

func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHandler: each file with its type and the headers that keep the page
// to itself (its own script only, no framing, no sniffing, no caching); GET
// and HEAD only; the same bytes whatever the query names.
func TestHandler(t *testing.T) {
	for _, tc := range []struct {
		desc, method, target string
		wantStatus           int
		wantType             string
	}{
		{"the page", "GET", "/ui/", 200, "text/html; charset=utf-8"},
		{"the page of one key", "GET", "/ui/?namespace=billing&provider=stripe&key=evt_1", 200, "text/html; charset=utf-8"},
		{"its index by name", "GET", "/ui/index.html", 200, "text/html; charset=utf-8"},
		{"its script", "GET", "/ui/app.js", 200, "text/javascript; charset=utf-8"},
		{"its style", "GET", "/ui/app.css", 200, "text/css; charset=utf-8"},
		{"its icon", "GET", "/ui/favicon.svg", 200, "image/svg+xml"},
		{"HEAD", "HEAD", "/ui/app.js", 200, "text/javascript; charset=utf-8"},
		{"no such file", "GET", "/ui/secrets.json", 404, ""},
		{"no directory walk", "GET", "/ui/../ui.go", 404, ""},
		{"a write", "POST", "/ui/", 405, ""},
		{"a delete", "DELETE", "/ui/app.js", 405, ""},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			res := serve(t, tc.method, tc.target)
			b := body(t, res)
			if res.StatusCode != tc.wantStatus {
				t.Fatalf("%s %s = %d, want %d", tc.method, tc.target, res.StatusCode, tc.wantStatus)
			}
			for h, want := range map[string]string{
				"Content-Security-Policy": ui.ContentSecurityPolicy,
				"X-Frame-Options":         "DENY",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"Cache-Control":           "no-store",
			} {
				if got := res.Header.Get(h); got != want {
					t.Errorf("%s %s: %s = %q, want %q", tc.method, tc.target, h, got, want)
				}
			}
			if tc.wantType != "" && res.Header.Get("Content-Type") != tc.wantType {
				t.Errorf("%s %s: Content-Type = %q, want %q", tc.method, tc.target, res.Header.Get("Content-Type"), tc.wantType)
			}
			if tc.method == "HEAD" && b != "" {
				t.Errorf("HEAD %s wrote a body of %d bytes", tc.target, len(b))
			}
			if tc.wantStatus == 405 && res.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: Allow = %q, want GET, HEAD", tc.method, tc.target, res.Header.Get("Allow"))
			}
		})
	}
	for _, csp := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(ui.ContentSecurityPolicy, csp) {
			t.Errorf("Content-Security-Policy lacks %s", csp)
		}
	}
	if strings.Contains(ui.ContentSecurityPolicy, "unsafe") {
		t.Errorf("Content-Security-Policy allows something unsafe: %s", ui.ContentSecurityPolicy)
	}

	// The shell names nothing of what it is asked about: its bytes are the
	// embedded file's, whatever the query.
	plain := body(t, serve(t, "GET", "/ui/"))
	asked := body(t, serve(t, "GET", "/ui/?namespace=billing&provider=stripe&key=evt_secret_key"))
	if plain != asked || strings.Contains(asked, "evt_secret_key") {
		t.Errorf("GET /ui/?…key=evt_secret_key differs from GET /ui/ or names the key")
	}

	res := serve(t, "GET", "/ui?namespace=billing&key=evt_1")
	if res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/ui/?namespace=billing&key=evt_1" {
		t.Errorf("GET /ui?… = %d Location %q, want 301 to /ui/?namespace=billing&key=evt_1", res.StatusCode, res.Header.Get("Location"))
	}
}

// TestStaticFiles holds the page's sources to its security rules: no inline
// script or handler (the CSP would refuse them), nothing fetched from
// another origin, and no way to turn an API string into markup or code.
func TestStaticFiles(t *testing.T) {
	root := os.DirFS("static")
	inline := regexp.MustCompile(`(?is)<script(?:[^>]*)>\s*[^<\s]|\son[a-z]+\s*=|javascript:|style\s*=`)
	external := regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	unsafe := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*['"]on`)
	var files int
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		src := string(b)
		// XML namespaces are names, not fetches.
		src = strings.ReplaceAll(src, "http://www.w3.org/2000/svg", "")
		if m := external.FindString(src); m != "" {
			t.Errorf("%s names another origin (%s): the page fetches nothing but its own files and claimd's API", p, m)
		}
		switch filepath.Ext(p) {
		case ".html":
			if m := inline.FindString(src); m != "" {
				t.Errorf("%s has inline script, a handler attribute or a style attribute (%q): the CSP refuses them", p, m)
			}
			for _, ref := range regexp.MustCompile(`(?:src|href)="([a-z.]+)"`).FindAllStringSubmatch(src, -1) {
				if res := serve(t, "GET", "/ui/"+ref[1]); res.StatusCode != 200 {
					t.Errorf("%s refers to %s, which the handler answers %d", p, ref[1], res.StatusCode)
				}
			}
		case ".js":
			if m := unsafe.FindString(src); m != "" {
				t.Errorf("%s uses %s: API strings must become text nodes, never markup or code", p, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("read %d files of static/, want the page's", files)
	}
}
