// Package resize changes the size of a running X screen with RandR 1.2, as
// `xrandr --output ... --mode WxH` would: it finds or creates a mode of the
// size, gives it to the screen's output, and sets the CRTC and the screen
// size in an order where the CRTC always fits inside the screen.
//
// Xtigervnc accepts any size up to 32768x32768 this way and tells its VNC
// viewers (DesktopSize / ExtendedDesktopSize). Xvfb only goes down from the
// size it was started with.
package resize

import (
	"errors"
	"fmt"
	"math"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/randr"
	"github.com/jezek/xgb/xproto"
)

// UnsupportedError is a size the X server cannot take, with the reason.
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return e.Reason }

func unsupported(format string, args ...any) error {
	return &UnsupportedError{Reason: fmt.Sprintf(format, args...)}
}

// Size reads the root window's current size.
func Size(c *xgb.Conn, root xproto.Window) (w, h int, err error) {
	g, err := xproto.GetGeometry(c, xproto.Drawable(root)).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("read screen size: %w", err)
	}
	return int(g.Width), int(g.Height), nil
}

// Screen resizes the screen of root to w x h pixels, keeping dpi dots per
// inch. c must have the RANDR extension set up (xconn.Dial does).
func Screen(c *xgb.Conn, root xproto.Window, w, h, dpi int) error {
	c.ExtLock.RLock()
	_, ok := c.Extensions["RANDR"]
	c.ExtLock.RUnlock()
	if !ok {
		return unsupported("the X server has no RandR extension, so its screen cannot be resized")
	}
	v, err := randr.QueryVersion(c, 1, 2).Reply()
	if err != nil {
		return fmt.Errorf("RandR version: %w", err)
	}
	if v.MajorVersion < 1 || v.MajorVersion == 1 && v.MinorVersion < 2 {
		return unsupported("the X server speaks RandR %d.%d; resizing needs 1.2", v.MajorVersion, v.MinorVersion)
	}
	rng, err := randr.GetScreenSizeRange(c, root).Reply()
	if err != nil {
		return fmt.Errorf("RandR screen size range: %w", err)
	}
	if w < int(rng.MinWidth) || h < int(rng.MinHeight) || w > int(rng.MaxWidth) || h > int(rng.MaxHeight) {
		return unsupported("the X server takes screen sizes from %dx%d to %dx%d, not %dx%d",
			rng.MinWidth, rng.MinHeight, rng.MaxWidth, rng.MaxHeight, w, h)
	}
	// A configuration read just before it is changed can be overtaken by
	// another client's change; the server then says so and it is read again.
	for attempt := 0; ; attempt++ {
		err := apply(c, root, w, h, dpi)
		if errors.Is(err, errStale) && attempt < 3 {
			continue
		}
		return err
	}
}

var errStale = errors.New("RandR configuration changed meanwhile")

func apply(c *xgb.Conn, root xproto.Window, w, h, dpi int) error {
	res, err := randr.GetScreenResourcesCurrent(c, root).Reply()
	if err != nil {
		return fmt.Errorf("RandR screen resources: %w", err)
	}
	output, info, err := pickOutput(c, res)
	if err != nil {
		return err
	}
	crtc := info.Crtc
	if crtc == 0 {
		if len(info.Crtcs) == 0 {
			return unsupported("the X server's output %s has no CRTC to show a screen on", info.Name)
		}
		crtc = info.Crtcs[0]
	}
	mode, err := findMode(c, root, res, output, info, w, h)
	if err != nil {
		return err
	}
	curW, curH, err := Size(c, root)
	if err != nil {
		return err
	}
	// Grow first so the new mode fits; shrink after the CRTC has, so the
	// CRTC never lies outside the screen (which the server refuses) and
	// never needs switching off.
	if w > curW || h > curH {
		if err := setScreenSize(c, root, max(w, curW), max(h, curH), dpi); err != nil {
			return err
		}
	}
	r, err := randr.SetCrtcConfig(c, crtc, xproto.TimeCurrentTime, res.ConfigTimestamp,
		0, 0, mode, randr.RotationRotate0, []randr.Output{output}).Reply()
	if err != nil {
		return unsupported("the X server refused a %dx%d mode: %v", w, h, err)
	}
	switch r.Status {
	case randr.SetConfigSuccess:
	case randr.SetConfigInvalidConfigTime, randr.SetConfigInvalidTime:
		return errStale
	default:
		return unsupported("the X server refused a %dx%d mode (RandR status %d)", w, h, r.Status)
	}
	if err := turnOffOutside(c, res, crtc, w, h); err != nil {
		return err
	}
	if w != max(w, curW) || h != max(h, curH) {
		return setScreenSize(c, root, w, h, dpi)
	}
	return nil
}

// pickOutput chooses the output the screen is shown on: the first connected
// one with a CRTC, else the first connected one, else the first.
func pickOutput(c *xgb.Conn, res *randr.GetScreenResourcesCurrentReply) (randr.Output, *randr.GetOutputInfoReply, error) {
	if len(res.Outputs) == 0 {
		return 0, nil, unsupported("the X server has no RandR output to resize")
	}
	var best *randr.GetOutputInfoReply
	var bestID randr.Output
	rank := func(o *randr.GetOutputInfoReply) int {
		switch {
		case o.Connection == randr.ConnectionConnected && o.Crtc != 0:
			return 2
		case o.Connection == randr.ConnectionConnected:
			return 1
		}
		return 0
	}
	for _, id := range res.Outputs {
		o, err := randr.GetOutputInfo(c, id, res.ConfigTimestamp).Reply()
		if err != nil {
			return 0, nil, fmt.Errorf("RandR output info: %w", err)
		}
		if best == nil || rank(o) > rank(best) {
			best, bestID = o, id
		}
	}
	return bestID, best, nil
}

