package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// addDesktopTools registers the clipboard and window tools.
func addDesktopTools(s *mcp.Server, t *tools) {
	addTool(s, t, &mcp.Tool{Name: "get_clipboard", Description: "Read the text on a session's clipboard (or the mouse selection with selection=primary)."}, t.getClipboard)
	addTool(s, t, &mcp.Tool{Name: "set_clipboard", Description: "Put text (any Unicode, at most 1 MiB) on a session's clipboard, for its programs to paste with ctrl+v."}, t.setClipboard)
	addTool(s, t, &mcp.Tool{Name: "list_windows", Description: "List a session's open windows: id, title, class, pid, geometry, focused, minimized, maximized."}, t.listWindows)
	addTool(s, t, &mcp.Tool{Name: "accessibility_tree", Description: "Read the accessibility tree of a session's desktop (applications, windows, buttons, links, text fields...), one node a line: role, \"name\", [states], @x,y WxH in screen pixels (click the middle to press it), (actions), = text. With role and/or name, only the matching nodes; with window_id, focused_window or pid, only that window's or process's part."}, t.accessibilityTree)
	addTool(s, t, &mcp.Tool{Name: "accessible_act", Description: "Act on a node of the accessibility tree through its application, without the mouse or keyboard: action performs one of its actions by name (click, press, activate...), text replaces an editable text's contents, focus gives it the keyboard focus; exactly one. Name the node by id (the tree with role or name shows ids), or by role and/or name (and application) when they find exactly one node. Returns the node afterwards. Pass lease_token while input leases are in use."}, t.accessibleAct)
	addTool(s, t, &mcp.Tool{Name: "list_applications", Description: "List the applications a session's desktop offers (its menu entries): id, name, comment."}, t.listApplications)
	addTool(s, t, &mcp.Tool{Name: "launch", Description: "Start an application by id or name (as list_applications gives them), optionally with files or URLs to open, and wait for its window; returns the window."}, t.launch)
	addTool(s, t, &mcp.Tool{Name: "open", Description: "Open a file of the session (a path relative to the home directory, or absolute) or an http, https or file URL with the session's default application for it, as a double click in its file manager would, and wait for its window; returns the application, the content type it was chosen for and the window."}, t.open)
	addTool(s, t, &mcp.Tool{Name: "window", Description: "Act on a window by id: activate, close, minimize, maximize, fullscreen, restore, or move (x, y and optionally width, height). Returns the window afterwards."}, t.window)
}

type clipboardIn struct {
	SessionID string `json:"session_id"`
	Selection string `json:"selection,omitempty" jsonschema:"clipboard (default) or primary"`
}

type clipboardOut struct {
	Text string `json:"text"`
}

func clipboardOpts(sel string) ([]deskgrid.ClipboardOption, error) {
	switch sel {
	case "", "clipboard":
		return nil, nil
	case "primary":
		return []deskgrid.ClipboardOption{deskgrid.PrimarySelection()}, nil
	}
	return nil, fmt.Errorf("selection %q: want clipboard or primary", sel)
}

func (t *tools) getClipboard(ctx context.Context, _ *mcp.CallToolRequest, in clipboardIn) (*mcp.CallToolResult, clipboardOut, error) {
	opts, err := clipboardOpts(in.Selection)
	if err != nil {
		return nil, clipboardOut{}, err
	}
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, clipboardOut{}, err
	}
	text, err := s.Clipboard(ctx, opts...)
	if err != nil {
		return nil, clipboardOut{}, err
	}
	return nil, clipboardOut{Text: text}, nil
}

