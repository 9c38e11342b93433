package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
func exercise(t *testing.T, srv *deskgridtest.Server, cs *mcp.ClientSession) {
	ctx := context.Background()
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range tl.Tools {
		names[tool.Name] = true
	}
	for _, want := range []string{"create_session", "list_sessions", "delete_session", "screenshot", "click", "type_text", "press_key", "run_command", "read_file", "write_file", "start_run", "get_clipboard", "set_clipboard", "list_windows", "window", "accessibility_tree", "accessible_act", "list_applications", "launch", "open", "start_recording", "stop_recording", "list_recordings", "download_recording"} {
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

	rec := startRecording(t, cs, s.ID)
	if res := call(t, cs, "click", map[string]any{"session_id": s.ID, "x": 10, "y": 10}); res.IsError {
		t.Fatalf("click: %v", res.Content)
	}
	stopAndDownload(t, srv, cs, s.ID, rec)
	if res := call(t, cs, "click", map[string]any{"session_id": s.ID, "x": 10000, "y": 10}); !res.IsError {
		t.Fatal("a click off the screen was not a tool error")
	}
	if res := call(t, cs, "set_clipboard", map[string]any{"session_id": s.ID, "text": "κείμενο ✓"}); res.IsError {
		t.Fatalf("set_clipboard: %v", res.Content)
	}
	res = call(t, cs, "get_clipboard", map[string]any{"session_id": s.ID})
	if got := structured[struct {
		Text string `json:"text"`
	}](t, res); res.IsError || got.Text != "κείμενο ✓" {
		t.Fatalf("get_clipboard: %+v %v", got, res.Content)
	}
	if res := call(t, cs, "get_clipboard", map[string]any{"session_id": s.ID, "selection": "secondary"}); !res.IsError {
		t.Fatal("an unknown selection was not a tool error")
	}
	res = call(t, cs, "list_windows", map[string]any{"session_id": s.ID})
	if got := structured[struct {
		Windows []mcpserver.WindowInfo `json:"windows"`
	}](t, res); res.IsError || got.Windows == nil {
		t.Fatalf("list_windows: %+v %v", got, res.Content)
	}
	res = call(t, cs, "window", map[string]any{"session_id": s.ID, "window_id": 12345, "action": "activate"})
	if !res.IsError || !strings.Contains(textOf(res), "no window") {
		t.Fatalf("window on an unknown id: %v", textOf(res))
	}
	if res := call(t, cs, "window", map[string]any{"session_id": s.ID, "window_id": 12345, "action": "explode"}); !res.IsError {
		t.Fatal("an unknown window action was not a tool error")
	}
	// Opening what the session does not have, or a URL of another scheme
	// (what opens how is tested on the desktop image in cmd/deskgrid).
	if res := call(t, cs, "open", map[string]any{"session_id": s.ID, "target": "no-such-file.txt"}); !res.IsError || !strings.Contains(textOf(res), "no file /home/user/no-such-file.txt") {
		t.Fatalf("open of a missing file: %v", textOf(res))
	}
	if res := call(t, cs, "open", map[string]any{"session_id": s.ID, "target": "mailto:a@example.org"}); !res.IsError || !strings.Contains(textOf(res), `scheme "mailto"`) {
		t.Fatalf("open of a mailto URL: %v", textOf(res))
	}
	// A desktop of the node's own programs runs no accessibility bus (the
	// desktop image's tree is tested in cmd/deskgrid).
	if res := call(t, cs, "accessibility_tree", map[string]any{"session_id": s.ID}); !res.IsError || !strings.Contains(textOf(res), "accessibility bus") {
		t.Fatalf("accessibility_tree without a bus: %v", textOf(res))
	}
	if res := call(t, cs, "accessible_act", map[string]any{"session_id": s.ID, "id": ":1.5:/org/a11y/atspi/accessible/1", "action": "click"}); !res.IsError || !strings.Contains(textOf(res), "accessibility bus") {
		t.Fatalf("accessible_act without a bus: %v", textOf(res))
	}
	if res := call(t, cs, "accessible_act", map[string]any{"session_id": s.ID, "id": ":1.5:/org/a11y/atspi/accessible/1", "action": "click", "focus": true}); !res.IsError || !strings.Contains(textOf(res), "exactly one") {
		t.Fatalf("accessible_act with two acts: %v", textOf(res))
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

// startRecording starts recording a session through the tools, after the
// ways a start is refused.
func startRecording(t *testing.T, cs *mcp.ClientSession, sid string) mcpserver.RecordingInfo {
	t.Helper()
	if res := call(t, cs, "start_recording", map[string]any{"session_id": sid, "format": "avi"}); !res.IsError || !strings.Contains(textOf(res), "mp4 or webm") {
		t.Fatalf("start_recording as avi: %v", textOf(res))
	}
	if res := call(t, cs, "start_recording", map[string]any{"session_id": sid, "fps": 31}); !res.IsError {
		t.Fatal("start_recording at 31 fps was not a tool error")
	}
	res := call(t, cs, "start_recording", map[string]any{"session_id": sid, "fps": 10})
	rec := structured[mcpserver.RecordingInfo](t, res)
	if res.IsError || !strings.HasPrefix(rec.ID, "rec-") || rec.State != "recording" || rec.Format != "mp4" || rec.FPS != 10 {
		t.Fatalf("start_recording: %+v %v", rec, textOf(res))
	}
	if res := call(t, cs, "start_recording", map[string]any{"session_id": sid}); !res.IsError || !strings.Contains(textOf(res), "already being recorded") {
		t.Fatalf("a second start_recording: %v", textOf(res))
	}
	// While it records there is no video to download (the history may
	// not have heard of it yet either).
	if res := call(t, cs, "download_recording", map[string]any{"session_id": sid, "recording_id": rec.ID}); !res.IsError {
		t.Fatalf("download_recording while it records: %v", res.StructuredContent)
	}
	return rec
}

// stopAndDownload stops rec through the tools, finds it listed, and
// fetches its video from the REST path download_recording names.
func stopAndDownload(t *testing.T, srv *deskgridtest.Server, cs *mcp.ClientSession, sid string, rec mcpserver.RecordingInfo) {
	t.Helper()
	res := call(t, cs, "stop_recording", map[string]any{"session_id": sid, "recording_id": rec.ID})
	if got := structured[mcpserver.RecordingInfo](t, res); res.IsError || got.ID != rec.ID || got.State != "stopped" {
		t.Fatalf("stop_recording: %+v %v", got, textOf(res))
	}
	if res := call(t, cs, "stop_recording", map[string]any{"session_id": sid, "recording_id": rec.ID}); !res.IsError {
		t.Fatal("stopping a stopped recording was not a tool error")
	}
	res = call(t, cs, "list_recordings", map[string]any{"session_id": sid})
	list := structured[struct {
		Recordings []mcpserver.RecordingInfo `json:"recordings"`
	}](t, res)
	if res.IsError || len(list.Recordings) != 1 || list.Recordings[0].ID != rec.ID {
		t.Fatalf("list_recordings: %+v %v", list, textOf(res))
	}
	var got mcpserver.RecordingInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		res = call(t, cs, "download_recording", map[string]any{"session_id": sid, "recording_id": rec.ID})
		if !res.IsError {
			got = structured[mcpserver.RecordingInfo](t, res)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("download_recording after the stop: %v", textOf(res))
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := "/v1/sessions/" + sid + "/recordings/" + rec.ID + ":download"
	if !got.DownloadReady || got.DownloadPath != want || got.ContentType != "video/mp4" || got.SizeBytes == 0 || len(res.Content) != 1 {
		t.Fatalf("download_recording: %+v, %d content items", got, len(res.Content))
	}
	if _, isText := res.Content[0].(*mcp.TextContent); !isText {
		t.Fatalf("download_recording returned %T, not the link", res.Content[0])
	}
	req, _ := http.NewRequest("GET", srv.HTTPURL+got.DownloadPath, nil)
	req.Header.Set("Authorization", "Bearer "+srv.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	video, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "video/mp4" || int64(len(video)) != got.SizeBytes || !bytes.Contains(video[:min(len(video), 16)], []byte("ftyp")) {
		t.Fatalf("GET %s: %d %s, %d bytes", got.DownloadPath, resp.StatusCode, resp.Header.Get("Content-Type"), len(video))
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

// inMemory starts deskgrid (with flags) and serves its tools to an MCP
// client in memory, as a stdio host would get them; everything ends with
// the test.
func inMemory(t *testing.T, flags ...string) (*deskgridtest.Server, *deskgrid.Client, *mcp.ClientSession) {
	srv := deskgridtest.Start(t, flags...)
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := mcpserver.New(c, "", "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return srv, c, cs
}

func TestToolsInMemory(t *testing.T) {
	srv, _, cs := inMemory(t)
	exercise(t, srv, cs)
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
	exercise(t, srv, cs)
}

// cli runs a deskgrid command against srv's data dir.
func cli(t *testing.T, srv *deskgridtest.Server, args ...string) string {
	t.Helper()
	cmd := exec.Command(deskgridtest.Binary(t), args...)
	cmd.Env = append(os.Environ(), "DESKGRID_DATA_DIR="+srv.DataDir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deskgrid %v: %v\n%s%s", args, err, out, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// keyed sends key with every request, as an MCP host configured with it does.
type keyed struct{ key string }

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return http.DefaultTransport.RoundTrip(r)
}

// connectAs opens an MCP session at url with key.
func connectAs(t *testing.T, url, key string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: keyed{key}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// ride posts a tools/call on someone's MCP session id with key, as an
// attacker who learnt the id would; it returns the HTTP status and body.
func ride(t *testing.T, url, sessionID, key, tool string, args map[string]any) (int, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sessionID)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMCPSessionsCannotBeRidden checks that an MCP session over HTTP answers only the key
// that opened it, and that each tool call is authorised with its own
// request's key: run against mcpserver.HTTPHandler here and the gateway's
// /mcp in cmd/deskgrid.
func TestMCPSessionsCannotBeRidden(t *testing.T) {
	srv := deskgridtest.Start(t)
	// The handler's client holds no key of its own, as at the gateway.
	c, err := deskgrid.New(srv.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hs := httptest.NewServer(mcpserver.HTTPHandler(c, "test"))
	// Closed after the MCP clients (their cleanups run first): Close waits
	// for their open streams.
	t.Cleanup(hs.Close)

	cli(t, srv, "tenants", "create", "mallory")
	otherTenant := cli(t, srv, "keys", "create", "-tenant", "mallory", "-scopes", "read,write")
	sameTenantWrite := cli(t, srv, "keys", "create", "-scopes", "read,write", "-name", "second")
	sameTenantRead := cli(t, srv, "keys", "create", "-scopes", "read", "-name", "reader")

	victim := connectAs(t, hs.URL, srv.APIKey)
	res := call(t, victim, "create_session", map[string]any{"width": 320, "height": 240})
	s := structured[mcpserver.SessionInfo](t, res)
	if res.IsError || s.ID == "" {
		t.Fatalf("create_session: %v", res.Content)
	}
	if res := call(t, victim, "write_file", map[string]any{"session_id": s.ID, "path": "secret.txt", "content": "top secret"}); res.IsError {
		t.Fatalf("write_file: %v", res.Content)
	}
	// The opener's own key goes through on a raw request: the probe works.
	if code, body := ride(t, hs.URL, victim.ID(), srv.APIKey, "read_file", map[string]any{"session_id": s.ID, "path": "secret.txt"}); code != http.StatusOK || !strings.Contains(body, "top secret") {
		t.Fatalf("the opener's own request: %d %s", code, body)
	}
	for name, key := range map[string]string{"another tenant": otherTenant, "another key of the tenant": sameTenantWrite, "a read key of the tenant": sameTenantRead} {
		for tool, args := range map[string]map[string]any{
			"read_file":      {"session_id": s.ID, "path": "secret.txt"},
			"write_file":     {"session_id": s.ID, "path": "secret.txt", "content": "pwned"},
			"run_command":    {"session_id": s.ID, "command": "cat secret.txt"},
			"delete_session": {"session_id": s.ID},
		} {
			if code, body := ride(t, hs.URL, victim.ID(), key, tool, args); code != http.StatusNotFound || strings.Contains(body, "top secret") {
				t.Errorf("%s riding the victim's MCP session with %s: %d %s", name, tool, code, body)
			}
		}
	}

	// Another tenant in its own MCP session finds no session to record,
	// stop, list or download, as if it did not exist.
	rec := startRecording(t, victim, s.ID)
	mallory := connectAs(t, hs.URL, otherTenant)
	for tool, args := range map[string]map[string]any{
		"start_recording":    {"session_id": s.ID},
		"stop_recording":     {"session_id": s.ID, "recording_id": rec.ID},
		"list_recordings":    {"session_id": s.ID},
		"download_recording": {"session_id": s.ID, "recording_id": rec.ID},
	} {
		if res := call(t, mallory, tool, args); !res.IsError || !strings.Contains(textOf(res), "not found") || strings.Contains(textOf(res), rec.ID) && tool == "list_recordings" {
			t.Errorf("another tenant's %s: %v", tool, textOf(res))
		}
	}
	// A read key of the tenant may list but not start or stop.
	readerRec := connectAs(t, hs.URL, sameTenantRead)
	// History lists the recording once it has stored its start event.
	var listed *mcp.CallToolResult
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		listed = call(t, readerRec, "list_recordings", map[string]any{"session_id": s.ID})
		if listed.IsError || strings.Contains(fmt.Sprint(listed.StructuredContent), rec.ID) || time.Now().After(end) {
			break
		}
	}
	if listed.IsError || !strings.Contains(fmt.Sprint(listed.StructuredContent), rec.ID) {
		t.Errorf("read key list_recordings: %v", textOf(listed))
	}
	for tool, args := range map[string]map[string]any{
		"start_recording": {"session_id": s.ID},
		"stop_recording":  {"session_id": s.ID, "recording_id": rec.ID},
	} {
		if res := call(t, readerRec, tool, args); !res.IsError || !strings.Contains(textOf(res), "scope") {
			t.Errorf("read key %s: %v", tool, textOf(res))
		}
	}
	// The victim's recording went on through all of it.
	stopAndDownload(t, srv, victim, s.ID, rec)

	// Scopes apply per request: a read key in its own MCP session cannot
	// write, run commands or delete, though the session is its tenant's.
	reader := connectAs(t, hs.URL, sameTenantRead)
	if res := call(t, reader, "read_file", map[string]any{"session_id": s.ID, "path": "secret.txt"}); res.IsError {
		t.Fatalf("read key reading: %v", textOf(res))
	}
	for tool, args := range map[string]map[string]any{
		"write_file":     {"session_id": s.ID, "path": "secret.txt", "content": "pwned"},
		"run_command":    {"session_id": s.ID, "command": "echo pwned > secret.txt"},
		"delete_session": {"session_id": s.ID},
	} {
		if res := call(t, reader, tool, args); !res.IsError || !strings.Contains(textOf(res), "scope") {
			t.Errorf("read key %s: %v", tool, textOf(res))
		}
	}
	// The victim is unaffected.
	res = call(t, victim, "read_file", map[string]any{"session_id": s.ID, "path": "secret.txt"})
	if got := structured[struct{ Content string }](t, res); res.IsError || got.Content != "top secret" {
		t.Fatalf("victim's file after the attacks: %v", textOf(res))
	}
	res = call(t, victim, "list_sessions", map[string]any{})
	if !strings.Contains(fmt.Sprint(res.StructuredContent), "running") {
		t.Fatalf("victim's session after the attacks: %v", res.StructuredContent)
	}
}

// The files tools tell a model what a path may be: relative to the home, or
// absolute (an image session's whole root filesystem), as the API takes it.
func TestFileToolsDescribeTheirPaths(t *testing.T) {
	c, err := deskgrid.New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
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
	tl, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, tool := range tl.Tools {
		if tool.Name != "read_file" && tool.Name != "write_file" {
			continue
		}
		seen++
		schema, _ := json.Marshal(tool.InputSchema)
		var in struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(schema, &in); err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{tool.Description, in.Properties["path"].Description} {
			if !strings.Contains(text, "relative to") || !strings.Contains(text, "absolute") {
				t.Errorf("%s: %q says not that a path may be relative to the home or absolute", tool.Name, text)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("found %d of read_file and write_file", seen)
	}
}
