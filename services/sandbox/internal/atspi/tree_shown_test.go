package atspi

import "testing"

// shown keeps what toolkits say shows: GTK 3, Chromium and LibreOffice set
// "showing" on every node on the screen; GTK 4 (4.8, Debian 12) sets it on
// its windows only, its widgets being "visible" with bounds in the window.
func TestShownTakesGTK4sStates(t *testing.T) {
	window := &Node{Role: "window", States: []string{"active", "sensitive", "showing", "visible"}, Bounds: &Rect{0, 0, 168, 68}}
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
		if got := shown(c.node, window); got != c.want {
			t.Errorf("%s: shown %v, want %v", c.name, got, c.want)
		}
	}
}
