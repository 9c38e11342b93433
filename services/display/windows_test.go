package display

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func atom(tb testing.TB, c *xgb.Conn, name string) xproto.Atom {
	tb.Helper()
	r, err := xproto.InternAtom(c, false, uint16(len(name)), name).Reply()
	if err != nil {
		tb.Fatal(err)
	}
	return r.Atom
}

// appWindow is a top-level window as an application makes one: not
// override-redirect, with ICCCM/EWMH properties, and a size hint asking
// the window manager to keep its position.
type appWindow struct {
	title, netTitle string // WM_NAME (Latin-1 STRING), _NET_WM_NAME (UTF-8)
	instance, class string
	x, y, w, h      int
	parent          xproto.Window // 0: the root
	wmState         bool          // set WM_STATE as a window manager would
	noMap           bool
}

func (a appWindow) create(tb testing.TB, c *xgb.Conn) xproto.Window {
	tb.Helper()
	screen := xproto.Setup(c).DefaultScreen(c)
	parent := a.parent
	if parent == 0 {
		parent = screen.Root
	}
	wid, err := xproto.NewWindowId(c)
	if err != nil {
		tb.Fatal(err)
	}
	if err := xproto.CreateWindowChecked(c, screen.RootDepth, wid, parent,
		int16(a.x), int16(a.y), uint16(a.w), uint16(a.h), 0,
		xproto.WindowClassInputOutput, screen.RootVisual,
		xproto.CwBackPixel, []uint32{0x3060a0}).Check(); err != nil {
		tb.Fatal(err)
	}
	set := func(prop, typ xproto.Atom, format byte, data []byte) {
		tb.Helper()
		n := uint32(len(data)) / uint32(format/8)
		if err := xproto.ChangePropertyChecked(c, xproto.PropModeReplace, wid, prop, typ, format, n, data).Check(); err != nil {
			tb.Fatal(err)
		}
	}
	if a.title != "" {
		set(xproto.AtomWmName, xproto.AtomString, 8, latin1Bytes(a.title))
	}
	if a.netTitle != "" {
		set(atom(tb, c, "_NET_WM_NAME"), atom(tb, c, "UTF8_STRING"), 8, []byte(a.netTitle))
	}
	if a.class != "" {
		set(xproto.AtomWmClass, xproto.AtomString, 8, []byte(a.instance+"\x00"+a.class+"\x00"))
	}
	// WM_NORMAL_HINTS with USPosition|USSize: place it where it asks.
	hints := make([]byte, 18*4)
	xgb.Put32(hints, 1|2)
	set(xproto.AtomWmNormalHints, xproto.AtomWmSizeHints, 32, hints)
	if a.wmState {
		st := atom(tb, c, "WM_STATE")
		data := make([]byte, 8)
		xgb.Put32(data, 1) // NormalState
		set(st, st, 32, data)
	}
	if !a.noMap {
		if err := xproto.MapWindowChecked(c, wid).Check(); err != nil {
			tb.Fatal(err)
		}
	}
	return wid
}

func latin1Bytes(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r))
	}
	return b
}

func getWindows(tb testing.TB, c displayv1.DisplayServiceClient, id string) []*displayv1.Window {
	tb.Helper()
	resp, err := c.GetDisplay(ctxT(tb), &displayv1.GetDisplayRequest{SessionId: id})
	if err != nil {
		tb.Fatalf("get display: %v", err)
	}
	return resp.GetDisplay().GetWindows()
}

// describeWindows is a stable text form of a window list for comparing.
func describeWindows(ws []*displayv1.Window, names map[uint32]string) string {
	var lines []string
	for _, w := range ws {
		name := names[w.GetId()]
		if name == "" {
			name = fmt.Sprintf("%#x", w.GetId())
		}
		g := w.GetGeometry()
		lines = append(lines, fmt.Sprintf("%s %q class=%q instance=%q %dx%d+%d+%d mapped=%v focused=%v",
			name, w.GetTitle(), w.GetClass(), w.GetInstance(), g.GetWidth(), g.GetHeight(), g.GetX(), g.GetY(), w.GetMapped(), w.GetFocused()))
	}
	return strings.Join(lines, "\n")
}

