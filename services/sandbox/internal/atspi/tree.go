package atspi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"
)

// D-Bus names of AT-SPI2.
const (
	registryName  = "org.a11y.atspi.Registry"
	rootPath      = "/org/a11y/atspi/accessible/root"
	ifAccessible  = "org.a11y.atspi.Accessible"
	ifComponent   = "org.a11y.atspi.Component"
	ifAction      = "org.a11y.atspi.Action"
	ifText        = "org.a11y.atspi.Text"
	ifValue       = "org.a11y.atspi.Value"
	ifImage       = "org.a11y.atspi.Image"
	ifSelection   = "org.a11y.atspi.Selection"
	ifTable       = "org.a11y.atspi.Table"
	ifProperties  = "org.freedesktop.DBus.Properties"
	coordsScreen  = uint32(0)
	maxTextLength = 1024
	// exportTextLength bounds a text object's content in an export, which
	// reads every text object's (OSWorld's tree holds them all).
	exportTextLength = 16 << 10
	maxActions       = 16
	// maxChildren bounds the children read of one node. A node with more
	// (a spreadsheet's table claims every cell of the sheet, 2^31-1 of
	// them, and its application hangs building the list) is read by what
	// shows on the screen (visibleCells) or by its first maxChildren.
	maxChildren = 1024
	// maxCells bounds the cells of a table read by what shows.
	maxCells = 1024
)

// Limits bound a walk of the tree.
type Limits struct {
	// MaxDepth is how deep below an application's root the walk goes
	// (the application is depth 0).
	MaxDepth int
	// MaxNodes bounds the nodes returned, applications included.
	MaxNodes int
	// OnlyVisible leaves out nodes not showing on the screen (and their
	// children).
	OnlyVisible bool
	// Application keeps only applications whose name contains it (any
	// case); empty keeps all.
	Application string
	// Root, a node id, reads only that node's subtree (MaxDepth counts
	// from it); Application is then ignored.
	Root string
	// PIDs, when not nil, keeps only the applications whose process, as
	// the bus sees it (the session's own process ids), is one of these.
	PIDs map[uint32]bool
	// Export also reads what an export holds beyond a Node's usual fields:
	// object attributes, the text of every text object (not only of
	// editable and childless ones), action descriptions and key bindings,
	// the value's range and which nodes are images or selections.
	Export bool
}

// Rect is a node's extents in screen pixels.
type Rect struct{ X, Y, Width, Height int32 }

// Node is one accessible object.
type Node struct {
	// ID is the object's bus name and path, "bus:path"; stable while the
	// object lives.
	ID          string
	Role        string
	Name        string
	Description string
	States      []string
	// Bounds is nil when the object has no Component interface.
	Bounds *Rect
	// Actions are the names of what the object can do (press, click...).
	Actions []string
	// Text is an editable or text object's content, up to 1024 bytes;
	// Value a range's current value, formatted.
	Text     string
	Value    float64
	HasValue bool
	// Filled by a walk with Limits.Export: the value's range and step
	// (with HasValue), object attributes, each action in full, and whether
	// the object is an image or holds a selection.
	MinValue, MaxValue, Step float64
	Attributes               map[string]string
	ActionDetails            []Action
	Image, Selection         bool
	// ChildCount is how many children the object has, even when they are
	// left out by a limit.
	ChildCount int
	Children   []*Node

	// ifaces are the object's interfaces.
	ifaces []string
}

// Action is one of a node's actions in full.
type Action struct{ Name, Description, KeyBinding string }

// Tree is a walk's result.
type Tree struct {
	Applications []*Node
	Nodes        int
	// Truncated says a limit left nodes out.
	Truncated bool
}

type ref struct {
	Bus  string
	Path dbus.ObjectPath
}

