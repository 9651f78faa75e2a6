// Package ui serves the on-call page at /ui/: static HTML, CSS and
// JavaScript embedded in the binary, with no external assets and nothing
// fetched at run time but claimd's own API.
//
// It serves files only. Every datum the page shows is fetched by the
// browser from claimd's HTTP/JSON API with the caller's own credentials (a
// bearer token the page asks for and keeps in sessionStorage, or the
// browser's client certificate), so the API's authentication, roles,
// namespaces and rate limits apply to each one unchanged. The files are
// the same bytes for every caller and name nothing of any deployment: the
// handler never reads the query string (the page's own script does), a
// body, or a credential. A browser's navigation cannot send a bearer
// token, so the files themselves need none; the gateway's front door still
// holds them to its Host and Origin rules, and to the client certificate
// when the API requires one (gateway.Config.Pages).
package ui

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
)

// Prefix is the path the page is served under (DESIGN.md §9).
const Prefix = "/ui/"

// ContentSecurityPolicy lets the page run only its own script and style,
// talk only to its own origin, and be framed by nobody. No inline script or
// style: the page builds its DOM from text nodes, so a hostile key or event
// type in the API's answers is shown, never run.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// file is one embedded file with its content type.
type file struct {
	body  []byte
	ctype string
}

// handler serves the embedded files.
type handler struct {
	files map[string]file
}

// Handler returns the handler of every path under Prefix (and of Prefix
// without its slash, which it redirects). It answers GET and HEAD only.
func Handler() http.Handler {
	h := &handler{files: map[string]file{}}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ctype := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) { // not left to the host's mime.types
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".html":
			ctype = "text/html; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		h.files[strings.TrimPrefix(p, "static/")] = file{body: b, ctype: ctype}
		return nil
	})
	if err != nil {
		panic("ui: reading the embedded files: " + err.Error()) // the build embedded them; only a broken binary gets here
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", ContentSecurityPolicy)
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer") // the page's URL names a namespace and key
	hdr.Set("Cross-Origin-Opener-Policy", "same-origin")
	hdr.Set("Cross-Origin-Resource-Policy", "same-origin")
	hdr.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "the on-call page answers GET and HEAD only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
		target := Prefix
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if name == "" {
		name = "index.html"
	}
	f, found := h.files[name]
	if !ok || !found {
		http.Error(w, "no such file of the on-call page", http.StatusNotFound)
		return
	}
	hdr.Set("Content-Type", f.ctype)
	hdr.Set("Content-Length", strconv.Itoa(len(f.body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(f.body)
}
