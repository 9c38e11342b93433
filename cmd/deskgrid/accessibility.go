package main

import (
	"context"
	"fmt"
	"io"

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
	conn, err := cf.conn()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, cf.timeout)
	defer cancel()
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
