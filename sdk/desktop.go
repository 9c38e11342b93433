package deskgrid

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"google.golang.org/protobuf/proto"
)

// PrimarySelection picks the PRIMARY selection (the mouse selection) in
// Clipboard and SetClipboard; the default is CLIPBOARD.
func PrimarySelection() ClipboardOption {
	return func(s *displayv1.Selection) { *s = displayv1.Selection_SELECTION_PRIMARY }
}

// ClipboardOption tunes Clipboard and SetClipboard.
type ClipboardOption func(*displayv1.Selection)

func selectionFrom(opts []ClipboardOption) displayv1.Selection {
	sel := displayv1.Selection_SELECTION_CLIPBOARD
	for _, o := range opts {
		o(&sel)
	}
	return sel
}

// Clipboard returns the text a program on the session's desktop copied
// (CLIPBOARD, or PRIMARY with PrimarySelection); "" when nothing is there.
func (s *Session) Clipboard(ctx context.Context, opts ...ClipboardOption) (string, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: s.GetId(), Selection: selectionFrom(opts)})
	if err != nil {
		return "", wrap(err)
	}
	return resp.GetText(), nil
}

// SetClipboard puts text (at most 1 MiB) on the session's clipboard, for
// its programs to paste.
func (s *Session) SetClipboard(ctx context.Context, text string, opts ...ClipboardOption) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.display.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: s.GetId(), Text: text, Selection: selectionFrom(opts)})
	return wrap(err)
}

// ClipboardImage returns the PNG image a program on the session's desktop
// copied (asked for as image/png; at most 8 MiB); nil when nothing is
// there. A selection holding no image is FailedPrecondition.
func (s *Session) ClipboardImage(ctx context.Context, opts ...ClipboardOption) ([]byte, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: s.GetId(), Selection: selectionFrom(opts), MimeType: "image/png"})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetData(), nil
}

// SetClipboardImage puts a PNG image (at most 8 MiB) on the session's
// clipboard, offered as image/png, for its programs to paste.
func (s *Session) SetClipboardImage(ctx context.Context, png []byte, opts ...ClipboardOption) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.display.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: s.GetId(), MimeType: "image/png", Data: png, Selection: selectionFrom(opts)})
	return wrap(err)
}

// Windows lists the session's top-level windows, bottom to top.
func (s *Session) Windows(ctx context.Context) ([]*displayv1.Window, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.ListWindows(ctx, &displayv1.ListWindowsRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetWindows(), nil
}

// ActivateWindow raises a window and gives it the focus; it returns the
// window afterwards.
func (s *Session) ActivateWindow(ctx context.Context, id uint32) (*displayv1.Window, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.ActivateWindow(ctx, &displayv1.ActivateWindowRequest{SessionId: s.GetId(), WindowId: id})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetWindow(), nil
}

// CloseWindow asks a window's program to close it and reports whether the
// window is gone.
func (s *Session) CloseWindow(ctx context.Context, id uint32) (bool, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.CloseWindow(ctx, &displayv1.CloseWindowRequest{SessionId: s.GetId(), WindowId: id})
	if err != nil {
		return false, wrap(err)
	}
	return resp.GetClosed(), nil
}

// MoveWindow puts a window's client area at (x, y) with the given size
// (0 keeps it); it returns the window afterwards.
func (s *Session) MoveWindow(ctx context.Context, id uint32, x, y, width, height int) (*displayv1.Window, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.MoveWindow(ctx, &displayv1.MoveWindowRequest{SessionId: s.GetId(), WindowId: id,
		Geometry: &displayv1.Rect{X: int32(x), Y: int32(y), Width: int32(width), Height: int32(height)}})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetWindow(), nil
}

// SetWindowState minimises, maximises, makes full-screen or restores
// (WINDOW_STATE_NORMAL) a window; it needs a window manager.
func (s *Session) SetWindowState(ctx context.Context, id uint32, state displayv1.WindowState) (*displayv1.Window, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.SetWindowState(ctx, &displayv1.SetWindowStateRequest{SessionId: s.GetId(), WindowId: id, State: state})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetWindow(), nil
}

// Paste puts text (at most 1 MiB) on the clipboard, presses ctrl+v and
// puts back what the clipboard held once the focused program read it:
// fast and exact for long or non-Latin text, where Type goes key by key.
func (s *Session) Paste(ctx context.Context, text string) error {
	_, err := s.Act(ctx, &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: text, Paste: true}}})
	return err
}

