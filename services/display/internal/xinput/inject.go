// Package xinput sends mouse and keyboard input to an X server through the
// XTEST extension. Key names are turned into keysyms by
// services/platform/keysym.
package xinput

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"github.com/deskgrid/deskgrid/services/platform/keysym"
)

// Mouse buttons as X numbers them.
const (
	ButtonLeft       byte = 1
	ButtonMiddle     byte = 2
	ButtonRight      byte = 3
	ButtonWheelUp    byte = 4
	ButtonWheelDown  byte = 5
	ButtonWheelLeft  byte = 6
	ButtonWheelRight byte = 7
	ButtonBack       byte = 8
	ButtonForward    byte = 9
)

// Injector sends input to one X server. Its methods are not meant to be
// called concurrently, except MappingChanged.
type Injector struct {
	c    *xgb.Conn
	root xproto.Window

	min    xproto.Keycode
	per    int
	syms   []xproto.Keysym
	stale  atomic.Bool
	spare  []xproto.Keycode
	next   int
	loaded bool
}

// New prepares input for the default screen of c, a connection from
// xconn.Dial.
func New(c *xgb.Conn, root xproto.Window) (*Injector, error) {
	// The extension itself is set up by xconn.Dial.
	if _, err := xtest.GetVersion(c, 2, 2).Reply(); err != nil {
		return nil, fmt.Errorf("XTEST version: %w", err)
	}
	in := &Injector{c: c, root: root}
	if err := in.claimKeyboard(); err != nil {
		return nil, err
	}
	if err := in.load(); err != nil {
		return nil, err
	}
	// Keycodes without any symbol are free for characters the layout lacks.
	// Taken from the top, as other tools do, to stay clear of real keys.
	for i := len(in.syms)/in.per - 1; i >= 0; i-- {
		empty := true
		for _, s := range in.syms[i*in.per : (i+1)*in.per] {
			if s != 0 {
				empty = false
				break
			}
		}
		if empty {
			in.spare = append(in.spare, in.min+xproto.Keycode(i))
		}
	}
	return in, nil
}

// claimKeyboard makes the XTEST keyboard the one the core keyboard last
// took a key from, before any program is on the display. The server copies
// the keymap of the keyboard a key comes from onto the core keyboard each
// time that keyboard changes, and tells every client the whole mapping
// changed (a MappingNotify for every keycode); a toolkit then reloads its
// keymap while the key that caused it arrives, and may drop that key
// (Chromium does: the first key a session is sent was lost in about one
// run of three). Here the change happens while nobody listens. The event is
// the release of a key that is not down, which the server switches devices
// for but delivers to no window.
func (in *Injector) claimKeyboard() error {
	in.fake(xproto.KeyRelease, byte(xproto.Setup(in.c).MinKeycode), 0, 0)
	return in.Sync()
}

// MappingChanged tells the injector the keyboard mapping changed (a
// MappingNotify arrived); it reloads it before the next key.
func (in *Injector) MappingChanged() { in.stale.Store(true) }

func (in *Injector) load() error {
	setup := xproto.Setup(in.c)
	min, max := setup.MinKeycode, setup.MaxKeycode
	reply, err := xproto.GetKeyboardMapping(in.c, min, byte(max-min+1)).Reply()
	if err != nil {
		return fmt.Errorf("read keyboard mapping: %w", err)
	}
	if reply.KeysymsPerKeycode == 0 {
		return errors.New("keyboard mapping is empty")
	}
	in.min, in.per, in.syms = min, int(reply.KeysymsPerKeycode), reply.Keysyms
	in.loaded = true
	return nil
}