type setClipboardIn struct {
	SessionID  string `json:"session_id"`
	Text       string `json:"text"`
	Selection  string `json:"selection,omitempty" jsonschema:"clipboard (default) or primary"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

func (t *tools) setClipboard(ctx context.Context, _ *mcp.CallToolRequest, in setClipboardIn) (*mcp.CallToolResult, done, error) {
	opts, err := clipboardOpts(in.Selection)
	if err != nil {
		return nil, done{}, err
	}
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, done{}, err
	}
	if err := s.SetClipboard(leased(ctx, in.LeaseToken), in.Text, opts...); err != nil {
		return nil, done{}, err
	}
	return nil, done{OK: true}, nil
}

// WindowInfo is what the tools say about a window.
type WindowInfo struct {
	ID         uint32 `json:"id"`
	Title      string `json:"title"`
	Class      string `json:"class,omitempty"`
	PID        uint32 `json:"pid,omitempty"`
	X          int32  `json:"x"`
	Y          int32  `json:"y"`
	Width      int32  `json:"width"`
	Height     int32  `json:"height"`
	Focused    bool   `json:"focused"`
	Minimized  bool   `json:"minimized"`
	Maximized  bool   `json:"maximized"`
	Fullscreen bool   `json:"fullscreen"`
}

func windowInfo(w *displayv1.Window) WindowInfo {
	g := w.GetGeometry()
	return WindowInfo{
		ID: w.GetId(), Title: w.GetTitle(), Class: w.GetClass(), PID: w.GetPid(),
		X: g.GetX(), Y: g.GetY(), Width: g.GetWidth(), Height: g.GetHeight(),
		Focused: w.GetFocused(), Minimized: w.GetMinimized(), Maximized: w.GetMaximized(), Fullscreen: w.GetFullscreen(),
	}
}

type windowsOut struct {
	Windows []WindowInfo `json:"windows"`
}

func (t *tools) listWindows(ctx context.Context, _ *mcp.CallToolRequest, in sessionIn) (*mcp.CallToolResult, windowsOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, windowsOut{}, err
	}
	ws, err := s.Windows(ctx)
	if err != nil {
		return nil, windowsOut{}, err
	}
	out := windowsOut{Windows: []WindowInfo{}}
	for _, w := range ws {
		out.Windows = append(out.Windows, windowInfo(w))
	}
	return nil, out, nil
}

type windowIn struct {
	SessionID  string `json:"session_id"`
	WindowID   uint32 `json:"window_id"`
	Action     string `json:"action" jsonschema:"activate, close, minimize, maximize, fullscreen, restore or move"`
	X          int    `json:"x,omitempty"`
	Y          int    `json:"y,omitempty"`
	Width      int    `json:"width,omitempty" jsonschema:"move: new width; 0 keeps it"`
	Height     int    `json:"height,omitempty" jsonschema:"move: new height; 0 keeps it"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

type windowOut struct {
	// Closed: the window is gone (close).
	Closed bool        `json:"closed,omitempty"`
	Window *WindowInfo `json:"window,omitempty"`
}

func (t *tools) window(ctx context.Context, _ *mcp.CallToolRequest, in windowIn) (*mcp.CallToolResult, windowOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, windowOut{}, err
	}
	ctx = leased(ctx, in.LeaseToken)
	var w *displayv1.Window
	switch in.Action {
	case "activate":
		w, err = s.ActivateWindow(ctx, in.WindowID)
	case "close":
		closed, err := s.CloseWindow(ctx, in.WindowID)
		if err != nil {
			return nil, windowOut{}, err
		}
		return nil, windowOut{Closed: closed}, nil
	case "move":
		w, err = s.MoveWindow(ctx, in.WindowID, in.X, in.Y, in.Width, in.Height)
	case "minimize", "maximize", "fullscreen", "restore":
		st := map[string]displayv1.WindowState{
			"minimize": displayv1.WindowState_WINDOW_STATE_MINIMIZED, "maximize": displayv1.WindowState_WINDOW_STATE_MAXIMIZED,
			"fullscreen": displayv1.WindowState_WINDOW_STATE_FULLSCREEN, "restore": displayv1.WindowState_WINDOW_STATE_NORMAL,
		}[in.Action]
		w, err = s.SetWindowState(ctx, in.WindowID, st)
	default:
		return nil, windowOut{}, fmt.Errorf("action %q: want activate, close, minimize, maximize, fullscreen, restore or move", in.Action)
	}
	if err != nil {
		return nil, windowOut{}, err
	}
	info := windowInfo(w)
	return nil, windowOut{Window: &info}, nil
}

type accessibilityIn struct {
	SessionID   string `json:"session_id"`
	MaxDepth    int    `json:"max_depth,omitempty" jsonschema:"levels below each application (default 12, at most 64)"`
	MaxNodes    int    `json:"max_nodes,omitempty" jsonschema:"nodes at most (default 2000, at most 20000)"`
	OnlyVisible bool   `json:"only_visible,omitempty" jsonschema:"leave out what is not showing on the screen"`
	Application string `json:"application,omitempty" jsonschema:"only applications whose name contains this"`
	WindowID    uint32 `json:"window_id,omitempty" jsonschema:"only the subtree of this window (an id list_windows gives)"`
	Focused     bool   `json:"focused_window,omitempty" jsonschema:"only the subtree of the window with the input focus"`
	PID         uint32 `json:"pid,omitempty" jsonschema:"only the applications of this process (a window's pid) and those it started"`
	Role        string `json:"role,omitempty" jsonschema:"find: only nodes of this role (push button, entry, link, ...)"`
	Name        string `json:"name,omitempty" jsonschema:"find: only nodes whose name contains this (any case)"`
}

