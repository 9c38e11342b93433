package display

import (
	"context"
	"errors"
	"fmt"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/resize"
	"github.com/deskgrid/deskgrid/services/display/internal/windows"
)

// ResizeDisplay changes the size of a session's screen.
func (s *Service) ResizeDisplay(ctx context.Context, req *displayv1.ResizeDisplayRequest) (*displayv1.ResizeDisplayResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := validateSize(int(req.GetWidth()), int(req.GetHeight())); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := s.resize(ctx, d, int(req.GetWidth()), int(req.GetHeight())); err != nil {
		return nil, s.toStatus(ctx, d.explain(err))
	}
	return &displayv1.ResizeDisplayResponse{Display: d.proto()}, nil
}

// resize changes d's screen to w x h. It holds input and screenshots back
// meanwhile, so no action is checked against one size and lands on another
// and no grab reads a half-changed screen.
func (s *Service) resize(ctx context.Context, d *display, w, h int) error {
	d.inputMu.Lock()
	defer d.inputMu.Unlock()
	if err := d.usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d.shotMu.Lock()
	defer d.shotMu.Unlock()
	oldW, oldH := d.size()
	if oldW == w && oldH == h {
		return nil
	}
	if err := resize.Screen(d.conn, d.root, w, h, d.screenDPI); err != nil {
		var un *resize.UnsupportedError
		if errors.As(err, &un) {
			return fmt.Errorf("cannot resize the display of session %s to %dx%d: %s: %w", d.sessionID, w, h, un.Reason, errCannotResize)
		}
		return fmt.Errorf("resize display: %w", err)
	}
	// Read back rather than assumed: the server has the last word.
	d.sizeStale.Store(true)
	gotW, gotH := d.size()
	if gotW != w || gotH != h {
		return fmt.Errorf("cannot resize the display of session %s to %dx%d: the X server kept %dx%d: %w", d.sessionID, w, h, gotW, gotH, errCannotResize)
	}
	d.followSize()
	s.log.InfoContext(ctx, "display resized", "session_id", d.sessionID,
		"from_width", oldW, "from_height", oldH, "width", w, "height", h)
	return nil
}

// protoWindows lists the display's top-level windows for GetDisplay.
func (d *display) protoWindows() ([]*displayv1.Window, error) {
	ws, err := d.windows.List()
	if err != nil {
		return nil, d.explain(fmt.Errorf("list windows: %w", err))
	}
	out := make([]*displayv1.Window, 0, len(ws))
	for _, w := range ws {
		out = append(out, protoWindow(w))
	}
	return out, nil
}

func protoWindow(w windows.Window) *displayv1.Window {
	return &displayv1.Window{
		Id:         uint32(w.ID),
		Title:      w.Title,
		Class:      w.Class,
		Instance:   w.Instance,
		Geometry:   &displayv1.Rect{X: int32(w.X), Y: int32(w.Y), Width: int32(w.Width), Height: int32(w.Height)},
		Focused:    w.Focused,
		Mapped:     w.Mapped,
		Pid:        w.PID,
		Minimized:  w.Minimized,
		Maximized:  w.Maximized,
		Fullscreen: w.Fullscreen,
	}
}
