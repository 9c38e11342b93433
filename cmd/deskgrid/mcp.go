package main

import (
	"context"
	"io"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/mcpserver"
)

// runMCP serves deskgrid's MCP tools on standard input and output, for MCP
// hosts that start their servers as commands.
func runMCP(ctx context.Context, args []string, _, stderr io.Writer) error {
	// The SDK client dials for itself: no connection (nor -timeout) here.
	cl, err := parseCLI("mcp", args, nil, stderr, nil)
	if err != nil {
		return err
	}
	if len(cl.pos) > 0 {
		return usageError("mcp: unexpected arguments %q", cl.pos)
	}
	c, err := deskgrid.New(cl.cf.addr, deskgrid.WithAPIKey(clientKey(cl.cf.apiKey)))
	if err != nil {
		return err
	}
	defer c.Close()
	return mcpserver.ServeStdio(ctx, c, "", version)
}
