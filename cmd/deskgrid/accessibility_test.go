package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// treeOver reads session id's accessibility tree over REST with a query,
// once its desktop's accessibility bus answers (it comes up with the
// desktop, in its own time).
func treeOver(t *testing.T, p *upProcess, id string) func(query string) (int, *sandboxv1.GetAccessibilityTreeResponse, string) {
	tree := func(query string) (int, *sandboxv1.GetAccessibilityTreeResponse, string) {
		t.Helper()
		code, body, _ := p.do("GET", "/v1/sessions/"+id+"/accessibility"+query, "")
		out := &sandboxv1.GetAccessibilityTreeResponse{}
		if code == 200 {
			if err := protojson.Unmarshal(body, out); err != nil {
				t.Fatalf("tree %s: %v", body, err)
			}
		}
		return code, out, string(body)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, _, body := tree("")
		if code == 200 {
			return tree
		}
		if time.Now().After(deadline) {
			t.Fatalf("no accessibility tree: %d %s\n%s", code, body, p.logs)
		}
		time.Sleep(500 * time.Millisecond) // polled: the bus comes up with the desktop
	}
}

// TestAccessibilityTreeOfADesktopSession reads the accessibility tree of a
// desktop-image session through REST, the Go SDK and the CLI: Chromium
// showing a page with a button is there, the button with its name, role,
// action and place on the screen; the tree is bounded and bad input is
// refused; then its nodes are acted on (actThroughTheTree).
func TestAccessibilityTreeOfADesktopSession(t *testing.T) {
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir())
	a := p.createWith(`{"display":{"width":1280,"height":800}}`)

	tree := treeOver(t, p, a.ID)

	page := "data:text/html," + url.PathEscape(actPage)
	if _, code := p.execIn(a.ID, "sh", "-c", `setsid -f chromium --user-data-dir=/tmp/a11y-profile --window-size=900,600 --window-position=50,40 '`+page+`' >/dev/null 2>&1`); code != 0 {
		t.Fatalf("start chromium: exit %d", code)
	}
	var button *sandboxv1.AccessibleNode
	var last string
	deadline := time.Now().Add(3 * time.Minute)
	for button == nil {
		code, tr, body := tree("?application=chrom&only_visible=true")
		if code != 200 {
			t.Fatalf("tree: %d %s", code, body)
		}
		if found := deskgrid.FindAccessible(tr, "push button", "Press me"); len(found) > 0 {
			button = found[0]
			break
		}
		var b strings.Builder
		_ = deskgrid.WriteAccessibilityTree(&b, tr)
		last = b.String()
		if time.Now().After(deadline) {
			t.Fatalf("no button named Press me in Chromium's tree:\n%s", last)
		}
		time.Sleep(time.Second) // polled: Chromium starts and loads the page
	}
	r := button.GetBounds()
	if r == nil || r.GetWidth() <= 0 || r.GetHeight() <= 0 || r.GetX() < 0 || r.GetY() < 0 || r.GetX()+r.GetWidth() > 1280 || r.GetY()+r.GetHeight() > 800 {
		t.Errorf("the button's bounds %v are not on the 1280x800 screen", r)
	}
	if !strings.Contains(strings.Join(button.GetActions(), " "), "press") && !strings.Contains(strings.Join(button.GetActions(), " "), "click") {
		t.Errorf("the button's actions: %v", button.GetActions())
	}
	if !strings.Contains(strings.Join(button.GetStates(), " "), "showing") {
		t.Errorf("the button's states: %v", button.GetStates())
	}

	// Bounded: one level gives the applications and their windows only.
	if code, tr, body := tree("?max_depth=1"); code != 200 || !tr.GetTruncated() {
		t.Errorf("max_depth=1: %d truncated=%v %s", code, tr.GetTruncated(), body)
	} else {
		for _, app := range tr.GetApplications() {
			for _, w := range app.GetChildren() {
				if len(w.GetChildren()) > 0 {
					t.Errorf("max_depth=1 read below the window %q", w.GetName())
				}
			}
		}
	}
	if code, tr, _ := tree("?max_nodes=3"); code != 200 || tr.GetNodeCount() > 3 || !tr.GetTruncated() {
		t.Errorf("max_nodes=3: %d, %d nodes, truncated=%v", code, tr.GetNodeCount(), tr.GetTruncated())
	}
	for _, q := range []string{"?max_depth=65", "?max_nodes=-1", "?max_nodes=20001"} {
		if code, _, body := tree(q); code != 400 || !strings.Contains(body, "max_") {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
	if code, body, _ := p.do("GET", "/v1/sessions/no-such-session/accessibility", ""); code != 404 {
		t.Errorf("unknown session: %d %s", code, body)
	}

	// The Go SDK.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := p.sdkSession(ctx, t, a.ID)
	st, err := s.AccessibilityTree(ctx, deskgrid.Application("chrom"), deskgrid.OnlyVisible())
	if err != nil {
		t.Fatal(err)
	}
	if len(deskgrid.FindAccessible(st, "push button", "press me")) != 1 {
		t.Errorf("the SDK's tree has no button")
	}

	// The CLI.
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"a11y", a.ID, "-addr", p.grpc, "-api-key", p.key, "-role", "push button", "-name", "Press me"}, &out, &errOut); err != nil {
		t.Fatalf("deskgrid a11y: %v %s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), `push button "Press me"`) || !strings.Contains(out.String(), "@") {
		t.Errorf("deskgrid a11y -role -name: %q", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"a11y", a.ID, "-addr", p.grpc, "-api-key", p.key, "-app", "chrom", "-o", "json"}, &out, &errOut); err != nil {
		t.Fatalf("deskgrid a11y -o json: %v %s", err, errOut.String())
	}
	var js struct {
		Applications []struct{ Role, Name string }
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil || len(js.Applications) != 1 || js.Applications[0].Role != "application" {
		t.Errorf("deskgrid a11y -o json: %v %.300s", err, out.String())
	}
	// A filter no application matches says which there are.
	out.Reset()
	errOut.Reset()
	if err := run(ctx, []string{"a11y", a.ID, "-addr", p.grpc, "-api-key", p.key, "-app", "no-such-app"}, &out, &errOut); err != nil || out.Len() != 0 ||
		!strings.Contains(errOut.String(), `no application's name contains "no-such-app"`) || !strings.Contains(strings.ToLower(errOut.String()), "chrom") {
		t.Errorf("deskgrid a11y -app no-such-app: %v, out %q, err %q", err, out.String(), errOut.String())
	}

	// Launching by name: the applications of the image, Mousepad (GTK 3)
	// started from its entry, its window returned and its widgets in the
	// tree.
	code, body, _ := p.do("GET", "/v1/sessions/"+a.ID+"/applications", "")
	if code != 200 || !strings.Contains(string(body), `"name":"Mousepad"`) && !strings.Contains(string(body), `"name": "Mousepad"`) {
		t.Fatalf("applications: %d %.500s", code, body)
	}
	l, err := s.Launch(ctx, "mousepad")
	if err != nil {
		t.Fatalf("launch mousepad: %v", err)
	}
	if l.Window == nil || !strings.Contains(l.Window.GetTitle(), "Mousepad") || l.Window.GetGeometry().GetWidth() <= 0 {
		t.Fatalf("launched %v, window %v", l.Application, l.Window)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		mt, err := s.AccessibilityTree(ctx, deskgrid.Application("mousepad"))
		if err != nil {
			t.Fatal(err)
		}
		if len(deskgrid.FindAccessible(mt, "frame", "Mousepad")) > 0 && len(deskgrid.FindAccessible(mt, "menu", "File")) > 0 {
			break
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			_ = deskgrid.WriteAccessibilityTree(&b, mt)
			t.Fatalf("Mousepad's tree has no frame and File menu:\n%s", b.String())
		}
		time.Sleep(500 * time.Millisecond) // polled: the window's widgets appear as it starts
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+a.ID+"/applications:launch", `{"application":"no such program"}`); code != 404 {
		t.Errorf("launching an unknown application: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+a.ID+"/applications:launch", `{"application":"lxterminal","args":["a.txt"]}`); code != 400 {
		t.Errorf("files for an application that takes none: %d %s", code, body)
	}
	out.Reset()
	if err := run(ctx, []string{"apps", a.ID, "-addr", p.grpc, "-api-key", p.key}, &out, &errOut); err != nil || !strings.Contains(out.String(), "Mousepad") {
		t.Errorf("deskgrid apps: %v %q", err, out.String())
	}

	// Acting through the tree, on this page and this Mousepad.
	actThroughTheTree(t, p, s, l)
}
