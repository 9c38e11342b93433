package display

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jezek/xgb/xproto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/windows"
)

// windowSettle bounds the wait for a window change to show: the window
// manager and the program act on it asynchronously.
const windowSettle = 2 * time.Second

// ListWindows lists the session's top-level windows.
func (s *Service) ListWindows(ctx context.Context, req *displayv1.ListWindowsRequest) (*displayv1.ListWindowsResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := d.usable(); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	ws, err := d.protoWindows()
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &displayv1.ListWindowsResponse{Windows: ws}, nil
}

// ActivateWindow raises and focuses a window.
func (s *Service) ActivateWindow(ctx context.Context, req *displayv1.ActivateWindowRequest) (*displayv1.ActivateWindowResponse, error) {
	w, _, err := s.changeWindow(ctx, req.GetSessionId(), req.GetWindowId(), req.GetLeaseToken(),
		func(d *display, _ windows.Window) error { return d.windows.Activate(xproto.Window(req.GetWindowId())) },
		func(w windows.Window) bool { return w.Focused && !w.Minimized })
	if err != nil {
		return nil, err
	}
	return &displayv1.ActivateWindowResponse{Window: w}, nil
}

// CloseWindow asks a window's program to close it.
func (s *Service) CloseWindow(ctx context.Context, req *displayv1.CloseWindowRequest) (*displayv1.CloseWindowResponse, error) {
	_, gone, err := s.changeWindow(ctx, req.GetSessionId(), req.GetWindowId(), req.GetLeaseToken(),
		func(d *display, _ windows.Window) error {
			return d.windows.Close(xproto.Window(req.GetWindowId()), req.GetForce())
		},
		nil)
	if err != nil {
		return nil, err
	}
	return &displayv1.CloseWindowResponse{Closed: gone}, nil
}

// MoveWindow moves and resizes a window's client area.
func (s *Service) MoveWindow(ctx context.Context, req *displayv1.MoveWindowRequest) (*displayv1.MoveWindowResponse, error) {
	g := req.GetGeometry()
	if g == nil {
		return nil, s.toStatus(ctx, invalidf("geometry is required"))
	}
	x, y, gw, gh := int(g.GetX()), int(g.GetY()), int(g.GetWidth()), int(g.GetHeight())
	if gw < 0 || gh < 0 || gw > maxWidth || gh > maxHeight {
		return nil, s.toStatus(ctx, invalidf("geometry size %dx%d is outside 0x0 to %dx%d", gw, gh, maxWidth, maxHeight))
	}
	if x < -maxWidth || x > maxWidth || y < -maxHeight || y > maxHeight {
		return nil, s.toStatus(ctx, invalidf("geometry position %d,%d is outside ±%d,±%d", x, y, maxWidth, maxHeight))
	}
	at := func(w windows.Window) bool {
		return w.X == x && w.Y == y && (gw == 0 || w.Width == gw) && (gh == 0 || w.Height == gh)
	}
	var before windows.Window
	w, _, err := s.changeWindow(ctx, req.GetSessionId(), req.GetWindowId(), req.GetLeaseToken(),
		func(d *display, now windows.Window) error {
			before = now
			return d.windows.MoveResize(xproto.Window(req.GetWindowId()), x, y, gw, gh)
		},
		func(w windows.Window) bool {
			return at(w) || w.X != before.X || w.Y != before.Y || w.Width != before.Width || w.Height != before.Height
		})
	if err != nil {
		return nil, err
	}
	// A window manager may place the client area off by the border the
	// window had before it took the window; one corrected move puts it
	// exactly where asked.
	if dx, dy := int(w.GetGeometry().GetX())-x, int(w.GetGeometry().GetY())-y; (dx != 0 || dy != 0) && abs(dx) <= 32 && abs(dy) <= 32 {
		w, _, err = s.changeWindow(ctx, req.GetSessionId(), req.GetWindowId(), req.GetLeaseToken(),
			func(d *display, _ windows.Window) error {
				return d.windows.MoveResize(xproto.Window(req.GetWindowId()), x-dx, y-dy, gw, gh)
			}, at)
		if err != nil {
			return nil, err
		}
	}
	return &displayv1.MoveWindowResponse{Window: w}, nil
}

