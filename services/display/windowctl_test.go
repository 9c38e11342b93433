package display

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// politeWindow is a program's window on its own connection that says it
// takes WM_DELETE_WINDOW (and reports pid as _NET_WM_PID), and destroys
// itself when asked, as toolkits do.
func politeWindow(t *testing.T, s *Service, id string, a appWindow, pid uint32) (*xgb.Conn, xproto.Window) {
	t.Helper()
	xc := clientConn(t, s, id)
	a.noMap = true
	w := a.create(t, xc)
	protocols, del := atom(t, xc, "WM_PROTOCOLS"), atom(t, xc, "WM_DELETE_WINDOW")
	b := make([]byte, 4)
	xgb.Put32(b, uint32(del))
	if err := xproto.ChangePropertyChecked(xc, xproto.PropModeReplace, w, protocols, xproto.AtomAtom, 32, 1, b).Check(); err != nil {
		t.Fatal(err)
	}
	if pid != 0 {
		xgb.Put32(b, pid)
		if err := xproto.ChangePropertyChecked(xc, xproto.PropModeReplace, w, atom(t, xc, "_NET_WM_PID"), xproto.AtomCardinal, 32, 1, b).Check(); err != nil {
			t.Fatal(err)
		}
	}
	if err := xproto.MapWindowChecked(xc, w).Check(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			ev, err := xc.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if m, ok := ev.(xproto.ClientMessageEvent); ok && m.Type == protocols && xproto.Atom(m.Data.Data32[0]) == del {
				xproto.DestroyWindow(xc, m.Window)
				xc.Sync()
			}
		}
	}()
	return xc, w
}

func listWindows(t *testing.T, c displayv1.DisplayServiceClient, id string) map[uint32]*displayv1.Window {
	t.Helper()
	resp, err := c.ListWindows(ctxT(t), &displayv1.ListWindowsRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]*displayv1.Window{}
	for _, w := range resp.GetWindows() {
		out[w.GetId()] = w
	}
	return out
}

func geomOf(w *displayv1.Window) string {
	g := w.GetGeometry()
	return fmt.Sprintf("%dx%d+%d+%d", g.GetWidth(), g.GetHeight(), g.GetX(), g.GetY())
}

