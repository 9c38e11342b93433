package gateway

import (
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"
)

func requireNoVNC(t *testing.T, h *harness) {
	t.Helper()
	if !h.gw.web.hasNoVNC {
		t.Fatal("noVNC assets missing: run scripts/setup (it unpacks @novnc/novnc into gateway/web/novnc/)")
	}
}

func get(t *testing.T, url, accept string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestPagesAndIndex(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	requireNoVNC(t, h)
	tests := []struct {
		path, accept string
		want         int
		contentType  string
		contains     string
	}{
		{"/", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", 200, "text/html", "/static/index.js"},
		{"/", "", 200, "text/html", "New session"},
		{"/", "application/json", 200, "application/json", `"api":"/v1/sessions"`},
		{"/v1", "", 200, "application/json", `"vnc":"/v1/sessions/{session_id}/vnc"`},
		{"/v1/", "", 200, "application/json", `"openapi":"/openapi.json"`},
		{"/sessions/s-1", "", 200, "text/html", "/static/session.js"},
		{"/static/session.js", "", 200, "text/javascript", "/novnc/core/rfb.js"},
		{"/static/api.js", "", 200, "text/javascript", "export async function api"},
		{"/static/style.css", "", 200, "text/css", "#screen"},
		{"/novnc/core/rfb.js", "", 200, "text/javascript", "export default class RFB"},
		{"/static/", "", 404, "application/json", "no such file"},
		{"/novnc/core/", "", 404, "application/json", "no such file"},
		{"/static/nothing.js", "", 404, "text/plain", ""},
	}
	for _, tt := range tests {
		resp, body := get(t, h.srv.URL+tt.path, tt.accept)
		if resp.StatusCode != tt.want || !strings.HasPrefix(resp.Header.Get("Content-Type"), tt.contentType) || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s (Accept %q): %d %q, body %.120q; want %d %s containing %q",
				tt.path, tt.accept, resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.want, tt.contentType, tt.contains)
		}
	}
	resp, _ := get(t, h.srv.URL+"/", "")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("page CSP %q", csp)
	}

	// A build without the noVNC files still serves the console (its live view
	// says what is missing) and says what to do.
	h.gw.web.hasNoVNC = false
	resp, body := get(t, h.srv.URL+"/novnc/core/rfb.js", "")
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "noVNC assets missing: run scripts/setup") {
		t.Errorf("noVNC module without noVNC: %d %.80q", resp.StatusCode, body)
	}
	for _, p := range []string{"/", "/sessions/s-1"} {
		if resp, _ := get(t, h.srv.URL+p, ""); resp.StatusCode != 200 {
			t.Errorf("GET %s without noVNC: %d", p, resp.StatusCode)
		}
	}
}

// TestConsoleCannotBeFramedOrScripted: every page and script of the console
// (the session viewer included) forbids being framed by any origin, so
// another site cannot overlay it to steer clicks on a desktop, and runs only
// its own scripts, so a name, label, window title or history entry a tenant
// or agent wrote cannot run as script in it.
func TestConsoleCannotBeFramedOrScripted(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	for _, p := range []string{"/", "/sessions/s-1", "/sessions/%3Cscript%3E", "/docs", "/static/session.js"} {
		resp, _ := get(t, h.srv.URL+p, "")
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self';") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: CSP %q, nosniff %q", p, csp, resp.Header.Get("X-Content-Type-Options"))
		}
	}
	// And the console's own scripts put what the API returns into the page
	// as text, never as markup.
	scripts, err := fs.Glob(webFiles, "web/static/*.js")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("console scripts: %v %v", scripts, err)
	}
	for _, name := range scripts {
		b, _ := fs.ReadFile(webFiles, name)
		for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(string(b), sink) {
				t.Errorf("%s uses %s: build the page with el() and textContent", name, sink)
			}
		}
	}
}
