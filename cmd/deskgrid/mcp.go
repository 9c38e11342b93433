package main

import (
	"context"
	"fmt"
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
	c, err := deskgrid.New(cl.cf.addr, deskgrid.WithAPIKey(mcpKey(stderr, cl.cf.apiKey)))
	if err != nil {
		return err
	}
	defer c.Close()
	return mcpserver.ServeStdio(ctx, c, "", version)
}

// mcpKey is the key the MCP server sends (flag, environment or data dir);
// without one it says so on stderr, which MCP hosts keep in their logs, as
// every tool call would be refused.
func mcpKey(stderr io.Writer, flagKey string) string {
	key := clientKey(flagKey)
	if key == "" {
		fmt.Fprintf(stderr, "deskgrid mcp: no API key found (%s); deskgrid refuses calls without one\n", keySources())
	}
	return key
}
