package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// runAccessibility prints a session's accessibility tree (as text, JSON
// or OSWorld's XML), or acts on one of its nodes: do NODE ACTION,
// set-text NODE TEXT, focus NODE. With -role and/or -name in place of
// NODE, the one node they find.
func runAccessibility(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		depth   int
		nodes   int
		visible bool
		app     string
		root    string
		window  uint
		focused bool
		pid     uint
		format  string
		role    string
		name    string
	)
	c, err := parseCLI("a11y", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&depth, "depth", 0, "levels below each application (0: 12, at most 64)")
		fs.IntVar(&nodes, "nodes", 0, "nodes at most (0: 2000, at most 20000)")
		fs.BoolVar(&visible, "visible", false, "only what shows on the screen")
		fs.StringVar(&app, "app", "", "only applications whose name contains this")
		fs.StringVar(&root, "root", "", "only the subtree of this node id")
		fs.UintVar(&window, "window", 0, "only the subtree of this X window (an id deskgrid windows lists)")
		fs.BoolVar(&focused, "focused", false, "only the subtree of the window with the input focus")
		fs.UintVar(&pid, "pid", 0, "only the applications of this process of the session and those it started")
		fs.StringVar(&format, "format", "text", "tree: text, json (as -o json) or osworld (OSWorld's XML)")
		fs.StringVar(&role, "role", "", "find: only nodes of this role (push button, entry, link, ...)")
		fs.StringVar(&name, "name", "", "find: only nodes whose name contains this")
	})
	if err != nil {
		return err
	}
	pos := c.pos
	const usage = "a11y: want <id> [tree] [-app A] [-root NODE | -window W | -focused | -pid P] [-format text|json|osworld] [-role R -name N], or <id> do NODE ACTION | set-text NODE TEXT | focus NODE (NODE may be left out for -role/-name to find it)"
	if len(pos) < 1 || window > math.MaxUint32 || pid > math.MaxUint32 {
		return usageError(usage)
	}
	if len(pos) == 2 && pos[1] == "tree" {
		pos = pos[:1]
	}
	req := &sandboxv1.GetAccessibilityTreeRequest{
		SessionId: pos[0], MaxDepth: int32(depth), MaxNodes: int32(nodes), OnlyVisible: visible, Application: app, Root: root,
		WindowId: uint32(window), FocusedWindow: focused, Pid: uint32(pid),
	}
	switch format {
	case "text":
	case "json":
		c.cf.output = "json"
	case "osworld":
		if len(pos) > 1 || role != "" || name != "" {
			return usageError("a11y: -format osworld writes the tree; it does not go with -role, -name or acts")
		}
		req.Format = sandboxv1.AccessibilityFormat_ACCESSIBILITY_FORMAT_OSWORLD_XML
	default:
		return usageError("a11y: -format %q: want text, json or osworld", format)
	}
	var act deskgrid.AccessibleAct
	var node string
	if len(pos) > 1 {
		verb, rest := pos[1], pos[2:]
		// The node is the first argument when it is an id; else -role and
		// -name find it.
		if len(rest) > 0 && strings.HasPrefix(rest[0], ":") {
			node, rest = rest[0], rest[1:]
		} else if role == "" && name == "" {
			return usageError(usage)
		}
		switch {
		case verb == "do" && len(rest) == 1:
			act = deskgrid.DoAction(rest[0])
		case verb == "set-text" && len(rest) == 1:
			act = deskgrid.SetText(rest[0])
		case verb == "focus" && len(rest) == 0:
			act = deskgrid.Focus()
		default:
			return usageError(usage)
		}
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()
	conn, ctx := c.conn, c.ctx
	client := sandboxv1.NewSandboxServiceClient(conn)
	var tree *sandboxv1.GetAccessibilityTreeResponse
	if act == nil || node == "" {
		tree, err = client.GetAccessibilityTree(ctx, req)
		if err != nil {
			return rpcError(err)
		}
	}
	m := protojson.MarshalOptions{Multiline: true, Indent: "  "}
	if req.Format == sandboxv1.AccessibilityFormat_ACCESSIBILITY_FORMAT_OSWORLD_XML && c.cf.output != "json" {
		_, err = fmt.Fprintln(stdout, tree.GetOsworldXml())
		return err
	}
	if act != nil {
		if node == "" {
			found := deskgrid.FindAccessible(tree, role, name)
			if len(found) != 1 {
				var b strings.Builder
				writeFound(&b, found)
				return fmt.Errorf("a11y %s: -role %q -name %q find %d nodes, want one (give its id):\n%s", pos[1], role, name, len(found), b.String())
			}
			node = found[0].GetId()
		}
		s, err := deskgrid.NewWithConn(conn).Sessions.Get(ctx, pos[0])
		if err != nil {
			return rpcError(err)
		}
		n, err := s.ActOnAccessible(ctx, node, act)
		if err != nil {
			return rpcError(err)
		}
		if c.cf.output == "json" {
			b, err := m.Marshal(&sandboxv1.ActOnAccessibleResponse{Node: n})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(stdout, string(b))
			return err
		}
		if n == nil {
			_, err = fmt.Fprintf(stdout, "%s: done; the node is gone\n", node)
			return err
		}
		return writeFound(stdout, []*sandboxv1.AccessibleNode{n})
	}
	if role != "" || name != "" {
		found := deskgrid.FindAccessible(tree, role, name)
		if c.cf.output == "json" {
			flat := &sandboxv1.GetAccessibilityTreeResponse{NodeCount: int32(len(found))}
			for _, n := range found {
				flat.Applications = append(flat.Applications, leaf(n))
			}
			b, err := m.Marshal(flat)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(stdout, string(b))
			return err
		}
		return writeFound(stdout, found)
	}
	if c.cf.output == "json" {
		b, err := m.Marshal(tree)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	if app != "" && len(tree.GetApplications()) == 0 {
		// An empty answer to a filter says which applications there are.
		all, err := client.GetAccessibilityTree(ctx, &sandboxv1.GetAccessibilityTreeRequest{SessionId: pos[0], MaxDepth: 1})
		if err == nil {
			var names []string
			for _, a := range all.GetApplications() {
				names = append(names, strconv.Quote(a.GetName()))
			}
			fmt.Fprintf(c.errw, "a11y: no application's name contains %q; the session's: %s\n", app, strings.Join(names, ", "))
		}
	}
	return deskgrid.WriteAccessibilityTree(stdout, tree)
}

// leaf is a node without its children.
func leaf(n *sandboxv1.AccessibleNode) *sandboxv1.AccessibleNode {
	return &sandboxv1.AccessibleNode{Id: n.GetId(), Role: n.GetRole(), Name: n.GetName(), Description: n.GetDescription(),
		States: n.GetStates(), Bounds: n.GetBounds(), Actions: n.GetActions(), Text: n.GetText(), Value: n.Value, ChildCount: n.GetChildCount()}
}

// writeFound writes nodes one a line, as the tree does, each followed by
// its id: what do, set-text and focus take.
func writeFound(w io.Writer, nodes []*sandboxv1.AccessibleNode) error {
	for _, n := range nodes {
		var b strings.Builder
		if err := deskgrid.WriteAccessibilityTree(&b, &sandboxv1.GetAccessibilityTreeResponse{Applications: []*sandboxv1.AccessibleNode{leaf(n)}}); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "%s  %s\n", strings.TrimSuffix(b.String(), "\n"), n.GetId()); err != nil {
			return err
		}
	}
	return nil
}