func TestWindowControlUnderOpenbox(t *testing.T) {
	openbox, err := exec.LookPath("openbox")
	if err != nil {
		t.Fatalf("openbox not installed (Debian package openbox): %v", err)
	}
	s, c := testService(t, "")
	const id = "wm"
	createDisplay(t, c, id, 800, 600)
	startClient(t, s, id, []string{openbox})
	xc := clientConn(t, s, id)
	waitWindowManager(t, xc)
	ctx := ctxT(t)

	_, editor := politeWindow(t, s, id, appWindow{title: "Editor", instance: "ed", class: "Ed", x: 100, y: 100, w: 300, h: 200}, 4242)
	_, viewer := politeWindow(t, s, id, appWindow{title: "Viewer", instance: "view", class: "View", x: 420, y: 150, w: 250, h: 180}, 0)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(listWindows(t, c, id)) == 2 }, "both windows listed")
	ws := listWindows(t, c, id)
	if w := ws[uint32(editor)]; w.GetPid() != 4242 || w.GetTitle() != "Editor" || w.GetClass() != "Ed" || w.GetMinimized() || w.GetMaximized() {
		t.Fatalf("editor listed as %v", w)
	}
	if w := ws[uint32(viewer)]; w.GetPid() != 0 {
		t.Fatalf("viewer without _NET_WM_PID listed with pid %d", w.GetPid())
	}

	activate := func(w xproto.Window) {
		t.Helper()
		resp, err := c.ActivateWindow(ctx, &displayv1.ActivateWindowRequest{SessionId: id, WindowId: uint32(w)})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetWindow().GetFocused() {
			t.Fatalf("activated %#x is not focused: %v", w, resp.GetWindow())
		}
		for wid, other := range listWindows(t, c, id) {
			if other.GetFocused() != (wid == uint32(w)) {
				t.Fatalf("after activating %#x, %#x focused=%v", w, wid, other.GetFocused())
			}
		}
	}
	activate(editor)
	activate(viewer)
	activate(editor)

	// Move and resize: the client area lands exactly there, as the
	// program itself sees it.
	mv, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(editor), Geometry: &displayv1.Rect{X: 50, Y: 60, Width: 320, Height: 240}})
	if err != nil {
		t.Fatal(err)
	}
	if g := geomOf(mv.GetWindow()); g != "320x240+50+60" {
		t.Fatalf("moved to %s, want 320x240+50+60", g)
	}
	if x, y, w, h := rootGeometry(t, xc, editor); fmt.Sprintf("%dx%d+%d+%d", w, h, x, y) != "320x240+50+60" {
		t.Fatalf("the program sees itself at %dx%d+%d+%d", w, h, x, y)
	}
	// Moving only: width and height 0 keep the size.
	mv, err = c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(editor), Geometry: &displayv1.Rect{X: 70, Y: 80}})
	if err != nil || geomOf(mv.GetWindow()) != "320x240+70+80" {
		t.Fatalf("move only: %v, %v", mv, err)
	}

	state := func(w xproto.Window, st displayv1.WindowState) *displayv1.Window {
		t.Helper()
		resp, err := c.SetWindowState(ctx, &displayv1.SetWindowStateRequest{SessionId: id, WindowId: uint32(w), State: st})
		if err != nil {
			t.Fatalf("%v: %v", st, err)
		}
		return resp.GetWindow()
	}
	if w := state(editor, displayv1.WindowState_WINDOW_STATE_MAXIMIZED); !w.GetMaximized() || w.GetGeometry().GetWidth() < 700 || w.GetGeometry().GetHeight() < 450 {
		t.Fatalf("maximised: %v", w)
	}
	// The size comes back; where openbox puts the window back is its own
	// choice (it places the frame from its remembered area).
	if w := state(editor, displayv1.WindowState_WINDOW_STATE_NORMAL); w.GetMaximized() || w.GetGeometry().GetWidth() != 320 || w.GetGeometry().GetHeight() != 240 {
		t.Fatalf("restored from maximised: %v (%s)", w, geomOf(w))
	}
	if w := state(editor, displayv1.WindowState_WINDOW_STATE_MINIMIZED); !w.GetMinimized() || w.GetMapped() || w.GetFocused() {
		t.Fatalf("minimised: %v", w)
	}
	if w := state(editor, displayv1.WindowState_WINDOW_STATE_NORMAL); w.GetMinimized() || !w.GetMapped() {
		t.Fatalf("restored from minimised: %v", w)
	}
	if w := state(editor, displayv1.WindowState_WINDOW_STATE_FULLSCREEN); !w.GetFullscreen() || geomOf(w) != "800x600+0+0" {
		t.Fatalf("full-screen: %v (%s)", w, geomOf(w))
	}
	state(editor, displayv1.WindowState_WINDOW_STATE_NORMAL)
	// Activating restores a minimised window too.
	state(viewer, displayv1.WindowState_WINDOW_STATE_MINIMIZED)
	activate(viewer)
	if w := listWindows(t, c, id)[uint32(viewer)]; w.GetMinimized() || !w.GetMapped() {
		t.Fatalf("activated minimised window: %v", w)
	}

	// Close: the program is asked and destroys its window.
	cl, err := c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: uint32(viewer)})
	if err != nil || !cl.GetClosed() {
		t.Fatalf("close: %v, %v", cl, err)
	}
	if ws := listWindows(t, c, id); len(ws) != 1 || ws[uint32(editor)] == nil {
		t.Fatalf("after close: %v", ws)
	}

	// A real program: xmessage exits when its window is closed.
	xmessage, err := exec.LookPath("xmessage")
	if err != nil {
		t.Fatalf("xmessage not installed (Debian package x11-utils): %v", err)
	}
	prog := startClient(t, s, id, []string{xmessage, "-name", "closeme", "close me"})
	var msg *displayv1.Window
	testkit.Eventually(t, 10*time.Second, func() bool {
		for _, w := range listWindows(t, c, id) {
			if w.GetInstance() == "closeme" {
				msg = w
			}
		}
		return msg != nil
	}, "xmessage's window")
	if msg.GetClass() != "Xmessage" {
		t.Fatalf("xmessage listed as %v", msg)
	}
	// xmessage's window has a border, which openbox counts in static
	// gravity: the move still lands the client area exactly.
	mv, err = c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: msg.GetId(), Geometry: &displayv1.Rect{X: 30, Y: 40, Width: 300, Height: 120}})
	if err != nil || geomOf(mv.GetWindow()) != "300x120+30+40" {
		t.Fatalf("move xmessage: %v (%s), %v", mv, geomOf(mv.GetWindow()), err)
	}
	cl, err = c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: msg.GetId()})
	if err != nil || !cl.GetClosed() {
		t.Fatalf("close xmessage: %v, %v", cl, err)
	}
	select {
	case <-prog.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("xmessage still runs after its window was closed")
	}
}

