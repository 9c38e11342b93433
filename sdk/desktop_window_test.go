package deskgrid

import (
	"testing"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// A launched program's window is told from the desktop's own by its
// process or its class, not by coming first.
func TestOfApplication(t *testing.T) {
	mousepad := &sandboxv1.Application{Id: "org.xfce.mousepad.desktop", Exec: "mousepad %U"}
	calc := &sandboxv1.Application{Id: "libreoffice-calc.desktop", Exec: "libreoffice --calc %U"}
	chromium := &sandboxv1.Application{Id: "chromium.desktop", Exec: "/usr/bin/chromium %U"}
	p := &sandboxv1.Process{Pid: 4242}
	for _, c := range []struct {
		name string
		w    *displayv1.Window
		app  *sandboxv1.Application
		want bool
	}{
		{"the panel", &displayv1.Window{Title: "tint2", Class: "Tint2", Instance: "tint2", Pid: 17}, mousepad, false},
		{"Mousepad by class", &displayv1.Window{Title: "pasted.txt - Mousepad", Class: "Mousepad", Instance: "mousepad", Pid: 99}, mousepad, true},
		{"by process", &displayv1.Window{Title: "x", Class: "Other", Pid: 4242}, mousepad, true},
		{"Calc by class", &displayv1.Window{Title: "Untitled 1 - LibreOffice Calc", Class: "libreoffice-calc", Instance: "libreoffice"}, calc, true},
		{"Chromium by its program", &displayv1.Window{Title: "New Tab - Chromium", Class: "Chromium", Instance: "chromium"}, chromium, true},
		{"a terminal for Chromium", &displayv1.Window{Title: "user@desk", Class: "Lxterminal", Instance: "lxterminal"}, chromium, false},
		{"no class", &displayv1.Window{Title: "x"}, chromium, false},
	} {
		if got := ofApplication(c.w, c.app, p); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A URL or file handed to the application's running instance (a new tab)
// is shown in that instance's window: the focused one, else its first,
// never another program's.
func TestHandedWindow(t *testing.T) {
	chromium := &sandboxv1.Application{Id: "chromium.desktop", Exec: "/usr/bin/chromium %U"}
	panel := &displayv1.Window{Id: 1, Title: "tint2", Class: "Tint2", Instance: "tint2"}
	term := &displayv1.Window{Id: 2, Title: "user@sandbox: ~", Class: "Lxterminal", Instance: "lxterminal", Focused: true}
	first := &displayv1.Window{Id: 3, Title: "New Tab - Chromium", Class: "Chromium", Instance: "chromium"}
	focused := &displayv1.Window{Id: 4, Title: "example.com - Chromium", Class: "Chromium", Instance: "chromium", Focused: true}
	untitled := &displayv1.Window{Id: 5, Class: "Chromium", Instance: "chromium", Focused: true}
	for _, c := range []struct {
		name string
		ws   []*displayv1.Window
		want uint32
	}{
		{"the focused one", []*displayv1.Window{panel, first, untitled, focused}, 4},
		{"the first when none is focused", []*displayv1.Window{panel, term, first}, 3},
		{"none of the application", []*displayv1.Window{panel, term, untitled}, 0},
	} {
		if got := handedWindow(c.ws, chromium); got.GetId() != c.want {
			t.Errorf("%s: window %d, want %d", c.name, got.GetId(), c.want)
		}
	}
}
