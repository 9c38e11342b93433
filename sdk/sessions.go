package deskgrid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"iter"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// Sessions is the session API.
type Sessions struct{ c *Client }

// CreateOptions describe a new session. Zero fields take the server's defaults.
type CreateOptions struct {
	Width, Height int
	TTL           time.Duration
	IdleTimeout   time.Duration
	Labels        map[string]string
	NodeSelector  map[string]string
	// Autostart programs run on the session's desktop, such as "xterm".
	Autostart []string
	// Workspace is a folder on the node used as the session's files.
	Workspace string
	// Image is the OCI image the session runs ("" for the default desktop);
	// a node without it pulls it.
	Image string
	// RequestID makes a retried create return the first session; New picks
	// one when empty.
	RequestID string
}

// Session is one desktop. Its fields are the state when it was last read.
type Session struct {
	*sessionv1.Session
	c *Client
}

func (c *Client) wrapSession(s *sessionv1.Session) *Session { return &Session{Session: s, c: c} }

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Create starts a session and returns once its desktop answers.
func (s *Sessions) Create(ctx context.Context, o CreateOptions) (*Session, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &sessionv1.CreateSessionRequest{
		Display:      &sessionv1.DisplaySpec{},
		Labels:       o.Labels,
		NodeSelector: o.NodeSelector,
		Autostart:    o.Autostart,
		Workspace:    o.Workspace,
		Image:        o.Image,
		RequestId:    o.RequestID,
	}
	if o.Width != 0 {
		req.Display.Width = proto.Int32(int32(o.Width))
	}
	if o.Height != 0 {
		req.Display.Height = proto.Int32(int32(o.Height))
	}
	if o.TTL > 0 {
		req.Ttl = durationpb.New(o.TTL)
	}
	if o.IdleTimeout > 0 {
		req.IdleTimeout = durationpb.New(o.IdleTimeout)
	}
	if req.RequestId == "" {
		req.RequestId = newRequestID()
	}
	resp, err := s.c.session.CreateSession(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return s.c.wrapSession(resp.GetSession()), nil
}

// Get returns a session by id.
func (s *Sessions) Get(ctx context.Context, id string) (*Session, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.session.GetSession(ctx, &sessionv1.GetSessionRequest{SessionId: id})
	if err != nil {
		return nil, wrap(err)
	}
	return s.c.wrapSession(resp.GetSession()), nil
}

// ListOptions filter List.
type ListOptions struct {
	States []sessionv1.SessionState
	Labels map[string]string
	// PageSize is how many sessions one call fetches (default 100).
	PageSize int
}

// List yields every session that matches, fetching pages as it goes.
func (s *Sessions) List(ctx context.Context, o ListOptions) iter.Seq2[*Session, error] {
	return func(yield func(*Session, error) bool) {
		req := &sessionv1.ListSessionsRequest{States: o.States, Labels: o.Labels, PageSize: int32(o.PageSize)}
		for {
			cctx, cancel := bounded(ctx)
			resp, err := s.c.session.ListSessions(cctx, req)
			cancel()
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			for _, ss := range resp.GetSessions() {
				if !yield(s.c.wrapSession(ss), nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}

// Delete stops a session and frees what it used.
func (s *Sessions) Delete(ctx context.Context, id string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.session.DeleteSession(ctx, &sessionv1.DeleteSessionRequest{SessionId: id})
	return wrap(err)
}

// Delete stops the session.
func (s *Session) Delete(ctx context.Context) error { return s.c.Sessions.Delete(ctx, s.GetId()) }

// Refresh reads the session again.
func (s *Session) Refresh(ctx context.Context) error {
	n, err := s.c.Sessions.Get(ctx, s.GetId())
	if err != nil {
		return err
	}
	s.Session = n.Session
	return nil
}

// Watch yields the session now and after every change, until it ends or ctx does.
func (s *Session) Watch(ctx context.Context) iter.Seq2[*sessionv1.Session, error] {
	return func(yield func(*sessionv1.Session, error) bool) {
		st, err := s.c.session.WatchSession(ctx, &sessionv1.WatchSessionRequest{SessionId: s.GetId()})
		if err != nil {
			yield(nil, wrap(err))
			return
		}
		for {
			resp, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, wrap(err))
				return
			}
			if resp.GetSession() == nil {
				// An autostart program's end (process_exited); the
				// session's events and history carry it too.
				continue
			}
			if !yield(resp.GetSession(), nil) {
				return
			}
		}
	}
}

// Keepalive resets the session's idle timer.
func (s *Session) Keepalive(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.session.KeepaliveSession(ctx, &sessionv1.KeepaliveSessionRequest{SessionId: s.GetId()})
	return wrap(err)
}

// ScreenshotOptions tune Screenshot.
type ScreenshotOptions struct {
	// JPEG instead of PNG, with Quality 1-100 (0: 80).
	JPEG    bool
	Quality int
}

// Screenshot returns the session's screen as PNG (or JPEG) bytes.
func (s *Session) Screenshot(ctx context.Context, o ...ScreenshotOptions) ([]byte, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &displayv1.ScreenshotRequest{SessionId: s.GetId()}
	if len(o) > 0 && o[0].JPEG {
		req.Format = displayv1.ImageFormat_IMAGE_FORMAT_JPEG
		req.Quality = int32(o[0].Quality)
	}
	resp, err := s.c.display.Screenshot(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetData(), nil
}

// Act performs input actions in order.
func (s *Session) Act(ctx context.Context, actions ...*displayv1.Action) (*displayv1.PerformActionsResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: s.GetId(), Actions: actions})
	return resp, wrap(err)
}

// Click clicks the left button at (x, y).
func (s *Session) Click(ctx context.Context, x, y int) error {
	_, err := s.Act(ctx, &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{
		At: &displayv1.Point{X: int32(x), Y: int32(y)}, Button: displayv1.MouseButton_MOUSE_BUTTON_LEFT, Clicks: 1,
	}}})
	return err
}

