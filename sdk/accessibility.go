package deskgrid

import (
	"context"
	"fmt"
	"io"
	"strings"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"google.golang.org/protobuf/proto"
)

// AccessibilityOption tunes AccessibilityTree.
type AccessibilityOption func(*sandboxv1.GetAccessibilityTreeRequest)

// MaxDepth bounds how many levels below each application are read (1: its
// windows; the default is 12, at most 64).
func MaxDepth(n int) AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.MaxDepth = int32(n) }
}

// MaxNodes bounds the nodes returned (the default is 2000, at most 20000).
func MaxNodes(n int) AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.MaxNodes = int32(n) }
}

// OnlyVisible leaves out what is not showing on the screen.
func OnlyVisible() AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.OnlyVisible = true }
}

// Application keeps the applications whose name contains name (any case).
func Application(name string) AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.Application = name }
}

// Root reads only the subtree of one node, by the id the tree gave it;
// MaxDepth then counts from it.
func Root(id string) AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.Root = id }
}

// OfWindow reads only the subtree of one top-level window, by the X
// window id Windows gives: the accessible that stands for it at the top.
// An unknown window is a NotFound error; one whose program offers no
// accessibility a FailedPrecondition one.
func OfWindow(id uint32) AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.WindowId = id }
}

// OfFocusedWindow reads only the subtree of the window with the input
// focus; none focused is a FailedPrecondition error.
func OfFocusedWindow() AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.FocusedWindow = true }
}

// OfProcess reads only the applications of one process of the session and
// of those it started, by the id the session's programs see (a Window's
// pid). A process that has exited is a NotFound error.
func OfProcess(pid uint32) AccessibilityOption {
	return func(r *sandboxv1.GetAccessibilityTreeRequest) { r.Pid = pid }
}

// AccessibleAct is what ActOnAccessible does to a node: DoAction, SetText
// or Focus.
type AccessibleAct func(*sandboxv1.ActOnAccessibleRequest)

// DoAction performs the node's action of this name ("click", "press",
// "activate"...; any case), one of those its AccessibleNode lists.
func DoAction(name string) AccessibleAct {
	return func(r *sandboxv1.ActOnAccessibleRequest) {
		r.Operation = &sandboxv1.ActOnAccessibleRequest_Action{Action: name}
	}
}

// SetText replaces the contents of an editable text; "" clears it.
func SetText(text string) AccessibleAct {
	return func(r *sandboxv1.ActOnAccessibleRequest) {
		r.Operation = &sandboxv1.ActOnAccessibleRequest_Text{Text: text}
	}
}

// Focus gives the node the keyboard focus.
func Focus() AccessibleAct {
	return func(r *sandboxv1.ActOnAccessibleRequest) {
		r.Operation = &sandboxv1.ActOnAccessibleRequest_Focus{Focus: true}
	}
}

// ActOnAccessible acts on the node of the accessibility tree whose id is
// id, through the application itself (no pointer or keyboard input), and
// returns the node as it is afterwards: nil when the act made it go away.
// A stale id is a NotFound error; a node that cannot do it a
// FailedPrecondition one saying what it can do.
func (s *Session) ActOnAccessible(ctx context.Context, id string, act AccessibleAct) (*sandboxv1.AccessibleNode, error) {
	req := &sandboxv1.ActOnAccessibleRequest{Id: id}
	if act != nil {
		act(req)
	}
	return s.ActOnAccessibleWith(ctx, req)
}

