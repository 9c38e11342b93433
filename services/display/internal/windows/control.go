package windows

import (
	"errors"
	"fmt"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// ErrNoWindowManager is a change only a window manager can make
// (minimising, maximising, full-screen) asked of a display without one.
var ErrNoWindowManager = errors.New("no EWMH window manager runs on the display")

// ErrCannotClose is a window that cannot be asked to close: no window
// manager runs and the window does not take WM_DELETE_WINDOW.
var ErrCannotClose = errors.New("the window does not take a close request")

// State is a window state to set.
type State int

const (
	Normal State = iota
	Minimized
	Maximized
	Fullscreen
)

// source indication 2: the request comes from a pager or similar tool
// acting for the user, which window managers honour without the focus
// stealing checks they apply to applications (EWMH "Source indication").
const sourcePager = 2

// _NET_WM_STATE actions.
const (
	stateRemove = 0
	stateAdd    = 1
)

// managed reports whether an EWMH window manager runs.
func (l *Lister) managed() (bool, error) {
	ids, _, err := l.ewmhClients()
	return ids != nil, err
}

// rootMessage sends a client message about w to the window manager, the
// way EWMH asks: to the root, for substructure redirect and notify.
func (l *Lister) rootMessage(w xproto.Window, typ xproto.Atom, data ...uint32) error {
	d := make([]uint32, 5)
	copy(d, data)
	ev := xproto.ClientMessageEvent{Format: 32, Window: w, Type: typ, Data: xproto.ClientMessageDataUnionData32New(d)}
	return xproto.SendEventChecked(l.c, false, l.root,
		xproto.EventMaskSubstructureNotify|xproto.EventMaskSubstructureRedirect, string(ev.Bytes())).Check()
}

// Activate raises w and gives it the focus, through the window manager
// when one runs (which also restores a minimised window).
func (l *Lister) Activate(w xproto.Window) error {
	wm, err := l.managed()
	if err != nil {
		return err
	}
	if wm {
		return l.rootMessage(w, l.netActiveWindow, sourcePager, xproto.TimeCurrentTime, 0)
	}
	if err := xproto.MapWindowChecked(l.c, w).Check(); err != nil {
		return fmt.Errorf("map window: %w", err)
	}
	if err := xproto.ConfigureWindowChecked(l.c, w, xproto.ConfigWindowStackMode, []uint32{xproto.StackModeAbove}).Check(); err != nil {
		return fmt.Errorf("raise window: %w", err)
	}
	if err := xproto.SetInputFocusChecked(l.c, xproto.InputFocusParent, w, xproto.TimeCurrentTime).Check(); err != nil {
		return fmt.Errorf("focus window: %w", err)
	}
	return nil
}

// Close asks w's program to close it: through the window manager
// (_NET_CLOSE_WINDOW) when one runs, else with WM_DELETE_WINDOW. force
// disconnects the program from the display instead.
func (l *Lister) Close(w xproto.Window, force bool) error {
	if force {
		return xproto.KillClientChecked(l.c, uint32(w)).Check()
	}
	wm, err := l.managed()
	if err != nil {
		return err
	}
	if wm {
		return l.rootMessage(w, l.netCloseWindow, xproto.TimeCurrentTime, sourcePager)
	}
	p, err := xproto.GetProperty(l.c, false, w, l.wmProtocols, xproto.AtomAtom, 0, 64).Reply()
	if err != nil {
		return fmt.Errorf("read WM_PROTOCOLS: %w", err)
	}
	takesDelete := false
	for i := 0; p.Format == 32 && i+4 <= len(p.Value); i += 4 {
		if xproto.Atom(xgb.Get32(p.Value[i:])) == l.wmDeleteWindow {
			takesDelete = true
		}
	}
	if !takesDelete {
		return ErrCannotClose
	}
	d := []uint32{uint32(l.wmDeleteWindow), xproto.TimeCurrentTime, 0, 0, 0}
	ev := xproto.ClientMessageEvent{Format: 32, Window: w, Type: l.wmProtocols, Data: xproto.ClientMessageDataUnionData32New(d)}
	return xproto.SendEventChecked(l.c, false, w, 0, string(ev.Bytes())).Check()
}

// MoveResize puts w's client area at x, y (root coordinates, without the
// frame) with the given size; a width or height of 0 keeps it.
func (l *Lister) MoveResize(w xproto.Window, x, y, width, height int) error {
	wm, err := l.managed()
	if err != nil {
		return err
	}
	if wm {
		// StaticGravity (10): x, y are the client area's own position
		// (give or take the border the window had before the manager
		// took it, which the caller corrects).
		flags := uint32(10) | 1<<8 | 1<<9 | sourcePager<<12
		if width > 0 {
			flags |= 1 << 10
		}
		if height > 0 {
			flags |= 1 << 11
		}
		return l.rootMessage(w, l.netMoveResizeWindow, flags, uint32(int32(x)), uint32(int32(y)), uint32(width), uint32(height))
	}
	// A window's position is its border's outer corner; the listing gives
	// the area inside the border.
	g, err := xproto.GetGeometry(l.c, xproto.Drawable(w)).Reply()
	if err != nil {
		return fmt.Errorf("window geometry: %w", err)
	}
	x, y = x-int(g.BorderWidth), y-int(g.BorderWidth)
	mask := uint16(xproto.ConfigWindowX | xproto.ConfigWindowY)
	vals := []uint32{uint32(int32(x)), uint32(int32(y))}
	if width > 0 {
		mask |= xproto.ConfigWindowWidth
		vals = append(vals, uint32(width))
	}
	if height > 0 {
		mask |= xproto.ConfigWindowHeight
		vals = append(vals, uint32(height))
	}
	return xproto.ConfigureWindowChecked(l.c, w, mask, vals).Check()
}

// SetState minimises, maximises, makes full-screen or restores w, through
// the window manager: without one it is ErrNoWindowManager. minimized is
// whether w is minimised now (a window leaves that state by activation).
func (l *Lister) SetState(w xproto.Window, st State, minimized bool) error {
	wm, err := l.managed()
	if err != nil {
		return err
	}
	if !wm {
		return ErrNoWindowManager
	}
	send := func(typ xproto.Atom, data ...uint32) error { return l.rootMessage(w, typ, data...) }
	switch st {
	case Minimized:
		// ICCCM 4.1.4: WM_CHANGE_STATE with IconicState.
		return send(l.wmChange, 3)
	case Maximized:
		if err := send(l.netWMState, stateRemove, uint32(l.stateFull), 0, sourcePager); err != nil {
			return err
		}
		if err := send(l.netWMState, stateAdd, uint32(l.stateMaxVert), uint32(l.stateMaxHorz), sourcePager); err != nil {
			return err
		}
	case Fullscreen:
		if err := send(l.netWMState, stateAdd, uint32(l.stateFull), 0, sourcePager); err != nil {
			return err
		}
	default:
		if err := send(l.netWMState, stateRemove, uint32(l.stateFull), 0, sourcePager); err != nil {
			return err
		}
		if err := send(l.netWMState, stateRemove, uint32(l.stateMaxVert), uint32(l.stateMaxHorz), sourcePager); err != nil {
			return err
		}
	}
	if minimized {
		return send(l.netActiveWindow, sourcePager, xproto.TimeCurrentTime, 0)
	}
	return nil
}
