package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// pageStub stands for the on-call page's files (internal/ui): it answers
// what it was asked, so a test sees that the front door let a request by.
var pageStub = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "page "+r.URL.Path)
})

// TestPages: the paths of Config.Pages pass the Host and Origin checks and,
// under --tls-client-ca, the client certificate check, but need no token (a
// browser's navigation sends none); the API's answers next to them are
// never cached.
func TestPages(t *testing.T) {
	e := newEnv(t, envOptions{})
	hc := e.httpClient(t, cred{})
	get := func(t *testing.T, hc *http.Client, url string, h http.Header) (int, string, http.Header) {
		t.Helper()
		r, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			if k == "Host" {
				r.Host = v[0]
				continue
			}
			r.Header[k] = v
		}
		res, err := hc.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header
	}
	for _, tc := range []struct {
		desc       string
		path       string
		header     http.Header
		wantStatus int
		wantBody   string
	}{
		{desc: "the page without a token", path: "/ui/", wantStatus: 200, wantBody: "page /ui/"},
		{desc: "the prefix without its slash", path: "/ui", wantStatus: 200, wantBody: "page /ui"},
		{desc: "a file of the page", path: "/ui/app.js?namespace=billing", wantStatus: 200, wantBody: "page /ui/app.js"},
		{desc: "a same-site Origin", path: "/ui/", header: http.Header{"Origin": {"https://localhost:8080"}}, wantStatus: 200, wantBody: "page /ui/"},
		{desc: "DNS rebinding: a foreign Host", path: "/ui/", header: http.Header{"Host": {"rebind.evil.example"}}, wantStatus: 421, wantBody: "HOST_NOT_ALLOWED"},
		{desc: "a foreign Origin", path: "/ui/", header: http.Header{"Origin": {"https://evil.example"}}, wantStatus: 403, wantBody: "ORIGIN_NOT_ALLOWED"},
		{desc: "a path that only starts like the page's is the API's", path: "/uix", wantStatus: 404},
		{desc: "the API without a token", path: "/v1/providers", wantStatus: 401, wantBody: "CREDENTIALS_MISSING"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			status, body, _ := get(t, hc, e.httpURL+tc.path, tc.header)
			if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) || (tc.wantStatus != 200 && strings.HasPrefix(body, "page")) {
				t.Errorf("GET %s = %d %q, want %d with %q", tc.path, status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}

	r, err := http.NewRequest(http.MethodGet, e.httpURL+"/v1/providers/stripe", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+readerToken)
	res, err := hc.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET /v1/providers/stripe = %d, Cache-Control %q, X-Content-Type-Options %q; want 200, no-store, nosniff",
			res.StatusCode, res.Header.Get("Cache-Control"), res.Header.Get("X-Content-Type-Options"))
	}

	t.Run("client certificates", func(t *testing.T) {
		e := newEnv(t, envOptions{requireCert: true})
		if status, body, _ := get(t, e.httpClient(t, cred{}), e.httpURL+"/ui/", nil); status != 401 || !strings.Contains(body, "CREDENTIALS_MISSING") {
			t.Errorf("GET /ui/ without a client certificate under --tls-client-ca = %d %q, want 401 CREDENTIALS_MISSING", status, body)
		}
		cert := e.clientCA.Issue(t, "hooks.billing").TLS
		if status, body, _ := get(t, e.httpClient(t, cred{cert: &cert}), e.httpURL+"/ui/", nil); status != 200 || body != "page /ui/" {
			t.Errorf("GET /ui/ with a client certificate = %d %q, want 200 from the page", status, body)
		}
	})
}
