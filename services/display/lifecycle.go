package display

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/display/internal/resize"
	"github.com/deskgrid/deskgrid/services/display/internal/selection"
	"github.com/deskgrid/deskgrid/services/display/internal/windows"
	"github.com/deskgrid/deskgrid/services/display/internal/xauthority"
	"github.com/deskgrid/deskgrid/services/display/internal/xconn"
	"github.com/deskgrid/deskgrid/services/display/internal/xinput"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
)

func (s *Service) sessionDir(sessionID string) string {
	return filepath.Join(s.cfg.RuntimeDir, "displays", sessionID)
}

// displaySpec is a validated create request.
type displaySpec struct {
	sessionID                 string
	tenant                    string
	width, height, depth, dpi int
}

// create starts a display for spec.
func (s *Service) create(ctx context.Context, spec displaySpec) (*display, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if _, ok := s.displays[spec.sessionID]; ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("session %s already has a display: %w", spec.sessionID, errAlreadyExists)
	}
	if len(s.displays) >= s.cfg.MaxDisplays {
		s.mu.Unlock()
		return nil, fmt.Errorf("this node runs %d displays, its limit: %w", len(s.displays), errExhausted)
	}
	e := &entry{ready: make(chan struct{}), tenant: spec.tenant}
	s.displays[spec.sessionID] = e
	s.mu.Unlock()

	d := s.takeWarm(ctx, spec)
	// Tells the caller's metrics whether the warm pool served it.
	_ = grpc.SetTrailer(ctx, metadata.Pairs("deskgrid-metric-warm", strconv.FormatBool(d != nil)))
	var err error
	if d == nil {
		d, err = s.start(ctx, spec)
	}
	if err == nil {
		s.log.InfoContext(ctx, "display started", "session_id", spec.sessionID,
			"x_display", d.xDisplay(), "pid", d.server.PID, "width", spec.width, "height", spec.height)
	}
	e.d, e.err = d, err
	if err != nil {
		s.mu.Lock()
		delete(s.displays, spec.sessionID)
		s.mu.Unlock()
	}
	close(e.ready)
	return d, err
}

func (s *Service) start(ctx context.Context, spec displaySpec) (*display, error) {
	return s.launch(ctx, s.sessionDir(spec.sessionID), spec)
}