type accessibilityOut struct {
	Tree      string `json:"tree"`
	Nodes     int    `json:"nodes"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (t *tools) accessibilityTree(ctx context.Context, _ *mcp.CallToolRequest, in accessibilityIn) (*mcp.CallToolResult, accessibilityOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, accessibilityOut{}, err
	}
	opts := []deskgrid.AccessibilityOption{deskgrid.MaxDepth(in.MaxDepth), deskgrid.MaxNodes(in.MaxNodes), deskgrid.Application(in.Application)}
	if in.OnlyVisible {
		opts = append(opts, deskgrid.OnlyVisible())
	}
	if in.WindowID != 0 {
		opts = append(opts, deskgrid.OfWindow(in.WindowID))
	}
	if in.Focused {
		opts = append(opts, deskgrid.OfFocusedWindow())
	}
	if in.PID != 0 {
		opts = append(opts, deskgrid.OfProcess(in.PID))
	}
	tree, err := s.AccessibilityTree(ctx, opts...)
	if err != nil {
		return nil, accessibilityOut{}, err
	}
	out := accessibilityOut{Nodes: int(tree.GetNodeCount()), Truncated: tree.GetTruncated()}
	if in.Role != "" || in.Name != "" {
		found := deskgrid.FindAccessible(tree, in.Role, in.Name)
		flat := &sandboxv1.GetAccessibilityTreeResponse{}
		for _, n := range found {
			leaf := proto.Clone(n).(*sandboxv1.AccessibleNode)
			leaf.Children = nil
			flat.Applications = append(flat.Applications, leaf)
		}
		tree, out.Nodes = flat, len(found)
		// Found nodes carry their ids, for accessible_act.
		out.Tree = withIDs(found)
		return nil, out, nil
	}
	var b strings.Builder
	if err := deskgrid.WriteAccessibilityTree(&b, tree); err != nil {
		return nil, accessibilityOut{}, err
	}
	out.Tree = b.String()
	return nil, out, nil
}

// withIDs writes nodes one a line as the tree does, each followed by
// "id=" and its id.
func withIDs(nodes []*sandboxv1.AccessibleNode) string {
	var b strings.Builder
	for _, n := range nodes {
		leaf := proto.Clone(n).(*sandboxv1.AccessibleNode)
		leaf.Children = nil
		var line strings.Builder
		_ = deskgrid.WriteAccessibilityTree(&line, &sandboxv1.GetAccessibilityTreeResponse{Applications: []*sandboxv1.AccessibleNode{leaf}})
		fmt.Fprintf(&b, "%s id=%s\n", strings.TrimSuffix(line.String(), "\n"), n.GetId())
	}
	return b.String()
}

type accessibleActIn struct {
	SessionID   string  `json:"session_id"`
	ID          string  `json:"id,omitempty" jsonschema:"the node's id, as accessibility_tree shows it (id=...)"`
	Role        string  `json:"role,omitempty" jsonschema:"without id: the node of this role (push button, entry, ...)"`
	Name        string  `json:"name,omitempty" jsonschema:"without id: the node whose name contains this (any case)"`
	Application string  `json:"application,omitempty" jsonschema:"without id: look only in applications whose name contains this"`
	Action      string  `json:"action,omitempty" jsonschema:"perform this action of the node (click, press, activate, ...)"`
	Text        *string `json:"text,omitempty" jsonschema:"replace the node's editable text with this (empty clears it)"`
	Focus       bool    `json:"focus,omitempty" jsonschema:"give the node the keyboard focus"`
	LeaseToken  int64   `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

type accessibleActOut struct {
	// Node is the node afterwards, one line as the tree shows it; empty
	// when the act made it go away.
	Node string `json:"node"`
	ID   string `json:"id"`
}

func (t *tools) accessibleAct(ctx context.Context, _ *mcp.CallToolRequest, in accessibleActIn) (*mcp.CallToolResult, accessibleActOut, error) {
	var act deskgrid.AccessibleAct
	asked := 0
	if in.Action != "" {
		act, asked = deskgrid.DoAction(in.Action), asked+1
	}
	if in.Text != nil {
		act, asked = deskgrid.SetText(*in.Text), asked+1
	}
	if in.Focus {
		act, asked = deskgrid.Focus(), asked+1
	}
	if asked != 1 {
		return nil, accessibleActOut{}, fmt.Errorf("want exactly one of action, text or focus")
	}
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, accessibleActOut{}, err
	}
	id := in.ID
	if id == "" {
		if in.Role == "" && in.Name == "" {
			return nil, accessibleActOut{}, fmt.Errorf("want the node's id, or a role and/or name that find it")
		}
		tree, err := s.AccessibilityTree(ctx, deskgrid.Application(in.Application), deskgrid.MaxNodes(20000))
		if err != nil {
			return nil, accessibleActOut{}, err
		}
		found := deskgrid.FindAccessible(tree, in.Role, in.Name)
		if len(found) != 1 {
			return nil, accessibleActOut{}, fmt.Errorf("role %q and name %q find %d nodes, want one; give its id:\n%s", in.Role, in.Name, len(found), withIDs(found[:min(len(found), 20)]))
		}
		id = found[0].GetId()
	}
	n, err := s.ActOnAccessible(leased(ctx, in.LeaseToken), id, act)
	if err != nil {
		return nil, accessibleActOut{}, err
	}
	out := accessibleActOut{ID: id}
	if n != nil {
		out.Node = strings.TrimSuffix(withIDs([]*sandboxv1.AccessibleNode{n}), "\n")
	}
	return nil, out, nil
}

