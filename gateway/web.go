package gateway

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// The console's pages and scripts are written for deskgrid; web/novnc/ is the
// npm package @novnc/novnc, unpacked there by scripts/setup at build time and
// never committed. A build without it still compiles and serves the console;
// the live view says it is missing and /novnc/ answers 503 with how to fix it.
//
//go:embed web
var webFiles embed.FS

// A strict policy: the pages load only their own scripts and talk only to
// their own origin (the WebSocket included).
const contentSecurityPolicy = "default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; style-src 'self' 'unsafe-inline'; " +
	"script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

const noVNCMissing = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>deskgrid: live view unavailable</title></head>
<body><h1>noVNC assets missing: run scripts/setup</h1>
<p>This deskgrid binary was built without the noVNC viewer (npm package @novnc/novnc),
which scripts/setup unpacks into gateway/web/novnc/ before building. The REST API and
the VNC WebSocket at /v1/sessions/{id}/vnc work without it.</p></body></html>
`

type web struct {
	root     fs.FS
	hasNoVNC bool
}

func newWeb() *web {
	root, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic("gateway: embedded web directory: " + err.Error()) // fixed at compile time
	}
	_, err = fs.Stat(root, "novnc/core/rfb.js")
	return &web{root: root, hasNoVNC: err == nil}
}

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// page serves one of the HTML pages.
func (wb *web) page(w http.ResponseWriter, _ *http.Request, name string) {
	b, err := fs.ReadFile(wb.root, name)
	if err != nil {
		http.Error(w, "page missing from this build", http.StatusInternalServerError)
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// viewer is one session's page: its live view, runs and history.
func (wb *web) viewer(w http.ResponseWriter, r *http.Request) {
	wb.page(w, r, "session.html")
}

func (wb *web) missing(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(noVNCMissing))
}

// static serves the page's own scripts and styles.
func (wb *web) static() http.Handler {
	sub, _ := fs.Sub(wb.root, "static")
	return http.StripPrefix("/static/", files(sub))
}

// novnc serves the noVNC ES modules the viewer page imports.
func (wb *web) novnc() http.Handler {
	sub, _ := fs.Sub(wb.root, "novnc")
	h := http.StripPrefix("/novnc/", files(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !wb.hasNoVNC {
			wb.missing(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// files serves files but no directory listings.
func files(fsys fs.FS) http.Handler {
	fileServer := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 5, "message": "no such file"})
			return
		}
		securityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}