// MoveMouse moves the pointer to (x, y).
func (s *Session) MoveMouse(ctx context.Context, x, y int) error {
	_, err := s.Act(ctx, &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{X: int32(x), Y: int32(y)}}}})
	return err
}

// Type types text, any Unicode.
func (s *Session) Type(ctx context.Context, text string) error {
	_, err := s.Act(ctx, &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: text}}})
	return err
}

// Key presses a chord such as "ctrl+shift+t" or "Return".
func (s *Session) Key(ctx context.Context, chord string) error {
	_, err := s.Act(ctx, &displayv1.Action{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: chord}}})
	return err
}

// Scroll turns the wheel at (x, y): dy > 0 scrolls down.
func (s *Session) Scroll(ctx context.Context, x, y, dy int) error {
	_, err := s.Act(ctx, &displayv1.Action{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{At: &displayv1.Point{X: int32(x), Y: int32(y)}, DeltaY: int32(dy)}}})
	return err
}

// ExecResult is how a command ended and what it printed.
type ExecResult struct {
	Stdout, Stderr []byte
	ExitCode       int
	Signal         string
	TimedOut       bool
}

// Exec runs argv in the session's sandbox and waits for it.
func (s *Session) Exec(ctx context.Context, argv ...string) (*ExecResult, error) {
	return s.ExecWith(ctx, &sandboxv1.ExecRequest{Argv: argv})
}

// ExecWith runs a command described in full (env, cwd, stdin, timeout, and
// AsRoot: root of the session's own user namespace, never the host's).
func (s *Session) ExecWith(ctx context.Context, req *sandboxv1.ExecRequest) (*ExecResult, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req = proto.Clone(req).(*sandboxv1.ExecRequest)
	req.SessionId = s.GetId()
	st, err := s.c.sandbox.Exec(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	res := &ExecResult{}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil, &Error{Code: 14, Message: "exec stream ended without an exit status"}
		}
		if err != nil {
			return nil, wrap(err)
		}
		switch o := m.GetOutput().(type) {
		case *sandboxv1.ExecResponse_Stdout:
			res.Stdout = append(res.Stdout, o.Stdout...)
		case *sandboxv1.ExecResponse_Stderr:
			res.Stderr = append(res.Stderr, o.Stderr...)
		case *sandboxv1.ExecResponse_Exit:
			res.ExitCode = int(o.Exit.GetExitCode())
			res.Signal = o.Exit.GetSignal()
			res.TimedOut = o.Exit.GetTimedOut()
			return res, nil
		}
	}
}

// Files is the session's file API; paths are relative to its home.
func (s *Session) Files() *Files { return &Files{s: s} }

// Files reads and writes a session's files.
type Files struct{ s *Session }

// Read returns a file's content.
func (f *Files) Read(ctx context.Context, path string) ([]byte, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := f.s.c.sandbox.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: f.s.GetId(), Path: path})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetContent(), nil
}

// Write creates or replaces a file (mode 0 means 0644).
func (f *Files) Write(ctx context.Context, path string, content []byte, mode uint32) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := f.s.c.sandbox.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: f.s.GetId(), Path: path, Content: content, Mode: mode})
	return wrap(err)
}

// List lists a directory ("" for the home).
func (f *Files) List(ctx context.Context, dir string) ([]*sandboxv1.FileInfo, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := f.s.c.sandbox.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: f.s.GetId(), Path: dir})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetFiles(), nil
}

// Suspend suspends the session: its processes stop where they are (mode
// SUSPEND_MODE_FREEZE keeps them in memory, SUSPEND_MODE_HIBERNATE writes
// them to disk; SUSPEND_MODE_UNSPECIFIED lets the server choose).
func (s *Session) Suspend(ctx context.Context, mode sessionv1.SuspendMode) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.session.SuspendSession(ctx, &sessionv1.SuspendSessionRequest{SessionId: s.GetId(), Mode: mode})
	if err != nil {
		return wrap(err)
	}
	s.Session = resp.GetSession()
	return nil
}

// Resume resumes a suspended session.
func (s *Session) Resume(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.session.ResumeSession(ctx, &sessionv1.ResumeSessionRequest{SessionId: s.GetId()})
	if err != nil {
		return wrap(err)
	}
	s.Session = resp.GetSession()
	return nil
}
