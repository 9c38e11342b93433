package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
)

type trailEntry struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionId"`
	Type      string `json:"type"`
	Kind      string `json:"kind"`
	BlobHash  string `json:"blobHash"`
	Data      struct {
		Tool   string `json:"tool"`
		Input  string `json:"input"`
		Output string `json:"output"`
		Caller struct {
			KeyID  string `json:"keyId"`
			Tenant string `json:"tenant"`
		} `json:"caller"`
	} `json:"data"`
}

// historyOf lists a session's entries through REST.
func (p *upProcess) historyOf(id string) []trailEntry {
	p.t.Helper()
	code, body, _ := p.do("GET", "/v1/sessions/"+id+"/history?page_size=1000", "")
	if code == http.StatusNotFound {
		return nil
	}
	if code != http.StatusOK {
		p.t.Fatalf("history: %d %s", code, body)
	}
	var resp struct {
		Entries []trailEntry `json:"entries"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		p.t.Fatalf("history %s: %v", body, err)
	}
	return resp.Entries
}

// waitHistory waits until every wanted type is in the session's history.
func (p *upProcess) waitHistory(id string, types ...string) map[string]trailEntry {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]trailEntry{}
		for _, e := range p.historyOf(id) {
			got[e.Type] = e
		}
		missing := false
		for _, typ := range types {
			if _, ok := got[typ]; !ok {
				missing = true
			}
		}
		if !missing {
			return got
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("history of %s has %v, want %v\n%s", id, got, types, p.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Whoever drives a session, through REST, gRPC or MCP, the session's history
// tells what was done, by which key, and what came back; it exports as the
// JSON Lines document itself, which imports again.
func TestEndToEndTrail(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	keyID := strings.Split(p.key, "_")[1]
	s := p.createSession(320, 240)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// An action and a screenshot through REST.
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/actions", `{"actions":[{"type":{"text":"trail"}}]}`); code != http.StatusOK {
		t.Fatalf("actions: %d %s", code, body)
	}
	p.screenshot(s.ID)

	// An exec through gRPC, with a secret in its environment.
	conn, err := dial(p.grpc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kctx := context.WithoutCancel(ctx)
	st, err := sandboxv1.NewSandboxServiceClient(conn).Exec(kctx, &sandboxv1.ExecRequest{SessionId: s.ID,
		Argv: []string{"sh", "-c", "echo marmalade-$((6*7))"}, Env: []string{"SECRET=hunter2"}}, grpc.PerRPCCredentials(auth.KeyCredentials(p.key)))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("exec: %v", err)
		}
	}

	// A file written through MCP.
	cs := mcpOverHTTP(t, ctx, p.httpURL, p.key)
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"session_id": s.ID, "path": "from-mcp.txt", "content": "written by an MCP host"}}); err != nil || res.IsError {
		t.Fatalf("write_file: %v %v", err, res)
	}

	got := p.waitHistory(s.ID, "trail.perform_actions.v1", "trail.screenshot.v1", "trail.exec.v1", "trail.write_file.v1")
	for typ, e := range got {
		if !strings.HasPrefix(typ, "trail.") {
			continue
		}
		if e.Data.Caller.KeyID != keyID {
			t.Errorf("%s was made by key %q, want %q", typ, e.Data.Caller.KeyID, keyID)
		}
	}
	if e := got["trail.perform_actions.v1"]; e.Kind != "ENTRY_KIND_TOOL_CALL" || !strings.Contains(e.Data.Input, `"text":"trail"`) {
		t.Errorf("action entry = %+v", e)
	}
	if e := got["trail.exec.v1"]; !strings.Contains(e.Data.Output, "marmalade-42") || strings.Contains(e.Data.Input, "hunter2") || !strings.Contains(e.Data.Input, "SECRET=") {
		t.Errorf("exec entry = %+v", e)
	}
	if e := got["trail.write_file.v1"]; !strings.Contains(e.Data.Input, "from-mcp.txt") || !strings.Contains(e.Data.Input, "written by an MCP host") {
		t.Errorf("write entry = %+v", e)
	}
	shot := got["trail.screenshot.v1"]
	if shot.Kind != "ENTRY_KIND_SCREENSHOT" || shot.BlobHash == "" {
		t.Fatalf("screenshot entry = %+v", shot)
	}
	code, body, _ := p.do("GET", "/v1/blobs/"+shot.BlobHash, "")
	var blob struct {
		ContentType string `json:"contentType"`
		Data        []byte `json:"data"`
	}
	if err := json.Unmarshal(body, &blob); code != http.StatusOK || err != nil || !bytes.HasPrefix(blob.Data, []byte("\x89PNG")) {
		t.Fatalf("screenshot blob: %d %v %.200s", code, err, body)
	}

	// Search finds the command by its output.
	code, body, _ = p.do("GET", "/v1/history:search?query=marmalade&session_id="+url.QueryEscape(s.ID), "")
	if code != http.StatusOK || !strings.Contains(string(body), "trail.exec.v1") {
		t.Fatalf("search: %d %s", code, body)
	}

	// The export is JSON Lines, as curl saves it.
	code, body, h := p.do("GET", "/v1/sessions/"+s.ID+"/history:export", "")
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/x-ndjson") {
		t.Fatalf("export: %d %q %s", code, h.Get("Content-Type"), body)
	}
	var lines int
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e trailEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.SessionID != s.ID || e.Type == "" {
			t.Fatalf("export line %d %q: %v", lines+1, sc.Text(), err)
		}
		lines++
	}
	if lines < 4 {
		t.Fatalf("export has %d lines", lines)
	}
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := p.do("DELETE", "/v1/sessions/"+s.ID+"/history", ""); code != http.StatusOK {
		t.Fatalf("delete history: %d %s", code, body)
	}
	in, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	cmd := exec.Command(deskgridBinary(t), "history", "import", s.ID)
	cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
	cmd.Stdin = in
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("history import: %v\n%s", err, out)
	}
	p.waitHistory(s.ID, "trail.perform_actions.v1", "trail.screenshot.v1", "trail.exec.v1", "trail.write_file.v1")

	// A refusal is an HTTP error, not an empty document.
	if code, body, _ := p.do("GET", "/v1/sessions/s-aaaaaaaaaaaaaaaaaaaa/history:export", ""); code != http.StatusNotFound {
		t.Fatalf("export of an unknown session: %d %s", code, body)
	}
}
