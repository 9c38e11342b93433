package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// Opening a file or a URL on the default desktop image picks the desktop's
// own application for it and shows its window, on every surface: a text
// file opens in the text editor with the file's name in its title, a web
// page served inside the session and an HTML file in a web browser; the
// programs run inside the session. What cannot be opened is refused with
// the right status, and another tenant finds nothing to open in.
func TestOpenWithTheDefaultApplication(t *testing.T) {
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir(), "-auth")
	a := &authedUp{upProcess: p, admin: p.key}
	s0 := p.createWith(`{"display":{"width":1280,"height":800}}`)
	id := s0.ID
	if _, code := p.execIn(id, "sh", "-c", `printf 'opened by deskgrid\n' > notes.txt && mkdir -p site && `+
		`printf '<html><head><title>Opened page</title></head><body><h1>Opened page</h1></body></html>' > site/index.html && `+
		`head -c 4096 /dev/urandom > blob.bin`); code != 0 {
		t.Fatalf("writing the files: exit %d", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := p.sdkSession(ctx, t, id)

	// The desktop's panel is up: a window that appears from now on is
	// what the open showed.
	waitTitle(t, p, id, "tint2")

	// A text file: the text editor, its window titled with the file.
	o, err := s.Open(ctx, "notes.txt")
	if err != nil {
		t.Fatalf("open notes.txt: %v", err)
	}
	if o.Target != "/home/user/notes.txt" || o.ContentType != "text/plain" || o.Application.GetId() != "org.xfce.mousepad" || o.Process.GetProcessId() == "" {
		t.Errorf("opened %s (%s) with %v, process %v", o.Target, o.ContentType, o.Application, o.Process)
	}
	if o.Window == nil || !strings.Contains(o.Window.GetTitle(), "notes.txt") || o.Window.GetGeometry().GetWidth() <= 0 {
		t.Errorf("the editor's window: %v", o.Window)
	}
	if what, bad := hostProcessOnScreen(t, s0.XDisplay); bad {
		t.Fatalf("opening started a program outside the session: %s", what)
	}

	// A web page served inside the session (its own loopback): a browser.
	if _, code := p.execIn(id, "sh", "-c", `setsid -f python3 -m http.server 8765 --bind 127.0.0.1 --directory site >/dev/null 2>&1; `+
		`for i in $(seq 100); do curl -sf http://127.0.0.1:8765/ >/dev/null && exit 0; sleep 0.1; done; exit 1`); code != 0 {
		t.Fatalf("serving the page in the session: exit %d", code)
	}
	o, err = s.Open(ctx, "http://127.0.0.1:8765/")
	if err != nil {
		t.Fatalf("open the page: %v", err)
	}
	browser := o.Application.GetId()
	if o.ContentType != "x-scheme-handler/http" || (browser != "chromium" && browser != "firefox-esr") || o.Window == nil {
		t.Fatalf("opened the page as %s with %v, window %v", o.ContentType, o.Application, o.Window)
	}
	t.Logf("the session's browser: %s", browser)
	page := waitTitle(t, p, id, "Opened page")
	if what, bad := hostProcessOnScreen(t, s0.XDisplay); bad {
		t.Fatalf("opening started a program outside the session: %s", what)
	}
	// The browser goes (a second open would be a tab of the same window).
	if _, err := s.CloseWindow(ctx, page); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, code := p.execIn(id, "pgrep", "-x", map[string]string{"chromium": "chromium", "firefox-esr": "firefox-esr"}[browser]); code == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still runs after its window was closed", browser)
		}
		time.Sleep(200 * time.Millisecond) // polled: the browser ends as its last window closes
	}

	// An HTML file by file URL, through the CLI: the browser again.
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"apps", id, "open", "file:///home/user/site/index.html", "-addr", p.grpc, "-api-key", p.key}, &out, &errOut); err != nil {
		t.Fatalf("deskgrid apps open: %v %s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), browser+": window ") {
		t.Errorf("deskgrid apps open: %q", out.String())
	}
	waitTitle(t, p, id, "Opened page")

	// REST, and what cannot be opened.
	windowsBefore := len(p.windows(id))
	for _, c := range []struct {
		target string
		code   int
		says   string
	}{
		{"", http.StatusBadRequest, "target is required"},
		{"no-such-file.txt", http.StatusNotFound, "no file /home/user/no-such-file.txt"},
		{"file:///etc/no-such-file", http.StatusNotFound, "no file /etc/no-such-file"},
		{"mailto:someone@example.org", http.StatusBadRequest, `scheme "mailto"`},
		{"ftp://127.0.0.1/a.txt", http.StatusBadRequest, `scheme "ftp"`},
		{"javascript:alert(1)", http.StatusBadRequest, `scheme "javascript"`},
		{"file://elsewhere/etc/passwd", http.StatusBadRequest, "only the session's own files"},
		{"blob.bin", http.StatusBadRequest, "no application of session"},
	} {
		b, _ := json.Marshal(map[string]string{"target": c.target})
		code, body, _ := p.do("POST", "/v1/sessions/"+id+"/applications:open", string(b))
		var st struct{ Message string }
		_ = json.Unmarshal(body, &st)
		if code != c.code || !strings.Contains(st.Message, c.says) {
			t.Errorf("open %q: %d %s, want %d saying %q", c.target, code, body, c.code, c.says)
		}
	}
	if _, err := s.Open(ctx, "blob.bin"); !errors.Is(err, deskgrid.ErrFailedPrecondition) || !strings.Contains(err.Error(), "application/octet-stream") {
		t.Errorf("SDK open of a type nothing opens: %v", err)
	}
	if _, err := s.Open(ctx, "no-such-file.txt"); !errors.Is(err, deskgrid.ErrNotFound) {
		t.Errorf("SDK open of a missing file: %v", err)
	}
	if n := len(p.windows(id)); n != windowsBefore {
		t.Errorf("refused opens left %d windows, %d before", n, windowsBefore)
	}
	code, body, _ := p.do("POST", "/v1/sessions/"+id+"/applications:open", `{"target":"/home/user/notes.txt"}`)
	var resp struct {
		Application struct{ ID string }
		Target      string
		ContentType string `json:"contentType"`
	}
	if code != 200 || json.Unmarshal(body, &resp) != nil || resp.Application.ID != "org.xfce.mousepad" || resp.ContentType != "text/plain" {
		t.Errorf("REST open: %d %s", code, body)
	}

	// Another tenant finds no session to open in.
	a.cli("tenants", "create", "mallory")
	attacker := a.cli("keys", "create", "-tenant", "mallory", "-scopes", "read,write")
	if code, body := a.call(attacker, "POST", "/v1/sessions/"+id+"/applications:open", `{"target":"notes.txt"}`); code != http.StatusNotFound && code != http.StatusForbidden {
		t.Errorf("another tenant's open: %d %s", code, body)
	}
	reader := a.cli("keys", "create", "-scopes", "read", "-name", "reader")
	if code, body := a.call(reader, "POST", "/v1/sessions/"+id+"/applications:open", `{"target":"notes.txt"}`); code != http.StatusForbidden {
		t.Errorf("a read-only key's open: %d %s", code, body)
	}

	// A stopped session is refused as a launch in it is.
	if code, body, _ := p.do("DELETE", "/v1/sessions/"+id, ""); code != 200 {
		t.Fatalf("delete: %d %s", code, body)
	}
	launchCode, launchBody, _ := p.do("POST", "/v1/sessions/"+id+"/applications:launch", `{"application":"mousepad"}`)
	code, body, _ = p.do("POST", "/v1/sessions/"+id+"/applications:open", `{"target":"notes.txt"}`)
	if code < 400 || code >= 500 || code != launchCode {
		t.Errorf("open in a stopped session: %d %s; a launch: %d %s", code, body, launchCode, launchBody)
	}
}

// waitTitle waits for a window of the session whose title holds title and
// returns its id.
func waitTitle(t *testing.T, p *upProcess, id, title string) uint32 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var titles []string
		for _, w := range p.windows(id) {
			if strings.Contains(w.Title, title) {
				return w.ID
			}
			titles = append(titles, w.Title)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no window titled %q: %q", title, titles)
		}
		time.Sleep(250 * time.Millisecond) // polled: the program loads what it opened
	}
}