func TestWindowControlWithoutWindowManager(t *testing.T) {
	s, c := testService(t, "")
	const id = "bare"
	createDisplay(t, c, id, 640, 480)
	ctx := ctxT(t)
	xc := clientConn(t, s, id)
	a := appWindow{title: "A", x: 10, y: 10, w: 200, h: 150}.create(t, xc)
	_, polite := politeWindow(t, s, id, appWindow{title: "polite", x: 300, y: 200, w: 100, h: 100}, 0)
	rudeConn := clientConn(t, s, id)
	rude := appWindow{title: "rude", x: 400, y: 50, w: 100, h: 100}.create(t, rudeConn)
	testkit.Eventually(t, 5*time.Second, func() bool { return len(listWindows(t, c, id)) == 3 }, "three windows")

	act, err := c.ActivateWindow(ctx, &displayv1.ActivateWindowRequest{SessionId: id, WindowId: uint32(a)})
	if err != nil || !act.GetWindow().GetFocused() {
		t.Fatalf("activate: %v, %v", act, err)
	}
	mv, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(a), Geometry: &displayv1.Rect{X: 30, Y: 40, Width: 250, Height: 120}})
	if err != nil || geomOf(mv.GetWindow()) != "250x120+30+40" {
		t.Fatalf("move: %v, %v", mv, err)
	}
	_, err = c.SetWindowState(ctx, &displayv1.SetWindowStateRequest{SessionId: id, WindowId: uint32(a), State: displayv1.WindowState_WINDOW_STATE_MAXIMIZED})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "window manager") {
		t.Fatalf("maximise without a window manager: %v", err)
	}
	// A window that does not take WM_DELETE_WINDOW is not closed unasked.
	_, err = c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: uint32(rude)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "force") {
		t.Fatalf("close a window without WM_DELETE_WINDOW: %v", err)
	}
	cl, err := c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: uint32(polite)})
	if err != nil || !cl.GetClosed() {
		t.Fatalf("close polite: %v, %v", cl, err)
	}
	// force disconnects the program, and its window goes with it.
	cl, err = c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: uint32(rude), Force: true})
	if err != nil || !cl.GetClosed() {
		t.Fatalf("force close: %v, %v", cl, err)
	}
	if ws := listWindows(t, c, id); len(ws) != 1 || ws[uint32(a)] == nil {
		t.Fatalf("left: %v", ws)
	}
}