// SetWindowState minimises, maximises, makes full-screen or restores a window.
func (s *Service) SetWindowState(ctx context.Context, req *displayv1.SetWindowStateRequest) (*displayv1.SetWindowStateResponse, error) {
	var st windows.State
	var want func(windows.Window) bool
	switch req.GetState() {
	case displayv1.WindowState_WINDOW_STATE_NORMAL:
		st = windows.Normal
		want = func(w windows.Window) bool { return !w.Minimized && !w.Maximized && !w.Fullscreen && w.Mapped }
	case displayv1.WindowState_WINDOW_STATE_MINIMIZED:
		st = windows.Minimized
		want = func(w windows.Window) bool { return w.Minimized }
	case displayv1.WindowState_WINDOW_STATE_MAXIMIZED:
		st = windows.Maximized
		want = func(w windows.Window) bool { return w.Maximized && !w.Minimized && !w.Fullscreen }
	case displayv1.WindowState_WINDOW_STATE_FULLSCREEN:
		st = windows.Fullscreen
		want = func(w windows.Window) bool { return w.Fullscreen && !w.Minimized }
	default:
		return nil, s.toStatus(ctx, invalidf("state must be one of WINDOW_STATE_NORMAL, _MINIMIZED, _MAXIMIZED, _FULLSCREEN"))
	}
	w, _, err := s.changeWindow(ctx, req.GetSessionId(), req.GetWindowId(), req.GetLeaseToken(),
		func(d *display, now windows.Window) error {
			return d.windows.SetState(xproto.Window(req.GetWindowId()), st, now.Minimized)
		}, want)
	if err != nil {
		return nil, err
	}
	return &displayv1.SetWindowStateResponse{Window: w}, nil
}

// changeWindow validates the call, finds the window among the listed
// top-level ones (no other window of the display can be touched), makes
// the change as input under the lease, and waits (bounded) until the
// window shows done, or is gone when done is nil. It returns the window
// as it is then, and whether it is gone; errors are statuses.
func (s *Service) changeWindow(ctx context.Context, sessionID string, id uint32, token int64,
	change func(*display, windows.Window) error, done func(windows.Window) bool,
) (*displayv1.Window, bool, error) {
	if err := validateSessionID(sessionID); err != nil {
		return nil, false, s.toStatus(ctx, err)
	}
	if id == 0 {
		return nil, false, s.toStatus(ctx, invalidf("window_id is required"))
	}
	if token < 0 {
		return nil, false, s.toStatus(ctx, invalidf("lease_token %d is negative", token))
	}
	d, err := s.get(ctx, sessionID)
	if err != nil {
		return nil, false, s.toStatus(ctx, err)
	}
	err = func() error {
		d.inputMu.Lock()
		defer d.inputMu.Unlock()
		if err := d.usable(); err != nil {
			return err
		}
		w, ok, err := d.findWindow(id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("session %s has no window %#x (ListWindows lists its windows): %w", sessionID, id, errNotFound)
		}
		if err := d.fence(token); err != nil {
			return err
		}
		if err := change(d, w); err != nil {
			switch {
			case errors.Is(err, windows.ErrNoWindowManager):
				return fmt.Errorf("session %s: %w; start it with a window manager (openbox): %w", sessionID, err, errNoWindowManager)
			case errors.Is(err, windows.ErrCannotClose):
				return fmt.Errorf("window %#x of session %s: %w without a window manager; pass force to disconnect its program: %w", id, sessionID, err, errNoWindowManager)
			}
			return d.explain(fmt.Errorf("change window %#x: %w", id, err))
		}
		return nil
	}()
	if err != nil {
		return nil, false, s.toStatus(ctx, err)
	}
	// Wait for the change to show, bounded; what it is then is the answer.
	// The window manager updates the state before the geometry, so the
	// window must also look the same on two looks in a row.
	deadline := time.Now().Add(windowSettle)
	var prev windows.Window
	for {
		w, ok, err := d.findWindow(id)
		if err != nil {
			return nil, false, s.toStatus(ctx, err)
		}
		switch {
		case !ok && done == nil:
			return nil, true, nil
		case !ok && time.Now().After(deadline):
			return nil, false, s.toStatus(ctx, fmt.Errorf("window %#x of session %s went away: %w", id, sessionID, errNotFound))
		case !ok:
			// A window manager starting up takes windows out of the
			// listing for a moment while it frames them.
		case done != nil && done(w) && w == prev:
			return protoWindow(w), false, nil
		case time.Now().After(deadline):
			return protoWindow(w), false, nil
		}
		prev = w
		if err := sleep(ctx, 30*time.Millisecond); err != nil {
			return nil, false, s.toStatus(ctx, err)
		}
	}
}

// findWindow finds a listed top-level window by id.
func (d *display) findWindow(id uint32) (windows.Window, bool, error) {
	ws, err := d.windows.List()
	if err != nil {
		return windows.Window{}, false, d.explain(fmt.Errorf("list windows: %w", err))
	}
	for _, w := range ws {
		if uint32(w.ID) == id {
			return w, true, nil
		}
	}
	return windows.Window{}, false, nil
}
