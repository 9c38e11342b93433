// Package windows lists the top-level windows open on an X display: their
// titles, classes, geometry, whether they are shown and which has the focus.
//
// With an EWMH window manager the list is the manager's own
// (_NET_CLIENT_LIST_STACKING, else _NET_CLIENT_LIST). Without one it is the
// root's mapped children; a child that is a window manager's frame (it lacks
// WM_STATE) stands for the client window inside it that has WM_STATE.
package windows

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/deskgrid/deskgrid/services/display/internal/xconn"
)

// Window is one top-level window.
type Window struct {
	ID xproto.Window
	// Title is _NET_WM_NAME, else WM_NAME, as UTF-8.
	Title string
	// Class and Instance are WM_CLASS's two strings.
	Class, Instance string
	// X, Y are the client area's position on the root window, without any
	// frame; Width, Height its size.
	X, Y, Width, Height int
	// Mapped: the window is viewable (it and every ancestor are mapped).
	Mapped bool
	// Focused: the input focus is on the window or inside it.
	Focused bool
	// PID is _NET_WM_PID, 0 when unset.
	PID uint32
	// Minimized: WM_STATE is Iconic, or _NET_WM_STATE has _HIDDEN.
	Minimized bool
	// Maximized: _NET_WM_STATE has both _MAXIMIZED_VERT and _HORZ.
	Maximized  bool
	Fullscreen bool
}

// Lister lists the windows of one display. Its atoms are interned once.
type Lister struct {
	c    *xgb.Conn
	root xproto.Window

	netWMName, utf8String, wmState     xproto.Atom
	clientList, clientListStacking     xproto.Atom
	supportingWMCheck, netActiveWindow xproto.Atom

	netWMPID, netWMState, stateHidden     xproto.Atom
	stateMaxVert, stateMaxHorz, stateFull xproto.Atom
	netCloseWindow, netMoveResizeWindow   xproto.Atom
	wmProtocols, wmDeleteWindow, wmChange xproto.Atom
}

// maxDepth bounds the search for a client window inside a frame; frames
// nest a few levels at most.
const maxDepth = 4

// maxWindows bounds how many windows one call describes, so a program that
// maps thousands of windows cannot make a call unbounded.
const maxWindows = 1000

// New prepares listing the windows under root on c.
func New(c *xgb.Conn, root xproto.Window) (*Lister, error) {
	l := &Lister{c: c, root: root}
	names := map[string]*xproto.Atom{
		"_NET_WM_NAME":                 &l.netWMName,
		"UTF8_STRING":                  &l.utf8String,
		"WM_STATE":                     &l.wmState,
		"_NET_CLIENT_LIST":             &l.clientList,
		"_NET_CLIENT_LIST_STACKING":    &l.clientListStacking,
		"_NET_SUPPORTING_WM_CHECK":     &l.supportingWMCheck,
		"_NET_ACTIVE_WINDOW":           &l.netActiveWindow,
		"_NET_WM_PID":                  &l.netWMPID,
		"_NET_WM_STATE":                &l.netWMState,
		"_NET_WM_STATE_HIDDEN":         &l.stateHidden,
		"_NET_WM_STATE_MAXIMIZED_VERT": &l.stateMaxVert,
		"_NET_WM_STATE_MAXIMIZED_HORZ": &l.stateMaxHorz,
		"_NET_WM_STATE_FULLSCREEN":     &l.stateFull,
		"_NET_CLOSE_WINDOW":            &l.netCloseWindow,
		"_NET_MOVERESIZE_WINDOW":       &l.netMoveResizeWindow,
		"WM_PROTOCOLS":                 &l.wmProtocols,
		"WM_DELETE_WINDOW":             &l.wmDeleteWindow,
		"WM_CHANGE_STATE":              &l.wmChange,
	}
	if err := xconn.InternAtoms(c, names); err != nil {
		return nil, err
	}
	return l, nil
}

// List returns the top-level windows, bottom to top.
func (l *Lister) List() ([]Window, error) {
	ids, active, err := l.ewmhClients()
	if err != nil {
		return nil, err
	}
	if ids == nil {
		if ids, err = l.treeClients(); err != nil {
			return nil, err
		}
	}
	if len(ids) > maxWindows {
		ids = ids[len(ids)-maxWindows:]
	}
	out, err := l.describe(ids)
	if err != nil {
		return nil, err
	}
	focus, err := l.focusedClient(ids, active)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Focused = out[i].ID == focus
	}
	return out, nil
}

