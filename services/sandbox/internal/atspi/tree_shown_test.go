package atspi

import "testing"

// shown keeps what toolkits say shows: GTK 3, Chromium and LibreOffice set
// "showing" on every node on the screen; GTK 4 (4.8, Debian 12) sets it on
// its windows only, its widgets being "visible" with bounds in the window.
func TestShownTakesGTK4sStates(t *testing.T) {
	window := &Rect{0, 0, 168, 68}
	for _, c := range []struct {
		name string
		node *Node
		want bool
	}{
		{"showing and visible", &Node{States: []string{"showing", "visible"}, Bounds: &Rect{0, 0, 10, 10}}, true},
		{"showing and visible, no bounds", &Node{States: []string{"showing", "visible"}}, true},
		{"GTK 4's group", &Node{Role: "group", States: []string{"sensitive", "vertical", "visible"}, Bounds: &Rect{0, 0, 168, 68}}, true},
		{"GTK 4's button", &Node{Role: "button", States: []string{"focusable", "focused", "sensitive", "visible"}, Bounds: &Rect{17, 5, 134, 24}}, true},
		{"visible, outside its parent", &Node{States: []string{"visible"}, Bounds: &Rect{400, 400, 20, 20}}, false},
		{"visible, empty", &Node{States: []string{"visible"}, Bounds: &Rect{10, 10, 0, 0}}, false},
		{"visible, no bounds", &Node{States: []string{"visible"}}, false},
		{"showing, not visible", &Node{States: []string{"showing"}, Bounds: &Rect{0, 0, 10, 10}}, false},
		{"neither", &Node{States: []string{"enabled"}, Bounds: &Rect{0, 0, 10, 10}}, false},
	} {
		if got, _ := shown(c.node, window); got != c.want {
			t.Errorf("%s: shown %v, want %v", c.name, got, c.want)
		}
	}
}

// Chromium's nodes scrolled out of the page's view are visible, not
// showing: a section reaching into the view is kept, cut to the view, and
// its paragraphs below the view are not.
func TestShownLeavesOutWhatIsScrolledAway(t *testing.T) {
	view := &Rect{0, 80, 1280, 720}
	section := &Node{Role: "section", States: []string{"enabled", "visible"}, Bounds: &Rect{16, 600, 1000, 900}}
	ok, clip := shown(section, view)
	if !ok || clip == nil || *clip != (Rect{16, 600, 1000, 200}) {
		t.Fatalf("the section reaching into the view: %v %+v", ok, clip)
	}
	in := &Node{Role: "paragraph", States: []string{"visible"}, Bounds: &Rect{16, 620, 900, 40}}
	out := &Node{Role: "paragraph", States: []string{"visible"}, Bounds: &Rect{16, 1300, 900, 40}}
	if ok, _ := shown(in, clip); !ok {
		t.Error("a paragraph in the view is left out")
	}
	if ok, _ := shown(out, clip); ok {
		t.Error("a paragraph below the view is kept")
	}
	popup := &Node{Role: "menu", States: []string{"showing", "visible"}, Bounds: &Rect{1300, 10, 100, 200}}
	if ok, c := shown(popup, view); !ok || c == nil || *c != *popup.Bounds {
		t.Errorf("a popup beside the window: %v %+v", ok, c)
	}
}
