package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/atspi"
)

// Bounds of an accessibility tree read.
const (
	a11yDefaultDepth = 12
	a11yMaxDepth     = 64
	a11yDefaultNodes = 2000
	a11yMaxNodes     = 20000
	// a11yTimeout bounds a whole read: an application that stops answering
	// must not hold the call.
	a11yTimeout = 30 * time.Second
)

// accessibilityTree reads the AT-SPI2 tree from the session's own
// accessibility bus.
func (s *Service) accessibilityTree(ctx context.Context, req *sandboxv1.GetAccessibilityTreeRequest) (*sandboxv1.GetAccessibilityTreeResponse, error) {
	lim := atspi.Limits{
		MaxDepth:    int(req.GetMaxDepth()),
		MaxNodes:    int(req.GetMaxNodes()),
		OnlyVisible: req.GetOnlyVisible(),
		Application: req.GetApplication(),
		Root:        req.GetRoot(),
	}
	switch {
	case lim.MaxDepth < 0 || lim.MaxDepth > a11yMaxDepth:
		return nil, invalidf("max_depth %d: want 0 (the default, %d) to %d", lim.MaxDepth, a11yDefaultDepth, a11yMaxDepth)
	case lim.MaxNodes < 0 || lim.MaxNodes > a11yMaxNodes:
		return nil, invalidf("max_nodes %d: want 0 (the default, %d) to %d", lim.MaxNodes, a11yDefaultNodes, a11yMaxNodes)
	case len(lim.Application) > 256:
		return nil, invalidf("application is %d bytes; at most 256", len(lim.Application))
	}
	if lim.MaxDepth == 0 {
		lim.MaxDepth = a11yDefaultDepth
	}
	if lim.MaxNodes == 0 {
		lim.MaxNodes = a11yDefaultNodes
	}
	if len(lim.Root) > maxNodeID {
		return nil, invalidf("root is %d bytes; at most %d", len(lim.Root), maxNodeID)
	}
	if lim.Root != "" {
		if _, _, err := atspi.ParseID(lim.Root); err != nil {
			return nil, invalidf("root: %v", err)
		}
	}
	scopes := 0
	for _, set := range []bool{lim.Root != "", req.GetWindowId() != 0, req.GetFocusedWindow(), req.GetPid() != 0} {
		if set {
			scopes++
		}
	}
	if scopes > 1 {
		return nil, invalidf("root, window_id, focused_window and pid each choose what to read: give at most one")
	}
	switch req.GetFormat() {
	case sandboxv1.AccessibilityFormat_ACCESSIBILITY_FORMAT_UNSPECIFIED, sandboxv1.AccessibilityFormat_ACCESSIBILITY_FORMAT_JSON:
	case sandboxv1.AccessibilityFormat_ACCESSIBILITY_FORMAT_OSWORLD_XML:
		lim.Export = true
	default:
		return nil, invalidf("format %d: want ACCESSIBILITY_FORMAT_JSON or ACCESSIBILITY_FORMAT_OSWORLD_XML", req.GetFormat())
	}
	id := req.GetSessionId()
	var tree *atspi.Tree
	err := s.withA11yBus(ctx, id, "the accessibility tree was not read", func(ctx context.Context, c a11yCall) error {
		switch {
		case req.GetWindowId() != 0 || req.GetFocusedWindow():
			root, err := s.windowRoot(ctx, c, req)
			if err != nil {
				return err
			}
			lim.Root = root
		case req.GetPid() != 0:
			pids, err := s.sessionPids(ctx, c.box)
			if err != nil {
				return err
			}
			procs, err := atspi.ReadProcesses(pids, c.bus.PID)
			if err != nil {
				return err
			}
			family, ok := procs.Family(req.GetPid())
			if !ok {
				return failf(errNotFound, "session %q runs no process %d: it has exited, or is not the session's (ids as the session's programs see them)", id, req.GetPid())
			}
			lim.PIDs = family
		}
		var err error
		tree, err = atspi.Walk(ctx, c.conn, lim)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &sandboxv1.GetAccessibilityTreeResponse{NodeCount: int32(tree.Nodes), Truncated: tree.Truncated}
	if lim.Export {
		out.OsworldXml = atspi.OSWorldXML(tree)
		if len(out.OsworldXml) > maxExportBytes {
			return nil, failf(errNoRoom, "session %q: the tree as XML is %d MiB, more than %d MiB: read less of it (max_nodes, max_depth, only_visible, a window)", id, len(out.OsworldXml)>>20, maxExportBytes>>20)
		}
		return out, nil
	}
	for _, a := range tree.Applications {
		out.Applications = append(out.Applications, nodeProto(a))
	}
	return out, nil
}

// maxExportBytes bounds a tree exported as XML, well within a gRPC
// message.
const maxExportBytes = 32 << 20

// windowRoot finds the accessible that stands for the window a request
// names (window_id, or the focused one) among the display's windows.
func (s *Service) windowRoot(ctx context.Context, c a11yCall, req *sandboxv1.GetAccessibilityTreeRequest) (string, error) {
	id := req.GetSessionId()
	if s.windows == nil {
		return "", failf(errPrecondition, "session %q: this node's sandbox service does not reach its display (it runs apart from it), which knows the windows: read the tree by root or pid", id)
	}
	ws, err := s.windows(ctx, id)
	if err != nil {
		// The display's answer, as a kind of this service: it knows no
		// such session, or could not answer.
		kind := errUnavailable
		if status.Code(err) == codes.NotFound {
			kind = errNotFound
		}
		return "", failf(kind, "session %q's windows: %s", id, status.Convert(err).Message())
	}
	var win *displayv1.Window
	for _, w := range ws {
		if req.GetFocusedWindow() && w.GetFocused() || req.GetWindowId() != 0 && w.GetId() == req.GetWindowId() {
			win = w
		}
	}
	switch {
	case win == nil && req.GetFocusedWindow():
		return "", failf(errPrecondition, "session %q: no window has the input focus", id)
	case win == nil:
		return "", failf(errNotFound, "session %q shows no window %d (list its windows for current ids)", id, req.GetWindowId())
	}
	g := win.GetGeometry()
	root, err := atspi.FindWindow(ctx, c.conn, atspi.Window{
		ID: win.GetId(), PID: win.GetPid(), Title: win.GetTitle(), Focused: win.GetFocused(),
		X: g.GetX(), Y: g.GetY(), Width: g.GetWidth(), Height: g.GetHeight(),
	})
	if errors.Is(err, atspi.ErrNoWindow) {
		return "", failf(errPrecondition, "session %q: %v: its program offers no accessibility, or has not registered the window yet", id, err)
	}
	return root, err
}

// maxNodeID bounds a node id: a bus name and an object path.
const maxNodeID = 1024

// maxSetText bounds the text an act puts in a field.
const maxSetText = 1 << 20

// actOnAccessible acts on one node of the session's accessibility tree.
func (s *Service) actOnAccessible(ctx context.Context, req *sandboxv1.ActOnAccessibleRequest) (*sandboxv1.ActOnAccessibleResponse, error) {
	id := req.GetId()
	switch {
	case id == "":
		return nil, invalidf("id: want a node's id, as the accessibility tree gives it")
	case len(id) > maxNodeID:
		return nil, invalidf("id is %d bytes; at most %d", len(id), maxNodeID)
	}
	if _, _, err := atspi.ParseID(id); err != nil {
		return nil, invalidf("%v", err)
	}
	var op atspi.Op
	switch o := req.GetOperation().(type) {
	case *sandboxv1.ActOnAccessibleRequest_Action:
		if o.Action == "" || len(o.Action) > 256 {
			return nil, invalidf("action: want the name of one of the node's actions (click, press, activate...)")
		}
		op.Action = o.Action
	case *sandboxv1.ActOnAccessibleRequest_Text:
		if len(o.Text) > maxSetText {
			return nil, invalidf("text is %d bytes; at most %d", len(o.Text), maxSetText)
		}
		if !utf8.ValidString(o.Text) {
			return nil, invalidf("text is not UTF-8")
		}
		op.Text = &o.Text
	case *sandboxv1.ActOnAccessibleRequest_Focus:
		if !o.Focus {
			return nil, invalidf("focus: false asks for nothing; want true")
		}
		op.Focus = true
	default:
		return nil, invalidf("want one of action, text or focus")
	}
	if req.GetLeaseToken() < 0 {
		return nil, invalidf("lease_token %d is negative", req.GetLeaseToken())
	}
	var n *atspi.Node
	err := s.withA11yBus(ctx, req.GetSessionId(), "the act was not done", func(ctx context.Context, c a11yCall) error {
		// An act is input: fenced by the input lease, as display actions are.
		return s.asInput(ctx, req.GetSessionId(), req.GetLeaseToken(), func() (err error) {
			n, err = atspi.Act(ctx, c.conn, id, op)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	out := &sandboxv1.ActOnAccessibleResponse{}
	if n != nil {
		out.Node = nodeProto(n)
	}
	return out, nil
}

// a11yCall is a session's accessibility bus, connected.
type a11yCall struct {
	conn *dbus.Conn
	bus  *atspi.Bus
	box  *box
}

// withA11yBus connects to a session's accessibility bus and runs f on it,
// bounded by a11yTimeout and ended by the sandbox's deletion; its errors
// come back as kinds toStatus knows (errors.go).
func (s *Service) withA11yBus(ctx context.Context, sessionID, late string, f func(context.Context, a11yCall) error) error {
	b, release, err := s.acquire(ctx, sessionID)
	if err != nil {
		return err
	}
	defer release()
	if b.isFrozen() {
		return failf(errFrozen, "session %q is suspended: its applications cannot answer until it is resumed", b.id)
	}
	pids, err := s.sessionPids(ctx, b)
	if err != nil {
		return err
	}
	bus, err := atspi.Find(pids)
	if errors.Is(err, atspi.ErrNoBus) {
		// at-spi-bus-launcher may start the bus only once asked for it.
		bus, err = s.wakeA11yBus(ctx, b)
	}
	if errors.Is(err, atspi.ErrNoBus) {
		return failf(errPrecondition, "session %q runs no accessibility bus (the desktop image starts one; a session on the node's own programs or a plain image has none)", b.id)
	}
	if err != nil {
		return err
	}
	conn, err := bus.Dial()
	if err != nil {
		return failf(errUnavailable, "session %q: %v", b.id, err)
	}
	defer conn.Close()
	wctx, cancel := context.WithTimeout(ctx, a11yTimeout)
	defer cancel()
	// A sandbox deleted meanwhile ends the call.
	defer context.AfterFunc(b.kill, cancel)()
	err = f(wctx, a11yCall{conn: conn, bus: bus, box: b})
	var unsupported *atspi.UnsupportedError
	var declined *atspi.DeclinedError
	var known *kindError
	switch {
	case err == nil:
		return nil
	case errinfo.Reason(err) != "", errors.As(err, &known):
		// Refused with a reason (the input lease), or of a kind f chose: as it is.
		return err
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return failf(errNoAnswer, "session %q: %s within %v (an application does not answer)", b.id, late, a11yTimeout)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, atspi.ErrNoNode):
		return failf(errNotFound, "session %q: %v (read the tree again for current ids)", b.id, err)
	case errors.As(err, &unsupported), errors.As(err, &declined):
		return failf(errPrecondition, "session %q: %v", b.id, err)
	case atspi.IsNoBus(err):
		return failf(errPrecondition, "session %q: its accessibility bus has no registry (%v)", b.id, err)
	default:
		return failf(errUnavailable, "session %q: %v", b.id, err)
	}
}

func nodeProto(n *atspi.Node) *sandboxv1.AccessibleNode {
	p := &sandboxv1.AccessibleNode{
		Id: n.ID, Role: n.Role, Name: n.Name, Description: n.Description,
		States: n.States, Actions: n.Actions, Text: n.Text, ChildCount: int32(n.ChildCount),
	}
	if n.Bounds != nil {
		p.Bounds = &sandboxv1.AccessibleBounds{X: n.Bounds.X, Y: n.Bounds.Y, Width: n.Bounds.Width, Height: n.Bounds.Height}
	}
	if n.HasValue {
		v := n.Value
		p.Value = &v
	}
	for _, c := range n.Children {
		p.Children = append(p.Children, nodeProto(c))
	}
	return p
}

// sessionPids are the host process ids of everything running in a
// sandbox: its cgroup's, else those sharing its container's pid namespace.
func (s *Service) sessionPids(ctx context.Context, b *box) ([]int, error) {
	if b.cg != nil {
		pids, err := b.cg.Pids()
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", b.id, err)
		}
		return pids, nil
	}
	if b.img == nil {
		return nil, failf(errPrecondition, "session %q: this node runs sandboxes without cgroups, whose programs cannot be told apart from the node's", b.id)
	}
	st, err := s.runtime().State(ctx, b.cid)
	if err != nil {
		return nil, err
	}
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", st.Pid))
	if err != nil {
		return nil, failf(errPrecondition, "session %q's container is not running", b.id)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && ns == want {
			out = append(out, pid)
		}
	}
	return out, nil
}

// wakeA11yBus asks the session's D-Bus for the accessibility bus, then
// waits a little for its daemon to appear among the session's processes.
func (s *Service) wakeA11yBus(ctx context.Context, b *box) (*atspi.Bus, error) {
	pids, err := s.sessionPids(ctx, b)
	if err != nil {
		return nil, err
	}
	sb, err := atspi.FindSessionBus(pids)
	if err != nil {
		return nil, err
	}
	conn, err := sb.Dial()
	if err != nil {
		return nil, atspi.ErrNoBus
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	werr := atspi.WakeA11yBus(wctx, conn)
	conn.Close()
	if werr != nil {
		return nil, atspi.ErrNoBus
	}
	// GetAddress answers once the daemon runs; it shows among the
	// processes at once, but a loaded node gets a few tries.
	for range 20 {
		if pids, err = s.sessionPids(ctx, b); err != nil {
			return nil, err
		}
		bus, err := atspi.Find(pids)
		if !errors.Is(err, atspi.ErrNoBus) {
			return bus, err
		}
		select {
		case <-wctx.Done():
			return nil, atspi.ErrNoBus
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, atspi.ErrNoBus
}

// Bounds of awaitA11yBus, from the desktop program's start.
const (
	// a11yStartWait bounds how long a program waits for the desktop's
	// accessibility bus.
	a11yStartWait = 5 * time.Second
	// a11yWakeAfter: with no bus up by then it is asked for (a desktop whose
	// launcher starts it only when asked).
	a11yWakeAfter = time.Second
)

// awaitA11yBus holds a program (argv) about to start in b while the
// session's desktop brings up its accessibility bus, until the bus runs:
// a program that looks for the bus once, at its start (LibreOffice, GTK
// programs), never joins a bus that comes after it, and create returns as
// the desktop program starts. Only the programs started after the image's
// desktop program (org.deskgrid.session) wait, in an image with
// at-spi2-core, at most a11yStartWait from the desktop's start; once the
// bus runs, or that time is over, no program waits again. A bus still
// missing after a11yWakeAfter is asked for, as a tree read would.
func (s *Service) awaitA11yBus(ctx context.Context, b *box, argv []string) {
	if b.a11ySettled.Load() {
		return
	}
	desktop := b.img.Config.Labels[SessionLabel]
	if desktop == "" {
		b.a11ySettled.Store(true)
		return
	}
	if isDesktop(argv, desktop) {
		b.desktopStart.CompareAndSwap(0, time.Now().UnixNano())
		return
	}
	started := b.desktopStart.Load()
	if started == 0 {
		return
	}
	// Lstat: a link the session planted is not followed on the node.
	if _, err := os.Lstat(filepath.Join(b.merged(), "usr/libexec/at-spi-bus-launcher")); err != nil {
		b.a11ySettled.Store(true)
		return
	}
	since := time.Unix(0, started)
	woken := false
	for {
		pids, err := s.sessionPids(ctx, b)
		if err != nil {
			return
		}
		if _, err := atspi.Find(pids); err == nil {
			b.a11ySettled.Store(true)
			return
		}
		waited := time.Since(since)
		if waited > a11yStartWait {
			s.log.WarnContext(ctx, "the desktop's accessibility bus did not come up; programs start without it", "session_id", b.id, "waited", waited.Round(time.Millisecond))
			b.a11ySettled.Store(true)
			return
		}
		if !woken && waited > a11yWakeAfter {
			woken = true
			if _, err := s.wakeA11yBus(ctx, b); err == nil {
				b.a11ySettled.Store(true)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// isDesktop reports whether argv starts the desktop program at path:
// itself, or the shell that runs it (session.DesktopArgv: sh -c '... exec
// $DESKGRID_SESSION').
func isDesktop(argv []string, path string) bool {
	return len(argv) > 0 && argv[0] == path ||
		len(argv) > 2 && argv[1] == "-c" && strings.Contains(argv[2], "$DESKGRID_SESSION")
}