// Walk reads the tree of every application registered on the bus.
func Walk(ctx context.Context, conn *dbus.Conn, lim Limits) (*Tree, error) {
	if lim.Root != "" {
		return walkFrom(ctx, conn, lim)
	}
	var apps []ref
	if err := conn.Object(registryName, rootPath).CallWithContext(ctx, ifAccessible+".GetChildren", 0).Store(&apps); err != nil {
		return nil, fmt.Errorf("list the applications on the accessibility bus: %w", err)
	}
	w := &walker{conn: conn, lim: lim, tree: &Tree{}}
	for _, a := range apps {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if w.tree.Nodes >= lim.MaxNodes {
			w.tree.Truncated = true
			break
		}
		if lim.PIDs != nil {
			pid, err := ProcessOf(ctx, conn, a.Bus)
			if err != nil || !lim.PIDs[pid] {
				continue
			}
		}
		n, err := w.node(ctx, a, 0)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue // an application that went away or does not answer
		}
		if lim.Application != "" && !strings.Contains(strings.ToLower(n.Name), strings.ToLower(lim.Application)) {
			w.tree.Nodes--
			continue
		}
		w.children(ctx, n, a, 0, n.Bounds)
		w.tree.Applications = append(w.tree.Applications, n)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return w.tree, nil
}

// walkFrom reads the subtree of the node lim.Root.
func walkFrom(ctx context.Context, conn *dbus.Conn, lim Limits) (*Tree, error) {
	bus, path, err := ParseID(lim.Root)
	if err != nil {
		return nil, err
	}
	r := ref{Bus: bus, Path: path}
	w := &walker{conn: conn, lim: lim, tree: &Tree{}}
	if lim.MaxNodes < 1 {
		return w.tree, nil
	}
	n, err := w.node(ctx, r, 0)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, gone(lim.Root, err)
	}
	if slices.Contains(n.States, "defunct") {
		return nil, fmt.Errorf("node %s is defunct: %w", lim.Root, ErrNoNode)
	}
	w.children(ctx, n, r, 0, n.Bounds)
	w.tree.Applications = []*Node{n}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return w.tree, nil
}

type walker struct {
	conn *dbus.Conn
	lim  Limits
	tree *Tree
}