// keycode finds the key that produces sym, and whether Shift is needed for
// it. A symbol the layout lacks is mapped onto a spare keycode.
func (in *Injector) keycode(ks keysym.Keysym) (xproto.Keycode, bool, error) {
	sym := xproto.Keysym(ks)
	if in.stale.Swap(false) || !in.loaded {
		if err := in.load(); err != nil {
			return 0, false, err
		}
	}
	n := len(in.syms) / in.per
	for col := 0; col < 2 && col < in.per; col++ {
		for i := 0; i < n; i++ {
			if in.syms[i*in.per+col] == sym {
				return in.min + xproto.Keycode(i), col == 1, nil
			}
		}
	}
	if len(in.spare) == 0 {
		return 0, false, fmt.Errorf("keysym %#x is not on the keyboard and no keycode is free", uint32(sym))
	}
	// Round robin: a character mapped here stays mapped until its slot is
	// needed again, because clients reload their keymap asynchronously on
	// MappingNotify and must still find the symbol when they do.
	code := in.spare[in.next%len(in.spare)]
	in.next++
	row := make([]xproto.Keysym, in.per)
	row[0] = sym
	if in.per > 1 {
		row[1] = sym
	}
	if err := xproto.ChangeKeyboardMappingChecked(in.c, 1, code, byte(in.per), row).Check(); err != nil {
		return 0, false, fmt.Errorf("map keysym %#x: %w", uint32(sym), err)
	}
	i := int(code - in.min)
	copy(in.syms[i*in.per:(i+1)*in.per], row)
	return code, false, nil
}

func (in *Injector) fake(typ, detail byte, x, y int16) {
	xtest.FakeInput(in.c, typ, detail, 0, in.root, x, y, 0)
}

// Move moves the pointer to x, y on the root window.
func (in *Injector) Move(x, y int) {
	in.fake(xproto.MotionNotify, 0, int16(x), int16(y))
}

// Button presses (down) or releases a mouse button.
func (in *Injector) Button(button byte, down bool) {
	typ := byte(xproto.ButtonRelease)
	if down {
		typ = xproto.ButtonPress
	}
	in.fake(typ, button, 0, 0)
}

// KeyDown presses the keys of syms in order, with Shift where a symbol needs
// it; KeyUp releases them in reverse. It returns what to pass to KeyUp.
func (in *Injector) KeyDown(syms []keysym.Keysym) ([]xproto.Keycode, error) {
	var pressed []xproto.Keycode
	for _, sym := range syms {
		code, shift, err := in.keycode(sym)
		if err != nil {
			in.KeyUp(pressed)
			return nil, err
		}
		if shift {
			sc, _, err := in.keycode(keysym.ShiftL)
			if err != nil {
				in.KeyUp(pressed)
				return nil, err
			}
			in.fake(xproto.KeyPress, byte(sc), 0, 0)
			pressed = append(pressed, sc)
		}
		in.fake(xproto.KeyPress, byte(code), 0, 0)
		pressed = append(pressed, code)
	}
	return pressed, nil
}

// KeyUp releases keys in reverse order.
func (in *Injector) KeyUp(codes []xproto.Keycode) {
	for i := len(codes) - 1; i >= 0; i-- {
		in.fake(xproto.KeyRelease, byte(codes[i]), 0, 0)
	}
}

// Type types syms one after the other.
func (in *Injector) Type(ctx context.Context, syms []keysym.Keysym) error {
	for i, sym := range syms {
		if i%256 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		codes, err := in.KeyDown([]keysym.Keysym{sym})
		if err != nil {
			return err
		}
		in.KeyUp(codes)
	}
	return nil
}

// Sync waits until the server has processed everything sent so far.
func (in *Injector) Sync() error {
	if _, err := xproto.GetInputFocus(in.c).Reply(); err != nil {
		return fmt.Errorf("X server: %w", err)
	}
	return nil
}

// Pointer returns the pointer position on the root window.
func (in *Injector) Pointer() (x, y int, err error) {
	r, err := xproto.QueryPointer(in.c, in.root).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("query pointer: %w", err)
	}
	return int(r.RootX), int(r.RootY), nil
}
