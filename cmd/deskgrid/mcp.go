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
	fs, cf := newClientFlags("mcp", stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("mcp: unexpected arguments %q", pos)
	}
	c, err := deskgrid.New(cf.addr, deskgrid.WithAPIKey(clientKey(cf.apiKey)))
	if err != nil {
		return err
	}
	defer c.Close()
	return mcpserver.ServeStdio(ctx, c, "", version)
}