// rootGeometry is where a window's client area is on the root, as the
// window's own program computes it.
func rootGeometry(tb testing.TB, c *xgb.Conn, w xproto.Window) (x, y, width, height int) {
	tb.Helper()
	root := xproto.Setup(c).DefaultScreen(c).Root
	g, err := xproto.GetGeometry(c, xproto.Drawable(w)).Reply()
	if err != nil {
		tb.Fatal(err)
	}
	t, err := xproto.TranslateCoordinates(c, w, root, 0, 0).Reply()
	if err != nil {
		tb.Fatal(err)
	}
	return int(t.DstX), int(t.DstY), int(g.Width), int(g.Height)
}

func TestGetDisplayListsWindows(t *testing.T) {
	openbox, err := exec.LookPath("openbox")
	if err != nil {
		t.Fatalf("openbox not installed (Debian package openbox): %v", err)
	}
	const nonASCII = "Résumé — 日本語 ✓"
	for _, tc := range []struct {
		name string
		wm   []string
	}{
		{"bare X", nil},
		{"openbox", []string{openbox}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, c := testService(t, "")
			id := strings.ReplaceAll(strings.ToLower(tc.name), " ", "-")
			createDisplay(t, c, id, 800, 600)
			if tc.wm != nil {
				startClient(t, s, id, tc.wm)
			}
			xc := clientConn(t, s, id)
			root := xproto.Setup(xc).DefaultScreen(xc).Root
			if tc.wm != nil {
				waitWindowManager(t, xc)
			}
			if ws := getWindows(t, c, id); len(ws) != 0 {
				t.Fatalf("empty desktop lists windows:\n%s", describeWindows(ws, nil))
			}

			term := appWindow{title: "Terminal", instance: "xterm", class: "XTerm", x: 10, y: 20, w: 200, h: 100}.create(t, xc)
			// The UTF-8 title wins over the Latin-1 WM_NAME.
			doc := appWindow{title: "Resume", netTitle: nonASCII, instance: "doc", class: "Editor", x: 300, y: 200, w: 150, h: 120}.create(t, xc)
			// Unmapped windows are not open on the desktop.
			appWindow{title: "hidden", x: 0, y: 0, w: 50, h: 50, noMap: true}.create(t, xc)
			names := map[uint32]string{uint32(term): "term", uint32(doc): "doc"}

			geom := func(w xproto.Window) string {
				x, y, gw, gh := rootGeometry(t, xc, w)
				return fmt.Sprintf("%dx%d+%d+%d", gw, gh, x, y)
			}
			want := func(focus xproto.Window, docMapped bool) string {
				return strings.Join([]string{
					fmt.Sprintf(`term "Terminal" class="XTerm" instance="xterm" %s mapped=true focused=%v`, geom(term), focus == term),
					fmt.Sprintf(`doc %q class="Editor" instance="doc" %s mapped=%v focused=%v`, nonASCII, geom(doc), docMapped, focus == doc),
				}, "\n")
			}
			wait := func(what string, focus xproto.Window, docMapped bool) {
				t.Helper()
				var got, exp string
				deadline := time.Now().Add(10 * time.Second)
				for {
					got, exp = describeWindows(getWindows(t, c, id), names), want(focus, docMapped)
					if got == exp {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: windows\n%s\nwant\n%s", what, got, exp)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			focus := func(w xproto.Window) {
				t.Helper()
				if err := xproto.SetInputFocusChecked(xc, xproto.InputFocusParent, w, xproto.TimeCurrentTime).Check(); err != nil {
					t.Fatal(err)
				}
			}
			// Mapped (and, with openbox, managed) windows are listed before
			// the focus is moved, so the window manager's own focusing of
			// new windows has happened.
			testkit.Eventually(t, 10*time.Second, func() bool {
				ws := getWindows(t, c, id)
				return len(ws) == 2
			}, "both windows listed")
			focus(term)
			wait("terminal focused", term, true)
			focus(doc)
			wait("document focused", doc, true)
			if tc.wm == nil {
				// Without a window manager the windows stay where they asked.
				if g := geom(term); g != "200x100+10+20" {
					t.Errorf("terminal at %s, want 200x100+10+20", g)
				}
				return
			}
			// openbox frames them, and the geometry listed (checked above)
			// is the client area's on the root, not the frame's.
			if tree, err := xproto.QueryTree(xc, term).Reply(); err != nil || tree.Parent == root {
				t.Errorf("openbox did not reparent the terminal (%v, %v)", tree, err)
			}
			// Iconified: still open, no longer shown.
			change := atom(t, xc, "WM_CHANGE_STATE")
			ev := xproto.ClientMessageEvent{Format: 32, Window: doc, Type: change,
				Data: xproto.ClientMessageDataUnionData32New([]uint32{3, 0, 0, 0, 0})}
			if err := xproto.SendEventChecked(xc, false, root,
				xproto.EventMaskSubstructureRedirect|xproto.EventMaskSubstructureNotify, string(ev.Bytes())).Check(); err != nil {
				t.Fatal(err)
			}
			focus(term)
			wait("document iconified", term, false)
		})
	}
}

// waitWindowManager returns once a window manager manages new windows.
// openbox announces itself (_NET_SUPPORTING_WM_CHECK) before it does, and
// a window mapped in between stays unmanaged, so a probe window is mapped
// until one shows up in _NET_CLIENT_LIST.
func waitWindowManager(t *testing.T, xc *xgb.Conn) {
	t.Helper()
	root := xproto.Setup(xc).DefaultScreen(xc).Root
	list := atom(t, xc, "_NET_CLIENT_LIST")
	clients := func() []uint32 {
		p, err := xproto.GetProperty(xc, false, root, list, xproto.AtomWindow, 0, 1024).Reply()
		if err != nil || p.Format != 32 {
			return nil
		}
		var ids []uint32
		for i := 0; i+4 <= len(p.Value); i += 4 {
			ids = append(ids, xgb.Get32(p.Value[i:]))
		}
		return ids
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		probe := appWindow{title: "probe", w: 10, h: 10}.create(t, xc)
		managed := false
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end) && !managed; time.Sleep(10 * time.Millisecond) {
			for _, id := range clients() {
				managed = managed || id == uint32(probe)
			}
		}
		if err := xproto.DestroyWindowChecked(xc, probe).Check(); err != nil {
			t.Fatal(err)
		}
		if managed {
			testkit.Eventually(t, 5*time.Second, func() bool { return len(clients()) == 0 }, "probe window gone")
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the window manager to manage windows")
		}
	}
}