// node reads one object's own properties; its children come after.
func (w *walker) node(ctx context.Context, r ref, depth int) (*Node, error) {
	obj := w.conn.Object(r.Bus, r.Path)
	// The calls go out at once and are answered in parallel.
	props := obj.GoWithContext(ctx, ifProperties+".GetAll", 0, nil, ifAccessible)
	role := obj.GoWithContext(ctx, ifAccessible+".GetRoleName", 0, nil)
	state := obj.GoWithContext(ctx, ifAccessible+".GetState", 0, nil)
	ifaces := obj.GoWithContext(ctx, ifAccessible+".GetInterfaces", 0, nil)
	var attrs *dbus.Call
	if w.lim.Export {
		attrs = obj.GoWithContext(ctx, ifAccessible+".GetAttributes", 0, nil)
	}
	n := &Node{ID: r.Bus + ":" + string(r.Path)}
	var all map[string]dbus.Variant
	if err := wait(ctx, props).Store(&all); err != nil {
		return nil, err
	}
	n.Name, _ = all["Name"].Value().(string)
	n.Description, _ = all["Description"].Value().(string)
	if c, ok := all["ChildCount"].Value().(int32); ok {
		n.ChildCount = int(c)
	}
	_ = wait(ctx, role).Store(&n.Role)
	var bits []uint32
	if err := wait(ctx, state).Store(&bits); err == nil {
		n.States = stateNames(bits)
	}
	var is []string
	_ = wait(ctx, ifaces).Store(&is)
	n.ifaces = is
	if attrs != nil {
		_ = wait(ctx, attrs).Store(&n.Attributes)
	}
	if w.lim.Export {
		n.Image, n.Selection = slices.Contains(is, ifImage), slices.Contains(is, ifSelection)
	}
	var ext, acts, text, chars, val *dbus.Call
	if slices.Contains(is, ifComponent) {
		ext = obj.GoWithContext(ctx, ifComponent+".GetExtents", 0, nil, coordsScreen)
	}
	if slices.Contains(is, ifAction) {
		acts = obj.GoWithContext(ctx, ifAction+".GetActions", 0, nil)
	}
	textLength := maxTextLength
	if w.lim.Export {
		textLength = exportTextLength
	}
	if slices.Contains(is, ifText) && (w.lim.Export || slices.Contains(n.States, "editable") || n.ChildCount == 0) {
		text = obj.GoWithContext(ctx, ifText+".GetText", 0, nil, int32(0), int32(textLength))
		chars = obj.GoWithContext(ctx, ifProperties+".Get", 0, nil, ifText, "CharacterCount")
	}
	if slices.Contains(is, ifValue) {
		if w.lim.Export {
			// The range too; Get alone is what every toolkit answers.
			val = obj.GoWithContext(ctx, ifProperties+".GetAll", 0, nil, ifValue)
		} else {
			val = obj.GoWithContext(ctx, ifProperties+".Get", 0, nil, ifValue, "CurrentValue")
		}
	}
	if ext != nil {
		// One (iiii) struct.
		var r Rect
		if err := wait(ctx, ext).Store(&r); err == nil {
			n.Bounds = &r
		}
	}
	if acts != nil {
		// GetActions gives localized names (empty from some toolkits);
		// GetName the action's own, the one DoAction takes.
		var as []struct{ Name, Description, KeyBinding string }
		if err := wait(ctx, acts).Store(&as); err == nil {
			calls := make([]*dbus.Call, 0, min(len(as), maxActions))
			for i := range min(len(as), maxActions) {
				calls = append(calls, obj.GoWithContext(ctx, ifAction+".GetName", 0, nil, int32(i)))
			}
			for i, c := range calls {
				name := as[i].Name
				var own string
				if err := wait(ctx, c).Store(&own); err == nil && own != "" {
					name = own
				}
				if name != "" {
					n.Actions = append(n.Actions, name)
				}
				if w.lim.Export {
					n.ActionDetails = append(n.ActionDetails, Action{Name: name, Description: as[i].Description, KeyBinding: as[i].KeyBinding})
				}
			}
		}
	}
	if text != nil {
		var s string
		err := wait(ctx, text).Store(&s)
		var count dbus.Variant
		if wait(ctx, chars).Store(&count) == nil {
			// Firefox answers nothing for a range past the text's end:
			// asked again for the text it has.
			if c, ok := count.Value().(int32); ok && c > 0 && (err != nil || s == "") {
				err = obj.CallWithContext(ctx, ifText+".GetText", 0, int32(0), min(c, int32(textLength))).Store(&s)
			}
		}
		if err == nil {
			n.Text = truncate(s, textLength)
		}
	}
	if val != nil && w.lim.Export {
		var v map[string]dbus.Variant
		if err := wait(ctx, val).Store(&v); err == nil {
			if f, ok := v["CurrentValue"].Value().(float64); ok {
				n.Value, n.HasValue = f, true
				n.MinValue, _ = v["MinimumValue"].Value().(float64)
				n.MaxValue, _ = v["MaximumValue"].Value().(float64)
				n.Step, _ = v["MinimumIncrement"].Value().(float64)
			}
		}
	} else if val != nil {
		var v dbus.Variant
		if err := wait(ctx, val).Store(&v); err == nil {
			if f, ok := v.Value().(float64); ok {
				n.Value, n.HasValue = f, true
			}
		}
	}
	w.tree.Nodes++
	return n, nil
}

