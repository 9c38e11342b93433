package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
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

	// A build without the noVNC files still serves the list and says what to do.
	h.gw.web.hasNoVNC = false
	for _, p := range []string{"/sessions/s-1", "/novnc/core/rfb.js"} {
		resp, body := get(t, h.srv.URL+p, "")
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "noVNC assets missing: run scripts/setup") {
			t.Errorf("GET %s without noVNC: %d %.80q", p, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, h.srv.URL+"/", ""); resp.StatusCode != 200 {
		t.Errorf("list page without noVNC: %d", resp.StatusCode)
	}
}

// newBrowser starts a headless Chromium for one test and returns a context
// whose actions are bounded by a deadline (the browser itself is not).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath("/usr/bin/chromium"),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1024, 768),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (Debian package chromium): %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The viewer page connects through the gateway's WebSocket and noVNC paints
// the colour the desktop's framebuffer holds.
func TestViewerPageShowsTheDesktop(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	requireNoVNC(t, h)
	ctx := newBrowser(t)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(h.srv.URL+"/sessions/s-1"),
		chromedp.WaitVisible(chromedp.CSS(`#state[data-state="connected"]`)),
	); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#state")))
		t.Fatalf("viewer did not connect (state %q): %v", state, err)
	}
	// Sample the middle of noVNC's canvas until the update has been drawn.
	const probe = `(() => {
		const c = document.querySelector('#screen canvas');
		if (!c || !c.width) return [];
		const d = c.getContext('2d').getImageData(c.width >> 1, c.height >> 1, 1, 1).data;
		return [d[0], d[1], d[2], c.width, c.height];
	})()`
	fb := h.display.fb
	want := []int{int(fb.R), int(fb.G), int(fb.B), fb.Width, fb.Height}
	var got []int
	waitFor(t, "the canvas to show the desktop's colour", func() bool {
		var err error
		if got, err = chromedp.Run(ctx, chromedp.Evaluate[[]int](probe)); err != nil {
			t.Fatal(err)
		}
		return equalInts(got, want)
	})
	if h.display.lastFirst().GetViewOnly() {
		t.Fatal("the page asked for view-only without being told to")
	}

	// Ticking "view only" reconnects as a watcher.
	n := len(h.display.firstSig)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#view-only"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the page to reconnect view-only", func() bool { return len(h.display.firstSig) > n })
	if !h.display.lastFirst().GetViewOnly() {
		t.Fatal("the reconnection was not view-only")
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#state[data-state="connected"]`))); err != nil {
		t.Fatal(err)
	}

	// When the desktop is deleted the page says so.
	h.display.deleteDisplay("s-1")
	if _, err := h.sessions.DeleteSession(context.Background(), &sessionv1.DeleteSessionRequest{SessionId: "s-1"}); err != nil {
		t.Fatal(err)
	}
	var state string
	waitFor(t, "the page to show the disconnection", func() bool {
		var err error
		if state, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#state"))); err != nil {
			t.Fatal(err)
		}
		return strings.HasPrefix(state, "disconnected")
	})
	if !strings.Contains(state, "session s-1 not found") {
		t.Fatalf("the page says %q, not why", state)
	}
}

// The list page reads the sessions, creates one and deletes one.
func TestListPageCreatesAndDeletes(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	ctx := newBrowser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(h.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-session-id="s-1"]`)),
	); err != nil {
		t.Fatal(err)
	}
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`tr[data-session-id="s-1"] a`), "href"))
	if err != nil || href.Value != "/sessions/s-1" {
		t.Fatalf("link %+v: %v", href, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#create")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-session-id="s-2"]`)),
	); err != nil {
		t.Fatal(err)
	}
	if !h.sessions.has("s-2") {
		t.Fatal("the page did not create a session")
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-session-id="s-2"] button.delete`)),
		chromedp.WaitNotPresent(chromedp.CSS(`tr[data-session-id="s-2"]`)),
	); err != nil {
		t.Fatal(err)
	}
	if h.sessions.has("s-2") || !h.sessions.has("s-1") {
		t.Fatal("the wrong session was deleted")
	}
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#status")))
	if err != nil || status != "Deleted s-2" {
		t.Fatalf("status %q: %v", status, err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