// ActOnAccessibleWith acts on a node as ActOnAccessible does, with a
// request described in full: the lease token of the caller's input lease
// while input leases are in use (an act is input, fenced as the display's
// actions are: a stale or missing token while a lease is held is a
// FailedPrecondition error). Its session id is the session's own.
func (s *Session) ActOnAccessibleWith(ctx context.Context, req *sandboxv1.ActOnAccessibleRequest) (*sandboxv1.AccessibleNode, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req = proto.Clone(req).(*sandboxv1.ActOnAccessibleRequest)
	req.SessionId = s.GetId()
	resp, err := s.c.sandbox.ActOnAccessible(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetNode(), nil
}

// AccessibilityTree reads the accessibility tree (AT-SPI2) of the
// session's desktop: applications, their windows and widgets, with role,
// name, states, actions and bounds in screen pixels.
func (s *Session) AccessibilityTree(ctx context.Context, opts ...AccessibilityOption) (*sandboxv1.GetAccessibilityTreeResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &sandboxv1.GetAccessibilityTreeRequest{SessionId: s.GetId()}
	for _, o := range opts {
		o(req)
	}
	resp, err := s.c.sandbox.GetAccessibilityTree(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp, nil
}

// AccessibilityXML reads the accessibility tree as AccessibilityTree does
// and returns it as the XML of OSWorld's accessibility_tree observation
// (what its server's {"AT": xml} holds), for harnesses written for it.
func (s *Session) AccessibilityXML(ctx context.Context, opts ...AccessibilityOption) (string, error) {
	opts = append(opts, func(r *sandboxv1.GetAccessibilityTreeRequest) {
		r.Format = sandboxv1.AccessibilityFormat_ACCESSIBILITY_FORMAT_OSWORLD_XML
	})
	resp, err := s.AccessibilityTree(ctx, opts...)
	if err != nil {
		return "", err
	}
	return resp.GetOsworldXml(), nil
}

// FindAccessible returns the nodes of a tree whose role is role (any role
// when empty) and whose name contains name (any case), depth first.
func FindAccessible(tree *sandboxv1.GetAccessibilityTreeResponse, role, name string) []*sandboxv1.AccessibleNode {
	var out []*sandboxv1.AccessibleNode
	var walk func(n *sandboxv1.AccessibleNode)
	walk = func(n *sandboxv1.AccessibleNode) {
		if (role == "" || n.GetRole() == role) && strings.Contains(strings.ToLower(n.GetName()), strings.ToLower(name)) {
			out = append(out, n)
		}
		for _, c := range n.GetChildren() {
			walk(c)
		}
	}
	for _, a := range tree.GetApplications() {
		walk(a)
	}
	return out
}

// WriteAccessibilityTree writes a tree as indented text, one node a line:
// role, "name", [states], @x,y WxH, (actions) and = text, the form a
// language model reads beside a screenshot.
func WriteAccessibilityTree(w io.Writer, tree *sandboxv1.GetAccessibilityTreeResponse) error {
	var b strings.Builder
	var line func(n *sandboxv1.AccessibleNode, depth int)
	line = func(n *sandboxv1.AccessibleNode, depth int) {
		b.WriteString(strings.Repeat("  ", depth))
		b.WriteString(n.GetRole())
		if n.GetName() != "" {
			fmt.Fprintf(&b, " %q", n.GetName())
		}
		if st := shownStates(n.GetStates()); len(st) > 0 {
			fmt.Fprintf(&b, " [%s]", strings.Join(st, " "))
		}
		if r := n.GetBounds(); r != nil {
			fmt.Fprintf(&b, " @%d,%d %dx%d", r.GetX(), r.GetY(), r.GetWidth(), r.GetHeight())
		}
		if len(n.GetActions()) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(n.GetActions(), ", "))
		}
		if n.GetText() != "" && n.GetText() != n.GetName() {
			fmt.Fprintf(&b, " = %q", n.GetText())
		}
		if n.Value != nil {
			fmt.Fprintf(&b, " value=%g", n.GetValue())
		}
		if left := int(n.GetChildCount()) - len(n.GetChildren()); left > 0 && len(n.GetChildren()) == 0 {
			fmt.Fprintf(&b, " …%d children", left)
		}
		b.WriteByte('\n')
		for _, c := range n.GetChildren() {
			line(c, depth+1)
		}
	}
	for _, a := range tree.GetApplications() {
		line(a, 0)
	}
	if tree.GetTruncated() {
		fmt.Fprintf(&b, "… cut at %d nodes or by depth\n", tree.GetNodeCount())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// shownStates are the states worth a reader's attention; showing, visible,
// enabled, sensitive and the like hold for nearly every node.
func shownStates(states []string) []string {
	var out []string
	for _, s := range states {
		switch s {
		case "focused", "active", "checked", "selected", "pressed", "expanded", "collapsed", "editable", "modal", "indeterminate", "read_only", "required", "invalid_entry", "busy":
			out = append(out, s)
		}
	}
	return out
}
