package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// TestAccessibilityScopesAndExport reads parts of a desktop-image
// session's tree: Mousepad's window by its X id, the focused window and
// Mousepad's process, through REST, the Go SDK and the CLI; then the
// window as OSWorld's XML ({"AT": xml}, namespaces and attributes as
// OSWorld writes them). Bad scopes are refused with the right status: an
// unknown window 404, a process that has exited 404, two scopes 400.
func TestAccessibilityScopesAndExport(t *testing.T) {
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir())
	a := p.createWith(`{"display":{"width":1280,"height":800}}`)
	get := treeOver(t, p, a.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := p.sdkSession(ctx, t, a.ID)
	l, err := s.Launch(ctx, "mousepad")
	if err != nil {
		t.Fatalf("launch mousepad: %v", err)
	}
	win := l.Window
	if win.GetPid() == 0 {
		t.Fatalf("Mousepad's window reports no pid: %v", win)
	}

	// By window id: Mousepad's frame at the top, its menu below.
	var tree *sandboxv1.GetAccessibilityTreeResponse
	deadline := time.Now().Add(time.Minute)
	for {
		code, tr, body := get(fmt.Sprintf("?window_id=%d", win.GetId()))
		if code == http.StatusOK && len(deskgrid.FindAccessible(tr, "menu", "File")) > 0 {
			tree = tr
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Mousepad's window %d: %d %.2000s", win.GetId(), code, body)
		}
		time.Sleep(500 * time.Millisecond) // polled: the window registers its widgets as it starts
	}
	if apps := tree.GetApplications(); len(apps) != 1 || apps[0].GetRole() != "frame" || !strings.Contains(apps[0].GetName(), "Mousepad") {
		t.Errorf("the window's tree does not start at its frame:\n%s", dumpTree(tree))
	}

	// The focused window, once Mousepad's is activated.
	if _, err := s.ActivateWindow(ctx, win.GetId()); err != nil {
		t.Fatal(err)
	}
	ft, err := s.AccessibilityTree(ctx, deskgrid.OfFocusedWindow(), deskgrid.MaxDepth(1))
	if err != nil {
		t.Fatalf("the focused window's tree: %v", err)
	}
	if apps := ft.GetApplications(); len(apps) != 1 || apps[0].GetId() != tree.GetApplications()[0].GetId() {
		t.Errorf("the focused window's tree is not Mousepad's frame:\n%s", dumpTree(ft))
	}

	// By process: Mousepad's application alone.
	pt, err := s.AccessibilityTree(ctx, deskgrid.OfProcess(win.GetPid()), deskgrid.MaxDepth(1))
	if err != nil {
		t.Fatalf("the tree of process %d: %v", win.GetPid(), err)
	}
	if apps := pt.GetApplications(); len(apps) != 1 || apps[0].GetRole() != "application" || !strings.Contains(strings.ToLower(apps[0].GetName()), "mousepad") {
		t.Errorf("process %d's tree:\n%s", win.GetPid(), dumpTree(pt))
	}

	// OSWorld's XML, over REST as OSWorld's server gives it, and from the CLI.
	code, body, _ := p.do("GET", fmt.Sprintf("/v1/sessions/%s/accessibility?window_id=%d&format=ACCESSIBILITY_FORMAT_OSWORLD_XML", a.ID, win.GetId()), "")
	var at struct {
		AT string `json:"AT"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &at) != nil || !strings.HasPrefix(at.AT, "<desktop-frame ") {
		t.Fatalf("the window as OSWorld's XML: %d %.500s", code, body)
	}
	const st, cp = "https://accessibility.ubuntu.example.org/ns/state", "https://accessibility.ubuntu.example.org/ns/component"
	var frame, menu bool
	d := xml.NewDecoder(strings.NewReader(at.AT))
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attrs := map[string]string{}
		for _, at := range se.Attr {
			attrs[at.Name.Space+" "+at.Name.Local] = at.Value
		}
		if se.Name.Local == "frame" && strings.Contains(attrs[" name"], "Mousepad") && attrs[st+" showing"] == "true" && strings.HasPrefix(attrs[cp+" screencoord"], "(") {
			frame = true
		}
		if se.Name.Local == "menu" && attrs[" name"] == "File" {
			menu = true
		}
	}
	if !frame || !menu {
		t.Errorf("OSWorld's XML lacks the frame (%v) or the File menu (%v): %.3000s", frame, menu, at.AT)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"a11y", a.ID, "tree", "-format", "osworld", "-window", fmt.Sprint(win.GetId()), "-addr", p.grpc, "-api-key", p.key}, &out, &errOut); err != nil {
		t.Fatalf("deskgrid a11y tree -format osworld: %v %s", err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), `<desktop-frame xmlns:st="`+st+`"`) || !strings.Contains(out.String(), "<menu ") {
		t.Errorf("deskgrid a11y tree -format osworld: %.500s", out.String())
	}
	if x, err := s.AccessibilityXML(ctx, deskgrid.OfProcess(win.GetPid())); err != nil || !strings.Contains(x, "<application ") {
		t.Errorf("the SDK's XML of Mousepad's process: %v %.300s", err, x)
	}

	// Bad scopes.
	for q, want := range map[string]int{
		"?window_id=12345": http.StatusNotFound,
		"?pid=999999":      http.StatusNotFound,
		"?pid=1&root=:1.5:/org/a11y/atspi/accessible/1": http.StatusBadRequest,
		"?focused_window=true&window_id=1":              http.StatusBadRequest,
		"?format=ACCESSIBILITY_FORMAT_NO_SUCH":          http.StatusBadRequest,
	} {
		if code, _, body := get(q); code != want {
			t.Errorf("%s: %d %s, want %d", q, code, body, want)
		}
	}
	// A process that has exited: Mousepad, killed.
	if out, code := p.execIn(a.ID, "kill", "-9", fmt.Sprint(win.GetPid())); code != 0 {
		t.Fatalf("kill Mousepad: exit %d %s", code, out)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		_, err := s.AccessibilityTree(ctx, deskgrid.OfProcess(win.GetPid()))
		if errors.Is(err, deskgrid.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tree of Mousepad's process once it exited: %v", err)
		}
		time.Sleep(500 * time.Millisecond) // polled: the program ends in its own time
	}
	if _, err := s.AccessibilityTree(ctx, deskgrid.OfWindow(win.GetId())); !errors.Is(err, deskgrid.ErrNotFound) {
		t.Errorf("the tree of Mousepad's closed window: %v", err)
	}
}