// findMode returns a mode of exactly w x h that output can use, creating it
// and adding it to the output when needed.
func findMode(c *xgb.Conn, root xproto.Window, res *randr.GetScreenResourcesCurrentReply, output randr.Output, info *randr.GetOutputInfoReply, w, h int) (randr.Mode, error) {
	onOutput := make(map[randr.Mode]bool, len(info.Modes))
	for _, m := range info.Modes {
		onOutput[randr.Mode(m)] = true
	}
	var found randr.Mode
	for _, m := range res.Modes {
		if int(m.Width) != w || int(m.Height) != h {
			continue
		}
		if onOutput[randr.Mode(m.Id)] {
			return randr.Mode(m.Id), nil
		}
		if found == 0 {
			found = randr.Mode(m.Id)
		}
	}
	if found == 0 {
		name := fmt.Sprintf("%dx%d", w, h)
		mi := modeInfo(w, h)
		mi.NameLen = uint16(len(name))
		r, err := randr.CreateMode(c, root, mi, name).Reply()
		if err != nil {
			return 0, unsupported("the X server cannot create a %dx%d mode: %v", w, h, err)
		}
		found = r.Mode
	}
	if err := randr.AddOutputModeChecked(c, output, found).Check(); err != nil {
		return 0, unsupported("the X server cannot give output %s a %dx%d mode: %v", info.Name, w, h, err)
	}
	return found, nil
}

// modeInfo is a 60 Hz mode of w x h with reduced-blanking timings; a
// virtual server ignores the timings, but they are kept plausible for any
// client that reads them.
func modeInfo(w, h int) randr.ModeInfo {
	htotal, vtotal := w+160, h+35
	return randr.ModeInfo{
		Width: uint16(w), Height: uint16(h),
		DotClock:   uint32(htotal * vtotal * 60),
		HsyncStart: uint16(w + 48), HsyncEnd: uint16(w + 80), Htotal: uint16(htotal),
		VsyncStart: uint16(h + 3), VsyncEnd: uint16(h + 9), Vtotal: uint16(vtotal),
		ModeFlags: randr.ModeFlagHsyncPositive | randr.ModeFlagVsyncNegative,
	}
}

// turnOffOutside switches off any other CRTC that would lie outside a w x h
// screen, which the server would otherwise refuse to shrink to.
func turnOffOutside(c *xgb.Conn, res *randr.GetScreenResourcesCurrentReply, keep randr.Crtc, w, h int) error {
	for _, id := range res.Crtcs {
		if id == keep {
			continue
		}
		ci, err := randr.GetCrtcInfo(c, id, res.ConfigTimestamp).Reply()
		if err != nil {
			return fmt.Errorf("RandR CRTC info: %w", err)
		}
		if ci.Mode == 0 || int(ci.X)+int(ci.Width) <= w && int(ci.Y)+int(ci.Height) <= h {
			continue
		}
		r, err := randr.SetCrtcConfig(c, id, xproto.TimeCurrentTime, res.ConfigTimestamp, 0, 0, 0, randr.RotationRotate0, nil).Reply()
		if err != nil {
			return fmt.Errorf("RandR switch off CRTC: %w", err)
		}
		if r.Status != randr.SetConfigSuccess {
			return errStale
		}
	}
	return nil
}

func setScreenSize(c *xgb.Conn, root xproto.Window, w, h, dpi int) error {
	mmW, mmH := millimetres(w, dpi), millimetres(h, dpi)
	if err := randr.SetScreenSizeChecked(c, root, uint16(w), uint16(h), mmW, mmH).Check(); err != nil {
		return unsupported("the X server refused a %dx%d screen: %v", w, h, err)
	}
	return nil
}

func millimetres(px, dpi int) uint32 {
	if dpi <= 0 {
		dpi = 96
	}
	return uint32(math.Round(float64(px) * 25.4 / float64(dpi)))
}

// Watch asks for an event on c whenever the screen of root changes size; a
// server without RandR never changes size, and Watch does nothing.
func Watch(c *xgb.Conn, root xproto.Window) error {
	c.ExtLock.RLock()
	_, ok := c.Extensions["RANDR"]
	c.ExtLock.RUnlock()
	if !ok {
		return nil
	}
	if _, err := randr.QueryVersion(c, 1, 2).Reply(); err != nil {
		return fmt.Errorf("RandR version: %w", err)
	}
	if err := randr.SelectInputChecked(c, root, randr.NotifyMaskScreenChange).Check(); err != nil {
		return fmt.Errorf("RandR select input: %w", err)
	}
	return nil
}

// IsChange reports whether ev is the event Watch asks for.
func IsChange(ev xgb.Event) bool {
	_, ok := ev.(randr.ScreenChangeNotifyEvent)
	return ok
}