func TestWindowControlBadInput(t *testing.T) {
	s, c := testService(t, "")
	const id = "badwin"
	createDisplay(t, c, id, 320, 240)
	ctx := ctxT(t)
	xc := clientConn(t, s, id)
	w := appWindow{title: "w", x: 10, y: 10, w: 50, h: 50}.create(t, xc)
	root := xproto.Setup(xc).DefaultScreen(xc).Root
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
		msg  string
	}{
		{"no window id", func() error {
			_, err := c.ActivateWindow(ctx, &displayv1.ActivateWindowRequest{SessionId: id})
			return err
		}, codes.InvalidArgument, "window_id"},
		{"unknown window", func() error {
			_, err := c.ActivateWindow(ctx, &displayv1.ActivateWindowRequest{SessionId: id, WindowId: 0x7fffff})
			return err
		}, codes.NotFound, "no window 0x7fffff"},
		{"close an unknown window", func() error {
			_, err := c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: 0x7fffff})
			return err
		}, codes.NotFound, "no window 0x7fffff"},
		{"force-close an unknown window", func() error {
			_, err := c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: 0x7fffff, Force: true})
			return err
		}, codes.NotFound, "no window 0x7fffff"},
		{"minimise an unknown window", func() error {
			_, err := c.SetWindowState(ctx, &displayv1.SetWindowStateRequest{SessionId: id, WindowId: 0x7fffff, State: displayv1.WindowState_WINDOW_STATE_MINIMIZED})
			return err
		}, codes.NotFound, "no window 0x7fffff"},
		{"maximise an unknown window", func() error {
			_, err := c.SetWindowState(ctx, &displayv1.SetWindowStateRequest{SessionId: id, WindowId: 0x7fffff, State: displayv1.WindowState_WINDOW_STATE_MAXIMIZED})
			return err
		}, codes.NotFound, "no window 0x7fffff"},
		{"move an unknown window", func() error {
			_, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: 0x7fffff, Geometry: &displayv1.Rect{X: 5, Y: 5}})
			return err
		}, codes.NotFound, "no window 0x7fffff"},
		{"resize an unknown window", func() error {
			_, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: 0x7fffff, Geometry: &displayv1.Rect{Width: 80, Height: 60}})
			return err
		}, codes.NotFound, "no window 0x7fffff"},
		{"the root is no top-level window", func() error {
			_, err := c.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: id, WindowId: uint32(root), Force: true})
			return err
		}, codes.NotFound, "ListWindows"},
		{"no geometry", func() error {
			_, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(w)})
			return err
		}, codes.InvalidArgument, "geometry"},
		{"negative size", func() error {
			_, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(w), Geometry: &displayv1.Rect{Width: -5}})
			return err
		}, codes.InvalidArgument, "size"},
		{"huge size", func() error {
			_, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(w), Geometry: &displayv1.Rect{Width: 100000, Height: 10}})
			return err
		}, codes.InvalidArgument, "size"},
		{"no state", func() error {
			_, err := c.SetWindowState(ctx, &displayv1.SetWindowStateRequest{SessionId: id, WindowId: uint32(w)})
			return err
		}, codes.InvalidArgument, "state"},
		{"unknown session", func() error {
			_, err := c.ListWindows(ctx, &displayv1.ListWindowsRequest{SessionId: "nope"})
			return err
		}, codes.NotFound, "nope"},
	} {
		err := tc.call()
		if status.Code(err) != tc.want || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %v mentioning %q", tc.name, err, tc.want, tc.msg)
		}
	}
	// Nothing was changed by the refused calls.
	if ws := listWindows(t, c, id); geomOf(ws[uint32(w)]) != "50x50+10+10" {
		t.Fatalf("window after refused calls: %v", ws)
	}
	// Window changes are input: a held lease fences them.
	if _, err := c.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: id, LeaseToken: 5, Actions: []*displayv1.Action{{Action: &displayv1.Action_CursorPosition{CursorPosition: &displayv1.CursorPosition{}}}}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(w), Geometry: &displayv1.Rect{X: 1, Y: 1}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("move without the lease token while leased: %v", err)
	}
	_, err = c.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: id, Text: "x", LeaseToken: 4})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("clipboard with a stale lease token: %v", err)
	}
	if _, err := c.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: id, WindowId: uint32(w), Geometry: &displayv1.Rect{X: 1, Y: 1}, LeaseToken: 5}); err != nil {
		t.Fatalf("move with the lease token: %v", err)
	}
}