// runApps lists the applications a session offers, launches one or opens a
// file or URL with the session's default application, and prints the
// window that appeared.
func runApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseCLI("apps", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	pos := c.pos
	if len(pos) < 1 || (len(pos) > 1 && !(pos[1] == "launch" && len(pos) >= 3 || pos[1] == "open" && len(pos) == 3)) {
		return usageError("apps: want <id> [launch APP [FILE|URL...] | open FILE|URL]")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	defer c.close()
	conn, ctx := c.conn, c.ctx
	s, err := deskgrid.NewWithConn(conn).Sessions.Get(ctx, pos[0])
	if err != nil {
		return rpcError(err)
	}
	m := protojson.MarshalOptions{Multiline: true, Indent: "  "}
	if len(pos) == 1 {
		apps, err := s.Applications(ctx)
		if err != nil {
			return rpcError(err)
		}
		if c.cf.output == "json" {
			b, err := m.Marshal(&sandboxv1.ListApplicationsResponse{Applications: apps})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(stdout, string(b))
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCOMMENT")
		for _, a := range apps {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", a.GetId(), a.GetName(), a.GetComment())
		}
		return tw.Flush()
	}
	var l *deskgrid.Launched
	if pos[1] == "open" {
		o, err := s.Open(ctx, pos[2])
		if err != nil {
			return rpcError(err)
		}
		l = &deskgrid.Launched{Application: o.Application, Process: o.Process, Window: o.Window}
	} else if l, err = s.Launch(ctx, pos[2], pos[3:]...); err != nil {
		return rpcError(err)
	}
	if c.cf.output == "json" {
		b, err := m.Marshal(l.Window)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	g := l.Window.GetGeometry()
	_, err = fmt.Fprintf(stdout, "%s: window %d %q at %d,%d %dx%d (process %s)\n", l.Application.GetId(), l.Window.GetId(), l.Window.GetTitle(), g.GetX(), g.GetY(), g.GetWidth(), g.GetHeight(), l.Process.GetProcessId())
	return err
}