// launch starts an X server whose files live in dir and connects to it.
func (s *Service) launch(ctx context.Context, dir string, spec displaySpec) (_ *display, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	// A directory left from an earlier display of this session holds nothing
	// live (Reconcile or Delete would have dealt with a live one).
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clear session dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create session dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	cookie, err := xauthority.NewCookie()
	if err != nil {
		return nil, err
	}
	xauthPath := filepath.Join(dir, xauthFile)
	if err := xauthority.Write(xauthPath, cookie); err != nil {
		return nil, err
	}
	srv, err := xserver.Start(ctx, xserver.Options{
		Binary:       s.cfg.XvfbPath,
		Width:        spec.width,
		Height:       spec.height,
		Depth:        spec.depth,
		DPI:          spec.dpi,
		GLX:          s.cfg.GLX,
		AuthFile:     xauthPath,
		LogFile:      filepath.Join(dir, logFile),
		FirstDisplay: s.cfg.FirstDisplay,
		Displays:     s.cfg.MaxDisplays + s.cfg.WarmDisplays,
		StopTimeout:  s.cfg.StopTimeout,
		VNCSocket:    filepath.Join(dir, vncSocket),
		DesktopName:  "deskgrid",
	})
	if err != nil {
		if errors.Is(err, xserver.ErrNoFreeDisplay) {
			return nil, fmt.Errorf("%w: %w", errExhausted, err)
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = srv.Stop(context.Background())
		}
	}()
	d := &display{
		sessionID: spec.sessionID,
		tenant:    spec.tenant,
		width:     spec.width,
		height:    spec.height,
		depth:     spec.depth,
		dpi:       spec.dpi,
		created:   time.Now().UTC(),
		dir:       dir,
		xauthPath: xauthPath,
		server:    srv,
	}
	d.setOwner(spec.sessionID)
	if err := writeMeta(dir, d.metaLocked()); err != nil {
		return nil, err
	}
	conn, err := xconn.Dial(ctx, srv.Display, cookie)
	if err != nil {
		return nil, err
	}
	screen, err := capture.ScreenOf(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	input, err := xinput.New(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	watch, err := capture.Watch(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	lister, err := windows.New(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	sels, err := selection.New(conn, screen.Root)
	if err != nil {
		conn.Close()
		return nil, err
	}
	d.selections = sels
	d.screenDPI = spec.dpi
	if d.screenDPI == 0 {
		d.screenDPI = screenDPI(conn)
	}
	// A program on the display may resize it too (xrandr); the size is
	// read again when the server says it changed.
	if err := resize.Watch(conn, screen.Root); err != nil {
		conn.Close()
		return nil, err
	}
	// The cursor overlay needs XFIXES; screenshots go on without it.
	d.cursorOK = capture.InitCursor(conn) == nil
	d.conn, d.screen, d.input, d.watch, d.windows = conn, screen, input, watch, lister
	d.root = screen.Root
	if err := d.watchNewWindows(); err != nil {
		conn.Close()
		return nil, err
	}
	d.done, d.finish = context.WithCancel(context.Background())
	d.events = make(chan struct{})
	go s.readEvents(d)
	go s.watchServer(d)
	s.log.DebugContext(ctx, "X server started", "session_id", spec.sessionID,
		"x_display", d.xDisplay(), "pid", srv.PID, "width", spec.width, "height", spec.height)
	return d, nil
}

// watchServer notices an X server that exits without being asked to, so
// requests fail with a clear message instead of a broken connection.
func (s *Service) watchServer(d *display) {
	<-d.server.Exited()
	if d.stopping.Load() {
		return
	}
	d.dead.Store(true)
	s.log.Error("X server exited unexpectedly", "session_id", d.owner(),
		"x_display", d.xDisplay(), "pid", d.server.PID)
}

// readEvents consumes the connection's events, which xgb would otherwise
// queue until it blocks: damage for settling, keymap changes for input.
func (s *Service) readEvents(d *display) {
	defer close(d.events)
	for {
		ev, xerr := d.conn.WaitForEvent()
		if ev == nil && xerr == nil {
			return
		}
		if xerr != nil {
			s.log.Debug("X error", "session_id", d.owner(), "err", xerr.Error())
			continue
		}
		if d.watch.Handle(ev) || d.selections.Handle(ev) || d.handleNewWindow(ev) {
			continue
		}
		if resize.IsChange(ev) {
			d.sizeStale.Store(true)
			continue
		}
		if m, ok := ev.(xproto.MappingNotifyEvent); ok && m.Request == xproto.MappingKeyboard {
			d.input.MappingChanged()
		}
	}
}

// remove stops a session's display and removes its files. A session without
// a display is not an error, and neither is another tenant's: that display
// is left alone, the answer the same as for a session without one.
func (s *Service) remove(ctx context.Context, sessionID string) error {
	s.mu.Lock()
	e, ok := s.displays[sessionID]
	s.mu.Unlock()
	if ok && !s.tenancy.Sees(ctx, e.tenant) {
		return nil
	}
	if ok {
		select {
		case <-e.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
		// Another remove may have taken it, or a new display replaced it.
		if s.displays[sessionID] == e {
			delete(s.displays, sessionID)
		} else {
			e = nil
		}
		s.mu.Unlock()
	}
	if e != nil && e.d != nil {
		return s.stop(ctx, e.d)
	}
	if !ok {
		// Nothing running here; still clear files a failed start or an
		// earlier process may have left, unless another tenant's.
		if m, err := readMeta(s.sessionDir(sessionID)); err == nil && !s.tenancy.Sees(ctx, m.Tenant) {
			return nil
		}
		_, err := s.claimLeftover(ctx, sessionID)
		return err
	}
	return nil
}

func (s *Service) stop(ctx context.Context, d *display) error {
	// A recording ends first, with the screen's last frame, and its video
	// is finalised: deleting a session never cuts one off.
	s.stopRecording(ctx, d)
	d.stopping.Store(true)
	d.finish()
	d.inputMu.Lock()
	d.conn.Close()
	d.inputMu.Unlock()
	err := d.server.Stop(ctx)
	d.shotMu.Lock()
	if d.shared != nil {
		_ = d.shared.Close()
		d.shared = nil
	}
	d.noShared = true
	d.shotMu.Unlock()
	// The server is gone, so the reader sees the connection end at once;
	// the bound is for a server that would not die.
	select {
	case <-d.events:
	case <-time.After(5 * time.Second):
	}
	if rerr := os.RemoveAll(d.dir); rerr != nil && err == nil {
		err = fmt.Errorf("remove session dir: %w", rerr)
	}
	s.log.InfoContext(ctx, "display stopped", "session_id", d.sessionID, "x_display", d.xDisplay())
	return err
}