// ewmhClients returns the window manager's client list, bottom to top, and
// its active window; nil ids when no EWMH window manager runs.
func (l *Lister) ewmhClients() (ids []xproto.Window, active xproto.Window, err error) {
	check, err := l.windowProp(l.root, l.supportingWMCheck)
	if err != nil || len(check) != 1 {
		return nil, 0, err
	}
	// A manager that died leaves the property behind; its check window
	// then no longer exists or no longer points at itself.
	self, err := l.windowProp(check[0], l.supportingWMCheck)
	if err != nil {
		if isWindowError(err) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	if len(self) != 1 || self[0] != check[0] {
		return nil, 0, nil
	}
	ids, err = l.windowProp(l.root, l.clientListStacking)
	if err != nil {
		return nil, 0, err
	}
	if ids == nil {
		if ids, err = l.windowProp(l.root, l.clientList); err != nil {
			return nil, 0, err
		}
	}
	if ids == nil {
		ids = []xproto.Window{}
	}
	if act, err := l.windowProp(l.root, l.netActiveWindow); err == nil && len(act) == 1 {
		active = act[0]
	}
	return ids, active, nil
}

// treeClients returns the root's mapped InputOutput children that are not
// override-redirect (menus, tooltips), each replaced by the client window
// inside it when it is a frame.
func (l *Lister) treeClients() ([]xproto.Window, error) {
	tree, err := xproto.QueryTree(l.c, l.root).Reply()
	if err != nil {
		return nil, fmt.Errorf("list root children: %w", err)
	}
	attrs := make([]xproto.GetWindowAttributesCookie, len(tree.Children))
	for i, w := range tree.Children {
		attrs[i] = xproto.GetWindowAttributes(l.c, w)
	}
	ids := []xproto.Window{}
	for i, ck := range attrs {
		a, err := ck.Reply()
		if err != nil {
			if isWindowError(err) {
				continue // destroyed since QueryTree
			}
			return nil, fmt.Errorf("window attributes: %w", err)
		}
		if a.MapState != xproto.MapStateViewable || a.OverrideRedirect || a.Class != xproto.WindowClassInputOutput {
			continue
		}
		w := tree.Children[i]
		client, err := l.clientIn(w, maxDepth)
		if err != nil {
			return nil, err
		}
		if client == 0 {
			client = w
		}
		ids = append(ids, client)
	}
	return ids, nil
}

// clientIn finds the window at or beneath w that has WM_STATE, the mark a
// window manager puts on the client windows it manages; 0 when none does.
func (l *Lister) clientIn(w xproto.Window, depth int) (xproto.Window, error) {
	p, err := xproto.GetProperty(l.c, false, w, l.wmState, xproto.GetPropertyTypeAny, 0, 0).Reply()
	if err != nil {
		if isWindowError(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("read WM_STATE: %w", err)
	}
	if p.Type != xproto.AtomNone {
		return w, nil
	}
	if depth == 0 {
		return 0, nil
	}
	tree, err := xproto.QueryTree(l.c, w).Reply()
	if err != nil {
		if isWindowError(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("list window children: %w", err)
	}
	for i := len(tree.Children) - 1; i >= 0; i-- {
		c, err := l.clientIn(tree.Children[i], depth-1)
		if err != nil || c != 0 {
			return c, err
		}
	}
	return 0, nil
}

// describe reads every window's properties and geometry, sending all the
// requests before reading any reply so the whole list costs about one
// round trip. Windows destroyed meanwhile are left out.
func (l *Lister) describe(ids []xproto.Window) ([]Window, error) {
	type pending struct {
		netName, name, class xproto.GetPropertyCookie
		attrs                xproto.GetWindowAttributesCookie
		geom                 xproto.GetGeometryCookie
		pos                  xproto.TranslateCoordinatesCookie
		pid, state, wmState  xproto.GetPropertyCookie
	}
	ps := make([]pending, len(ids))
	for i, w := range ids {
		ps[i] = pending{
			netName: xproto.GetProperty(l.c, false, w, l.netWMName, l.utf8String, 0, 1<<14),
			name:    xproto.GetProperty(l.c, false, w, xproto.AtomWmName, xproto.GetPropertyTypeAny, 0, 1<<14),
			class:   xproto.GetProperty(l.c, false, w, xproto.AtomWmClass, xproto.AtomString, 0, 1<<12),
			attrs:   xproto.GetWindowAttributes(l.c, w),
			geom:    xproto.GetGeometry(l.c, xproto.Drawable(w)),
			pos:     xproto.TranslateCoordinates(l.c, w, l.root, 0, 0),
			pid:     xproto.GetProperty(l.c, false, w, l.netWMPID, xproto.AtomCardinal, 0, 1),
			state:   xproto.GetProperty(l.c, false, w, l.netWMState, xproto.AtomAtom, 0, 64),
			wmState: xproto.GetProperty(l.c, false, w, l.wmState, l.wmState, 0, 2),
		}
	}
	out := make([]Window, 0, len(ids))
	var firstErr error
	for i, p := range ps {
		win := Window{ID: ids[i]}
		netName, err1 := p.netName.Reply()
		name, err2 := p.name.Reply()
		class, err3 := p.class.Reply()
		attrs, err4 := p.attrs.Reply()
		geom, err5 := p.geom.Reply()
		pos, err6 := p.pos.Reply()
		pid, err7 := p.pid.Reply()
		state, err8 := p.state.Reply()
		wmState, err9 := p.wmState.Reply()
		if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9); err != nil {
			// Every reply was read, so the connection stays in step.
			if !isWindowError(err) && firstErr == nil {
				firstErr = fmt.Errorf("describe window %#x: %w", ids[i], err)
			}
			continue
		}
		switch {
		case netName.Type == l.utf8String && netName.ValueLen > 0:
			win.Title = validUTF8(netName.Value)
		case name.Type == l.utf8String:
			win.Title = validUTF8(name.Value)
		default:
			// STRING is Latin-1; COMPOUND_TEXT is read the same way, which
			// is right for its ASCII part.
			win.Title = latin1(name.Value)
		}
		if class.Format == 8 {
			win.Instance, win.Class = splitClass(class.Value)
		}
		win.Mapped = attrs.MapState == xproto.MapStateViewable
		win.Width, win.Height = int(geom.Width), int(geom.Height)
		win.X, win.Y = int(pos.DstX), int(pos.DstY)
		if pid.Format == 32 && len(pid.Value) >= 4 {
			win.PID = xgb.Get32(pid.Value)
		}
		var vert, horz bool
		if state.Format == 32 {
			for i := 0; i+4 <= len(state.Value); i += 4 {
				switch xproto.Atom(xgb.Get32(state.Value[i:])) {
				case l.stateHidden:
					win.Minimized = true
				case l.stateMaxVert:
					vert = true
				case l.stateMaxHorz:
					horz = true
				case l.stateFull:
					win.Fullscreen = true
				}
			}
		}
		win.Maximized = vert && horz
		// WM_STATE IconicState (3).
		if wmState.Format == 32 && len(wmState.Value) >= 4 && xgb.Get32(wmState.Value) == 3 {
			win.Minimized = true
		}
		out = append(out, win)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// focusedClient returns the listed window that holds the input focus or
// has it on one of its descendants (applications often focus a child);
// else the window manager's active window if listed; else 0.
func (l *Lister) focusedClient(ids []xproto.Window, active xproto.Window) (xproto.Window, error) {
	listed := make(map[xproto.Window]bool, len(ids))
	for _, w := range ids {
		listed[w] = true
	}
	f, err := xproto.GetInputFocus(l.c).Reply()
	if err != nil {
		return 0, fmt.Errorf("read input focus: %w", err)
	}
	// 0 is None and 1 PointerRoot: no window holds the focus.
	w := f.Focus
	for i := 0; w > 1 && w != l.root && i < 64; i++ {
		if listed[w] {
			return w, nil
		}
		tree, err := xproto.QueryTree(l.c, w).Reply()
		if err != nil {
			if isWindowError(err) {
				break
			}
			return 0, fmt.Errorf("walk up from the focus: %w", err)
		}
		// A frame holding the focus stands for its client.
		if tree.Parent == l.root {
			c, err := l.clientIn(w, maxDepth)
			if err != nil {
				return 0, err
			}
			if listed[c] {
				return c, nil
			}
		}
		w = tree.Parent
	}
	if listed[active] {
		return active, nil
	}
	return 0, nil
}

// windowProp reads a property of type WINDOW; nil when it is not set.
func (l *Lister) windowProp(w xproto.Window, prop xproto.Atom) ([]xproto.Window, error) {
	p, err := xproto.GetProperty(l.c, false, w, prop, xproto.AtomWindow, 0, 1<<16).Reply()
	if err != nil {
		return nil, err
	}
	if p.Type != xproto.AtomWindow || p.Format != 32 {
		return nil, nil
	}
	ids := make([]xproto.Window, 0, p.ValueLen)
	for i := 0; i+4 <= len(p.Value) && len(ids) < int(p.ValueLen); i += 4 {
		ids = append(ids, xproto.Window(xgb.Get32(p.Value[i:])))
	}
	return ids, nil
}

// isWindowError reports an error for a window that no longer exists, which
// a listing of another program's windows must expect at any moment.
func isWindowError(err error) bool {
	var we xproto.WindowError
	var de xproto.DrawableError
	var me xproto.MatchError
	return errors.As(err, &we) || errors.As(err, &de) || errors.As(err, &me)
}

func splitClass(b []byte) (instance, class string) {
	parts := make([]string, 0, 2)
	start := 0
	for i, c := range b {
		if c == 0 {
			parts = append(parts, latin1(b[start:i]))
			start = i + 1
		}
	}
	if start < len(b) {
		parts = append(parts, latin1(b[start:]))
	}
	if len(parts) > 0 {
		instance = parts[0]
	}
	if len(parts) > 1 {
		class = parts[1]
	}
	return instance, class
}

func latin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

func validUTF8(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