// TestWindowsInsideFrames lists a client window that a window manager (here
// the test itself, as a stand-in) has put inside a frame, and leaves out
// override-redirect windows such as menus.
func TestWindowsInsideFrames(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "frames", 640, 480)
	xc := clientConn(t, s, "frames")
	frame := appWindow{x: 40, y: 30, w: 300, h: 220}.create(t, xc)
	client := appWindow{title: "framed", instance: "app", class: "App", x: 5, y: 25, w: 290, h: 190, parent: frame, wmState: true}.create(t, xc)
	showWindow(t, xc, 400, 300, 80, 60, 0xff0000, 0) // override-redirect
	ws := getWindows(t, c, "frames")
	got := describeWindows(ws, map[uint32]string{uint32(client): "client", uint32(frame): "frame"})
	want := `client "framed" class="App" instance="app" 290x190+45+55 mapped=true focused=false`
	if got != want {
		t.Fatalf("windows\n%s\nwant\n%s", got, want)
	}
	// The focus on a child of the client marks the client.
	child := appWindow{x: 0, y: 0, w: 10, h: 10, parent: client}.create(t, xc)
	if err := xproto.SetInputFocusChecked(xc, xproto.InputFocusParent, child, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	if ws := getWindows(t, c, "frames"); len(ws) != 1 || !ws[0].GetFocused() {
		t.Fatalf("focus inside the client: %v", ws)
	}
}

func TestGetDisplayReportsDPI(t *testing.T) {
	_, c := testService(t, "")
	for _, tc := range []struct {
		ask, want int32
	}{{0, 96}, {144, 144}} {
		id := fmt.Sprintf("dpi-%d", tc.ask)
		resp, err := c.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: id, Width: 400, Height: 300, Dpi: tc.ask})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetDisplay().GetDpi(); got != tc.want {
			t.Errorf("dpi %d: created with %d, want %d", tc.ask, got, tc.want)
		}
		get, err := c.GetDisplay(ctxT(t), &displayv1.GetDisplayRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		d := get.GetDisplay()
		if d.GetDpi() != tc.want || d.GetWidth() != 400 || d.GetHeight() != 300 {
			t.Errorf("dpi %d: get %dx%d at %d dpi, want 400x300 at %d", tc.ask, d.GetWidth(), d.GetHeight(), d.GetDpi(), tc.want)
		}
	}
}
