package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An MCP host reaches deskgrid both ways: `deskgrid mcp` over stdio and the
// gateway's /mcp over streamable HTTP.
func TestEndToEndMCP(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdio := exec.Command(deskgridBinary(t), "mcp", "-addr", p.grpc)
	stdio.Env = append(os.Environ(), "DESKGRID_DATA_DIR="+p.dataDir)
	transports := map[string]mcp.Transport{
		"stdio": &mcp.CommandTransport{Command: stdio},
		"http": &mcp.StreamableClientTransport{Endpoint: p.httpURL + "/mcp", HTTPClient: &http.Client{
			Transport: bearerTransport{key: p.key, next: http.DefaultTransport},
		}},
	}
	for name, tr := range transports {
		t.Run(name, func(t *testing.T) {
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_session", Arguments: map[string]any{"width": 320, "height": 240}})
			if err != nil || res.IsError {
				t.Fatalf("create_session: %v %v", err, res)
			}
			var s struct {
				ID    string `json:"id"`
				State string `json:"state"`
			}
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &s); err != nil || s.State != "running" {
				t.Fatalf("created %s", b)
			}
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "screenshot", Arguments: map[string]any{"session_id": s.ID}})
			if err != nil || res.IsError {
				t.Fatalf("screenshot: %v %v", err, res)
			}
			if img, ok := res.Content[0].(*mcp.ImageContent); !ok || len(img.Data) == 0 {
				t.Fatalf("screenshot content %T", res.Content[0])
			}
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_session", Arguments: map[string]any{"session_id": s.ID}})
			if err != nil || res.IsError {
				t.Fatalf("delete_session: %v %v", err, res)
			}
		})
	}
}

// `deskgrid mcp` fed from a pipe that ends after the requests (as
// `printf ... | deskgrid mcp` does) answers each before it exits.
func TestMCPStdioFromAPipe(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, deskgridBinary(t), "mcp", "-addr", p.grpc)
	cmd.Env = append(os.Environ(), "DESKGRID_DATA_DIR="+p.dataDir)
	cmd.Stdin = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_sessions","arguments":{}}}
`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deskgrid mcp: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"id":2,"result":`) || strings.Contains(lines[1], `"isError":true`) {
		t.Fatalf("answers: %s", out)
	}
}

// mcpOverHTTP connects an MCP host to a gateway's /mcp with an API key;
// the session closes when the test ends.
func mcpOverHTTP(t *testing.T, ctx context.Context, httpURL, key string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: httpURL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{key: key, next: http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// bearerTransport sends an API key with every request, as an MCP host
// configured with deskgrid's key does.
type bearerTransport struct {
	key  string
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}