// children reads a node's children, depth first, within the limits.
// children reads a node's children, depth first, within the limits; clip
// is the part of the screen the node's shown ancestors cover, which a
// visible-only walk keeps children within.
func (w *walker) children(ctx context.Context, n *Node, r ref, depth int, clip *Rect) {
	if n.ChildCount == 0 {
		return
	}
	if depth >= w.lim.MaxDepth {
		w.tree.Truncated = true
		return
	}
	kids := w.childRefs(ctx, n, r)
	for _, k := range kids {
		if ctx.Err() != nil {
			return
		}
		if w.tree.Nodes >= w.lim.MaxNodes {
			w.tree.Truncated = true
			return
		}
		if k.Path == "/org/a11y/atspi/null" {
			continue
		}
		c, err := w.node(ctx, k, depth+1)
		if err != nil {
			continue
		}
		inner := clip
		if w.lim.OnlyVisible {
			var ok bool
			if ok, inner = shown(c, clip); !ok {
				w.tree.Nodes--
				continue
			}
		}
		w.children(ctx, c, k, depth+1, inner)
		n.Children = append(n.Children, c)
	}
}

// shown tells whether node c, below shown ancestors covering clip (nil:
// not known), shows on the screen, and what of it does: visible and
// showing, as toolkits say it; or, as GTK 4 says it (showing on its
// windows only), visible and with bounds within clip. Chromium's nodes
// scrolled out of the page's view are visible and not showing, outside
// clip.
func shown(c *Node, clip *Rect) (bool, *Rect) {
	if !slices.Contains(c.States, "visible") {
		return false, nil
	}
	b := c.Bounds
	if b != nil && (b.Width <= 0 || b.Height <= 0) {
		b = nil
	}
	if slices.Contains(c.States, "showing") {
		if b == nil {
			return true, clip
		}
		if clip == nil {
			return true, b
		}
		if in := intersect(*b, *clip); in != nil {
			return true, in
		}
		return true, b // a popup beside its window
	}
	if b == nil || clip == nil {
		return false, nil
	}
	in := intersect(*b, *clip)
	return in != nil, in
}

// intersect is the part two rectangles share, nil if none.
func intersect(a, b Rect) *Rect {
	x0, y0 := max(a.X, b.X), max(a.Y, b.Y)
	x1, y1 := min(a.X+a.Width, b.X+b.Width), min(a.Y+a.Height, b.Y+b.Height)
	if x1 <= x0 || y1 <= y0 {
		return nil
	}
	return &Rect{X: x0, Y: y0, Width: x1 - x0, Height: y1 - y0}
}

// childRefs lists the children of a node to read: all of them, or for a
// node with more than maxChildren, the cells that show on the screen of a
// table, or else its first maxChildren.
func (w *walker) childRefs(ctx context.Context, n *Node, r ref) []ref {
	obj := w.conn.Object(r.Bus, r.Path)
	if n.ChildCount <= maxChildren {
		var kids []ref
		if err := obj.CallWithContext(ctx, ifAccessible+".GetChildren", 0).Store(&kids); err != nil {
			return nil
		}
		return kids
	}
	if kids, ok := w.visibleCells(ctx, obj, n); ok {
		// The cells off the screen are left out, as asked or not.
		w.tree.Truncated = w.tree.Truncated || !w.lim.OnlyVisible
		return kids
	}
	w.tree.Truncated = true
	calls := make([]*dbus.Call, maxChildren)
	for i := range calls {
		calls[i] = obj.GoWithContext(ctx, ifAccessible+".GetChildAtIndex", 0, nil, int32(i))
	}
	kids := make([]ref, 0, maxChildren)
	for _, c := range calls {
		var k ref
		if err := wait(ctx, c).Store(&k); err == nil {
			kids = append(kids, k)
		}
	}
	return kids
}