// ApplicationInfo is what the tools say about an application.
type ApplicationInfo struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Comment string `json:"comment,omitempty"`
}

type applicationsOut struct {
	Applications []ApplicationInfo `json:"applications"`
}

func (t *tools) listApplications(ctx context.Context, _ *mcp.CallToolRequest, in sessionIn) (*mcp.CallToolResult, applicationsOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, applicationsOut{}, err
	}
	apps, err := s.Applications(ctx)
	if err != nil {
		return nil, applicationsOut{}, err
	}
	out := applicationsOut{Applications: []ApplicationInfo{}}
	for _, a := range apps {
		out.Applications = append(out.Applications, ApplicationInfo{ID: a.GetId(), Name: a.GetName(), Comment: a.GetComment()})
	}
	return nil, out, nil
}

type launchIn struct {
	SessionID   string   `json:"session_id"`
	Application string   `json:"application" jsonschema:"an application's id or name"`
	Args        []string `json:"args,omitempty" jsonschema:"files or URLs for it to open"`
	LeaseToken  int64    `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

type launchOut struct {
	Application ApplicationInfo `json:"application"`
	ProcessID   string          `json:"process_id"`
	Window      *WindowInfo     `json:"window,omitempty"`
}

func (t *tools) launch(ctx context.Context, _ *mcp.CallToolRequest, in launchIn) (*mcp.CallToolResult, launchOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, launchOut{}, err
	}
	l, err := s.Launch(leased(ctx, in.LeaseToken), in.Application, in.Args...)
	if err != nil {
		return nil, launchOut{}, err
	}
	a := l.Application
	w := windowInfo(l.Window)
	return nil, launchOut{Application: ApplicationInfo{ID: a.GetId(), Name: a.GetName(), Comment: a.GetComment()}, ProcessID: l.Process.GetProcessId(), Window: &w}, nil
}

type openIn struct {
	SessionID  string `json:"session_id"`
	Target     string `json:"target" jsonschema:"a path in the session (relative to the home directory, or absolute) or an http, https or file URL"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

type openOut struct {
	Target      string          `json:"target"`
	ContentType string          `json:"content_type"`
	Application ApplicationInfo `json:"application"`
	ProcessID   string          `json:"process_id"`
	Window      *WindowInfo     `json:"window,omitempty"`
}

func (t *tools) open(ctx context.Context, _ *mcp.CallToolRequest, in openIn) (*mcp.CallToolResult, openOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, openOut{}, err
	}
	o, err := s.Open(leased(ctx, in.LeaseToken), in.Target)
	if err != nil {
		return nil, openOut{}, err
	}
	a := o.Application
	w := windowInfo(o.Window)
	return nil, openOut{Target: o.Target, ContentType: o.ContentType, Application: ApplicationInfo{ID: a.GetId(), Name: a.GetName(), Comment: a.GetComment()}, ProcessID: o.Process.GetProcessId(), Window: &w}, nil
}
