package main

import (
	"encoding/base64"
	"testing"
	"time"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// TestAccessibilityTreeOfFirefox: Firefox ESR in the default desktop image
// offers its page to the tree, as Chromium does: a local page's button
// with its name, action and bounds on the screen, and its field with its
// text.
func TestAccessibilityTreeOfFirefox(t *testing.T) {
	p := startUpOnDesktop(t, t.TempDir(), t.TempDir())
	s := p.createWith(`{"display":{"width":1280,"height":800}}`)
	tree := treeOver(t, p, s.ID)
	page := base64.StdEncoding.EncodeToString([]byte(`<!doctype html><title>Fox form</title><button>Press me</button> <input aria-label="Email" value="fox@example.org">`))
	if out, code := p.execIn(s.ID, "sh", "-c", "echo "+page+" | base64 -d > /tmp/fox.html && setsid -f firefox-esr --new-instance --profile /tmp/fox-profile file:///tmp/fox.html >/dev/null 2>&1; mkdir -p /tmp/fox-profile"); code != 0 {
		t.Fatalf("start Firefox: %q (exit %d)", out, code)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, tr, body := tree("?application=firefox&only_visible=true")
		if code != 200 {
			t.Fatalf("Firefox's tree: %d %s", code, body)
		}
		if b := deskgrid.FindAccessible(tr, "push button", "Press me"); len(b) > 0 && (b[0].GetBounds().GetWidth() > 0 || time.Now().After(deadline)) {
			bt := b[0]
			if bt.GetBounds().GetWidth() <= 0 || bt.GetBounds().GetX() < 0 || bt.GetBounds().GetX() >= 1280 || len(bt.GetActions()) == 0 {
				t.Errorf("Firefox's button: %v", bt)
			}
			found := false
			for _, n := range deskgrid.FindAccessible(tr, "entry", "Email") {
				found = found || n.GetText() == "fox@example.org"
			}
			if !found {
				t.Errorf("no Email entry holding its text in Firefox's tree:\n%s", dumpTree(tr))
			}
			t.Logf("Firefox's visible tree: %d nodes", tr.GetNodeCount())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no button in Firefox's tree:\n%s", dumpTree(tr))
		}
		time.Sleep(time.Second) // polled: Firefox starts and loads the page
	}
}
