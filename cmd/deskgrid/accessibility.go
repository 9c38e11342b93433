package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// runAccessibility prints a session's accessibility tree.
func runAccessibility(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := newClientFlags("a11y", stderr)
	depth := fs.Int("depth", 0, "levels below each application (0: 12, at most 64)")
	nodes := fs.Int("nodes", 0, "nodes at most (0: 2000, at most 20000)")
	visible := fs.Bool("visible", false, "only what shows on the screen")
	app := fs.String("app", "", "only applications whose name contains this")
	role := fs.String("role", "", "find: only nodes of this role (push button, entry, link, ...)")
	name := fs.String("name", "", "find: only nodes whose name contains this")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("a11y: want one session id")
	}
	conn, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	tree, err := sandboxv1.NewSandboxServiceClient(conn).GetAccessibilityTree(ctx, &sandboxv1.GetAccessibilityTreeRequest{
		SessionId: pos[0], MaxDepth: int32(*depth), MaxNodes: int32(*nodes), OnlyVisible: *visible, Application: *app,
	})
	if err != nil {
		return rpcError(err)
	}
	if *role != "" || *name != "" {
		found := deskgrid.FindAccessible(tree, *role, *name)
		flat := &sandboxv1.GetAccessibilityTreeResponse{NodeCount: int32(len(found))}
		for _, n := range found {
			leaf := &sandboxv1.AccessibleNode{Id: n.GetId(), Role: n.GetRole(), Name: n.GetName(), Description: n.GetDescription(),
				States: n.GetStates(), Bounds: n.GetBounds(), Actions: n.GetActions(), Text: n.GetText(), Value: n.Value, ChildCount: n.GetChildCount()}
			flat.Applications = append(flat.Applications, leaf)
		}
		tree = flat
	}
	if cf.output == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(tree)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	return deskgrid.WriteAccessibilityTree(stdout, tree)
}

// runApps lists the applications a session offers, or launches one and
// prints its window.
func runApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := newClientFlags("apps", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || (len(pos) > 1 && (pos[1] != "launch" || len(pos) < 3)) {
		return usageError("apps: want <id> [launch APP [FILE|URL...]]")
	}
	conn, ctx, done, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
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
		if cf.output == "json" {
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
	l, err := s.Launch(ctx, pos[2], pos[3:]...)
	if err != nil {
		return rpcError(err)
	}
	if cf.output == "json" {
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
