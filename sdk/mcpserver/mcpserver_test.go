package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
	"github.com/deskgrid/deskgrid/sdk/mcpserver"
)

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func structured[T any](t *testing.T, res *mcp.CallToolResult) T {
	t.Helper()
	var v T
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return v
}

// exercise drives a desktop through the MCP tools as an MCP host would.
func exercise(t *testing.T, cs *mcp.ClientSession) {
	ctx := context.Background()
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range tl.Tools {
		names[tool.Name] = true
	}
	for _, want := range []string{"create_session", "list_sessions", "delete_session", "screenshot", "click", "type_text", "press_key", "run_command", "read_file", "write_file", "start_run"} {
		if !names[want] {
			t.Errorf("tool %s missing", want)
		}
	}

	res := call(t, cs, "create_session", map[string]any{"width": 640, "height": 480})
	if res.IsError {
		t.Fatalf("create_session: %v", res.Content)
	}
	s := structured[mcpserver.SessionInfo](t, res)
	if s.ID == "" || s.State != "running" || s.Width != 640 {
		t.Fatalf("created %+v", s)
	}

	res = call(t, cs, "screenshot", map[string]any{"session_id": s.ID})
	img, ok := res.Content[0].(*mcp.ImageContent)
	if res.IsError || !ok || img.MIMEType != "image/png" {
		t.Fatalf("screenshot: %+v", res.Content)
	}
	if pic, err := png.Decode(bytes.NewReader(img.Data)); err != nil || pic.Bounds().Dx() != 640 {
		t.Fatalf("screenshot image: %v", err)
	}

	if res := call(t, cs, "click", map[string]any{"session_id": s.ID, "x": 10, "y": 10}); res.IsError {
		t.Fatalf("click: %v", res.Content)
	}
	if res := call(t, cs, "click", map[string]any{"session_id": s.ID, "x": 10000, "y": 10}); !res.IsError {
		t.Fatal("a click off the screen was not a tool error")
	}
	if res := call(t, cs, "write_file", map[string]any{"session_id": s.ID, "path": "a.txt", "content": "from mcp"}); res.IsError {
		t.Fatalf("write_file: %v", res.Content)
	}
	res = call(t, cs, "run_command", map[string]any{"session_id": s.ID, "command": "cat a.txt; exit 4"})
	out := structured[struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}](t, res)
	if res.IsError || out.Stdout != "from mcp" || out.ExitCode != 4 {
		t.Fatalf("run_command: %+v %v", out, res.Content)
	}
	res = call(t, cs, "read_file", map[string]any{"session_id": s.ID, "path": "../../etc/passwd"})
	if !res.IsError {
		t.Fatal("reading outside the session's home was not refused")
	}
	res = call(t, cs, "delete_session", map[string]any{"session_id": s.ID})
	if got := structured[mcpserver.SessionInfo](t, res); res.IsError || got.State != "stopped" {
		t.Fatalf("delete_session: %+v %v", got, res.Content)
	}
	if res := call(t, cs, "screenshot", map[string]any{"session_id": "s-aaaaaaaaaaaaaaaaaaaa"}); !res.IsError || !strings.Contains(textOf(res), "not found") {
		t.Fatalf("screenshot of an unknown session: %v", textOf(res))
	}
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsInMemory(t *testing.T) {
	srv := deskgridtest.Start(t)
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := mcpserver.New(c, "", "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	exercise(t, cs)
}

func TestToolsOverStreamableHTTP(t *testing.T) {
	srv := deskgridtest.Start(t)
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs := httptest.NewServer(mcpserver.HTTPHandler(c, "test"))
	defer hs.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	exercise(t, cs)
}
