package display

import (
	"encoding/binary"
	"time"

	"github.com/jezek/xgb/xproto"
)

// A window manager may read a program's map request into its own queue and
// then wait on its connection without handling it (openbox 3.6 does): the
// program's window stays unmapped, never shown, until some other event
// reaches the manager. So the display watches for new top-level windows and,
// while one stays unmapped, changes a property of the root window, which
// every window manager listens to: the manager wakes and handles what it
// had queued.

// wakeDelays are the waits before each nudge while a new window stays
// unmapped; a program that maps its window later is nudged no more.
var wakeDelays = []time.Duration{
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
	800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond,
}

// watchNewWindows asks the server for the root's new children (CreateNotify)
// and interns the property the nudges change.
func (d *display) watchNewWindows() error {
	a, err := xproto.InternAtom(d.conn, false, uint16(len("_DESKGRID_WAKE")), "_DESKGRID_WAKE").Reply()
	if err != nil {
		return err
	}
	d.wakeAtom = a.Atom
	return xproto.ChangeWindowAttributesChecked(d.conn, d.root, xproto.CwEventMask,
		[]uint32{xproto.EventMaskSubstructureNotify}).Check()
}

// handleNewWindow starts nudging the window manager for a new top-level
// window; it reports whether ev was such an event.
func (d *display) handleNewWindow(ev any) bool {
	c, ok := ev.(xproto.CreateNotifyEvent)
	if !ok {
		return false
	}
	if c.Parent == d.root && !c.OverrideRedirect && d.wakeAtom != 0 {
		go d.wakeManager(c.Window)
	}
	return true
}

// wakeManager nudges the window manager while w stays unmapped.
func (d *display) wakeManager(w xproto.Window) {
	buf := make([]byte, 4)
	for i, delay := range wakeDelays {
		select {
		case <-d.done.Done():
			return
		case <-time.After(delay):
		}
		a, err := xproto.GetWindowAttributes(d.conn, w).Reply()
		if err != nil || a.MapState != xproto.MapStateUnmapped {
			return // gone, or shown
		}
		binary.LittleEndian.PutUint32(buf, uint32(i))
		xproto.ChangeProperty(d.conn, xproto.PropModeReplace, d.root, d.wakeAtom, xproto.AtomCardinal, 32, 1, buf)
	}
}