// Applications lists the applications the session's image offers (its
// desktop entries shown in menus), by name.
func (s *Session) Applications(ctx context.Context) ([]*sandboxv1.Application, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.sandbox.ListApplications(ctx, &sandboxv1.ListApplicationsRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetApplications(), nil
}

// Launched is what Launch started and the window that appeared.
type Launched struct {
	Application *sandboxv1.Application
	Process     *sandboxv1.Process
	// Window is the first top-level window that appeared after the launch,
	// or, when the program handed its files to the application's running
	// instance and ended, that instance's window.
	Window *displayv1.Window
}

// Launch starts an application by its id or name (as Applications lists
// them), with optional files or URLs, and waits for its window: the first
// new top-level window on the session's screen. ctx bounds the wait (a
// minute when it has no deadline).
func (s *Session) Launch(ctx context.Context, application string, args ...string) (*Launched, error) {
	return s.LaunchWith(ctx, &sandboxv1.LaunchApplicationRequest{Application: application, Args: args})
}

// LaunchWith launches as Launch does, with a request described in full:
// the lease token of the caller's input lease while input leases are in
// use (a launch is input, fenced as the display's actions are: a stale or
// missing token while a lease is held is a FailedPrecondition error). Its
// session id is the session's own.
func (s *Session) LaunchWith(ctx context.Context, req *sandboxv1.LaunchApplicationRequest) (*Launched, error) {
	req = proto.Clone(req).(*sandboxv1.LaunchApplicationRequest)
	req.SessionId = s.GetId()
	return s.startAndWait(ctx, func(ctx context.Context) (*sandboxv1.Application, *sandboxv1.Process, error) {
		resp, err := s.c.sandbox.LaunchApplication(ctx, req)
		return resp.GetApplication(), resp.GetProcess(), err
	})
}

// startAndWait makes start's call, which starts a program, and waits for
// the program's window: the first titled top-level window that was not
// there before. ctx bounds the wait (a minute when it has no deadline).
// What started is returned with an error when no window came.
func (s *Session) startAndWait(ctx context.Context, start func(context.Context) (*sandboxv1.Application, *sandboxv1.Process, error)) (*Launched, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	seen, err := s.windowIDs(ctx)
	if err != nil {
		return nil, err
	}
	app, p, err := start(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	out := &Launched{Application: app, Process: p}
	out.Window, err = s.newWindow(ctx, seen, app, p)
	return out, err
}

// windowIDs are the ids of the session's windows now, for newWindow.
func (s *Session) windowIDs(ctx context.Context) (map[uint32]bool, error) {
	before, err := s.Windows(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[uint32]bool{}
	for _, w := range before {
		seen[w.GetId()] = true
	}
	return seen, nil
}

// newWindow waits for the window of what app's process p started: a
// titled top-level window not in seen whose process is p or whose class
// names the application (the desktop's own windows, a panel starting late,
// are not taken for it); failing that for a few seconds, the first titled
// window not in seen (a program started through a launcher script, whose
// class says nothing of it), or, once p has ended with no new window, the
// application's window that was already there (handedWindow).
func (s *Session) newWindow(ctx context.Context, seen map[uint32]bool, app *sandboxv1.Application, p *sandboxv1.Process) (*displayv1.Window, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	anyAfter := time.Now().Add(5 * time.Second)
	for {
		ws, err := s.Windows(ctx)
		if err != nil {
			return nil, err
		}
		var first *displayv1.Window
		for _, w := range ws {
			if seen[w.GetId()] || w.GetTitle() == "" {
				continue
			}
			if ofApplication(w, app, p) {
				return w, nil
			}
			if first == nil {
				first = w
			}
		}
		if time.Now().After(anyAfter) {
			if first != nil {
				return first, nil
			}
			// A program that handed its file or URL to one already running
			// (a new tab of the browser, of the editor) and ended shows it in
			// that program's window.
			if ended, err := s.processEnded(ctx, p); err != nil {
				return nil, err
			} else if ended {
				if w := handedWindow(ws, app); w != nil {
					return w, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s started (process %s) but no window of it appeared: %w", app.GetId(), p.GetProcessId(), ctx.Err())
		case <-tick.C:
		}
	}
}

// processEnded tells whether the session's process p has ended.
func (s *Session) processEnded(ctx context.Context, p *sandboxv1.Process) (bool, error) {
	ps, err := s.Processes(ctx)
	if err != nil {
		return false, err
	}
	for _, q := range ps {
		if q.GetProcessId() == p.GetProcessId() {
			return q.GetState() == sandboxv1.ProcessState_PROCESS_STATE_EXITED, nil
		}
	}
	return false, nil
}

// handedWindow is the window of app among ws that shows what a program
// handed to app's running instance: app's focused titled window, else its
// first titled one; nil when app has none.
func handedWindow(ws []*displayv1.Window, app *sandboxv1.Application) *displayv1.Window {
	var first *displayv1.Window
	for _, w := range ws {
		if w.GetTitle() == "" || !ofApplication(w, app, nil) {
			continue
		}
		if w.GetFocused() {
			return w
		}
		if first == nil {
			first = w
		}
	}
	return first
}

// ofApplication tells whether window w is one of app's, started as p: its
// process is p, or its class or instance names the program app runs or
// the application's id (org.xfce.mousepad: mousepad).
func ofApplication(w *displayv1.Window, app *sandboxv1.Application, p *sandboxv1.Process) bool {
	if w.GetPid() != 0 && int64(w.GetPid()) == p.GetPid() {
		return true
	}
	var names []string
	if f := strings.Fields(app.GetExec()); len(f) > 0 {
		names = append(names, path.Base(f[0]))
	}
	id := strings.TrimSuffix(app.GetId(), ".desktop")
	names = append(names, id[strings.LastIndex(id, ".")+1:])
	for _, n := range names {
		n = strings.ToLower(n)
		if len(n) < 3 {
			continue
		}
		for _, c := range []string{w.GetClass(), w.GetInstance()} {
			c = strings.ToLower(c)
			if len(c) >= 3 && (strings.Contains(c, n) || strings.Contains(n, c)) {
				return true
			}
		}
	}
	return false
}

// Opened is what Open opened, with which application, and the window
// that appeared.
type Opened struct {
	// Target is the absolute path in the session, or the URL.
	Target string
	// ContentType is the type the application was chosen for.
	ContentType string
	Application *sandboxv1.Application
	Process     *sandboxv1.Process
	// Window is the first top-level window that appeared after the open,
	// or, when the program handed the target to the application's running
	// instance (a new browser tab) and ended, that instance's window.
	Window *displayv1.Window
}

// Open opens a file of the session (a path relative to its user's home, or
// absolute) or an http, https or file URL with the session's default
// application for it, as a double click in its file manager would, and
// waits for the window that shows it. ctx bounds the wait (a minute when
// it has no deadline). A path the session does not have is ErrNotFound,
// a type no application opens ErrFailedPrecondition.
func (s *Session) Open(ctx context.Context, target string) (*Opened, error) {
	return s.OpenWith(ctx, &sandboxv1.OpenRequest{Target: target})
}

// OpenWith opens as Open does, with a request described in full (the lease
// token of the caller's input lease while input leases are in use, as for
// LaunchWith). Its session id is the session's own.
func (s *Session) OpenWith(ctx context.Context, req *sandboxv1.OpenRequest) (*Opened, error) {
	req = proto.Clone(req).(*sandboxv1.OpenRequest)
	req.SessionId = s.GetId()
	var resp *sandboxv1.OpenResponse
	l, err := s.startAndWait(ctx, func(ctx context.Context) (_ *sandboxv1.Application, _ *sandboxv1.Process, err error) {
		resp, err = s.c.sandbox.Open(ctx, req)
		return resp.GetApplication(), resp.GetProcess(), err
	})
	if l == nil {
		return nil, err
	}
	return &Opened{Target: resp.GetTarget(), ContentType: resp.GetContentType(), Application: l.Application, Process: l.Process, Window: l.Window}, err
}
