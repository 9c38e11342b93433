package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// Bounds of the accessibility tree given to the model beside a screenshot.
const (
	// MaxTreeBytes bounds the text; what does not fit is cut with a note.
	MaxTreeBytes = 16 << 10
	// treeNodes bounds the nodes read for it.
	treeNodes = 1500
	// treeTextChars bounds one node's text in it.
	treeTextChars = 120
)

// treeStates are the states worth the model's attention; showing, visible,
// enabled and the like hold for nearly every node shown.
var treeStates = []string{"focused", "active", "checked", "selected", "pressed", "expanded", "collapsed", "editable", "modal", "read_only"}

// accessibilityTree is the session's accessibility tree as the model reads
// it beside a screenshot: what shows on the screen, one node a line
// indented by depth, bounds in the model's screenshot pixels, at most
// MaxTreeBytes. Nodes that say nothing (no name, text or action) are left
// out, their children lifted. A desktop without a tree gives a note.
func (e *Executor) accessibilityTree(ctx context.Context) string {
	resp, err := e.Sandbox.GetAccessibilityTree(ctx, &sandboxv1.GetAccessibilityTreeRequest{SessionId: e.SessionID, OnlyVisible: true, MaxNodes: treeNodes})
	if err != nil {
		if ctx.Err() != nil {
			return ""
		}
		return "[accessibility tree unavailable: " + status.Convert(err).Message() + "]"
	}
	var b strings.Builder
	b.WriteString("Accessibility tree of the screen (role \"name\" [states] @x,y WxH in screenshot pixels (actions) = text):\n")
	cut := false
	var walk func(n *sandboxv1.AccessibleNode, depth int)
	walk = func(n *sandboxv1.AccessibleNode, depth int) {
		if cut {
			return
		}
		if says := n.GetName() != "" || n.GetText() != "" || len(n.GetActions()) > 0 || n.GetRole() == "application"; says {
			line := e.treeLine(n, depth)
			if b.Len()+len(line) > MaxTreeBytes {
				cut = true
				return
			}
			b.WriteString(line)
			depth++
		}
		for _, c := range n.GetChildren() {
			walk(c, depth)
		}
	}
	for _, a := range resp.GetApplications() {
		walk(a, 0)
	}
	if cut || resp.GetTruncated() {
		fmt.Fprintf(&b, "[tree cut: more nodes than fit in %d KiB; the screenshot shows the rest]\n", MaxTreeBytes>>10)
	}
	return b.String()
}

// treeLine is one node's line.
func (e *Executor) treeLine(n *sandboxv1.AccessibleNode, depth int) string {
	var b strings.Builder
	b.WriteString(strings.Repeat("  ", depth))
	b.WriteString(n.GetRole())
	if n.GetName() != "" {
		fmt.Fprintf(&b, " %q", clip(n.GetName()))
	}
	var st []string
	for _, s := range n.GetStates() {
		if slices.Contains(treeStates, s) {
			st = append(st, s)
		}
	}
	if len(st) > 0 {
		fmt.Fprintf(&b, " [%s]", strings.Join(st, " "))
	}
	if r := n.GetBounds(); r != nil && r.GetWidth() > 0 && r.GetHeight() > 0 {
		x0, y0 := e.Scale.ToModel(&displayv1.Point{X: r.GetX(), Y: r.GetY()})
		x1, y1 := e.Scale.ToModel(&displayv1.Point{X: r.GetX() + r.GetWidth(), Y: r.GetY() + r.GetHeight()})
		fmt.Fprintf(&b, " @%d,%d %dx%d", x0, y0, x1-x0, y1-y0)
	}
	if len(n.GetActions()) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(n.GetActions(), ", "))
	}
	if t := n.GetText(); t != "" && t != n.GetName() {
		fmt.Fprintf(&b, " = %q", clip(t))
	}
	b.WriteByte('\n')
	return b.String()
}

// clip shortens s to treeTextChars characters.
func clip(s string) string {
	if r := []rune(s); len(r) > treeTextChars {
		return string(r[:treeTextChars]) + "…"
	}
	return s
}