// visibleCells lists the cells of a table node that show on the screen:
// from the cell at its top left corner to the one at its bottom right, row
// by row, at most maxCells. ok is false when the node is no table on the
// screen or does not answer as one.
func (w *walker) visibleCells(ctx context.Context, obj dbus.BusObject, n *Node) (cells []ref, ok bool) {
	if !slices.Contains(n.ifaces, ifTable) || !slices.Contains(n.ifaces, ifComponent) || n.Bounds == nil || n.Bounds.Width < 2 || n.Bounds.Height < 2 {
		return nil, false
	}
	b := n.Bounds
	// The cell at a corner, as a row and a column.
	at := func(x, y int32) (row, col int32, ok bool) {
		var cell ref
		if err := obj.CallWithContext(ctx, ifComponent+".GetAccessibleAtPoint", 0, x, y, coordsScreen).Store(&cell); err != nil || cell.Path == "/org/a11y/atspi/null" {
			return 0, 0, false
		}
		var i int32
		if err := w.conn.Object(cell.Bus, cell.Path).CallWithContext(ctx, ifAccessible+".GetIndexInParent", 0).Store(&i); err != nil || i < 0 {
			return 0, 0, false
		}
		if obj.CallWithContext(ctx, ifTable+".GetRowAtIndex", 0, i).Store(&row) != nil || obj.CallWithContext(ctx, ifTable+".GetColumnAtIndex", 0, i).Store(&col) != nil {
			return 0, 0, false
		}
		return row, col, row >= 0 && col >= 0
	}
	r0, c0, ok := at(b.X+1, b.Y+1)
	if !ok {
		return nil, false
	}
	r1, c1, ok := at(b.X+b.Width-2, b.Y+b.Height-2)
	if !ok || r1 < r0 || c1 < c0 {
		return nil, false
	}
	cols := c1 - c0 + 1
	rows := min(r1-r0+1, max(1, maxCells/cols))
	cols = min(cols, maxCells)
	if rows < r1-r0+1 || cols < c1-c0+1 {
		w.tree.Truncated = true
	}
	calls := make([]*dbus.Call, 0, rows*cols)
	for row := r0; row < r0+rows; row++ {
		for col := c0; col < c0+cols; col++ {
			calls = append(calls, obj.GoWithContext(ctx, ifTable+".GetAccessibleAt", 0, nil, row, col))
		}
	}
	for _, c := range calls {
		var cell ref
		if err := wait(ctx, c).Store(&cell); err == nil && cell.Path != "/org/a11y/atspi/null" {
			cells = append(cells, cell)
		}
	}
	return cells, len(cells) > 0
}

// wait waits for an asynchronous call's answer.
func wait(ctx context.Context, c *dbus.Call) *dbus.Call {
	select {
	case <-c.Done:
		return c
	case <-ctx.Done():
		return &dbus.Call{Err: ctx.Err()}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// states are AT-SPI2's state names, by bit (AtspiStateType).
var states = []string{
	"invalid", "active", "armed", "busy", "checked", "collapsed", "defunct", "editable",
	"enabled", "expandable", "expanded", "focusable", "focused", "has_tooltip", "horizontal", "iconified",
	"modal", "multi_line", "multiselectable", "opaque", "pressed", "resizable", "selectable", "selected",
	"sensitive", "showing", "single_line", "stale", "transient", "vertical", "visible", "manages_descendants",
	"indeterminate", "required", "truncated", "animated", "invalid_entry", "supports_autocompletion", "selectable_text", "is_default",
	"visited", "checkable", "has_popup", "read_only",
}

func stateNames(bits []uint32) []string {
	var out []string
	for word, v := range bits {
		for bit := range 32 {
			if v&(1<<bit) == 0 {
				continue
			}
			i := word*32 + bit
			if i < len(states) {
				out = append(out, states[i])
			} else {
				out = append(out, fmt.Sprintf("state_%d", i))
			}
		}
	}
	return out
}

// IsNoBus reports an error meaning the bus or its registry is not there.
func IsNoBus(err error) bool {
	var de dbus.Error
	if errors.As(err, &de) {
		return de.Name == "org.freedesktop.DBus.Error.ServiceUnknown" || de.Name == "org.freedesktop.DBus.Error.NameHasNoOwner"
	}
	return errors.Is(err, ErrNoBus)
}

// WakeA11yBus asks the session bus for the accessibility bus's address,
// which makes at-spi-bus-launcher start it when it waits to be asked.
func WakeA11yBus(ctx context.Context, session *dbus.Conn) error {
	var addr string
	return session.Object("org.a11y.Bus", "/org/a11y/bus").CallWithContext(ctx, "org.a11y.Bus.GetAddress", 0).Store(&addr)
}
