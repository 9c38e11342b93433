// Package mcpserver exposes deskgrid to MCP hosts (Claude Desktop, IDEs,
// agent frameworks) as Model Context Protocol tools: create, list and delete
// sessions, take screenshots (as image content), act on the desktop, run
// commands, read and write files, record the screen (the video is named by
// its REST path, never sent through MCP), and start agent runs.
//
// The same server runs over stdio (`deskgrid mcp`) and over streamable HTTP
// at the gateway's /mcp. Over HTTP every request is authorised with its own
// key: tools call deskgrid with the key of the request that carries the tool
// call, and an MCP session belongs to the key that opened it (presented with
// another key, its id is unknown: 404).
package mcpserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"google.golang.org/protobuf/types/known/durationpb"
)

// New returns an MCP server whose tools call deskgrid through c. Calls carry
// apiKey when it is not empty.
func New(c *deskgrid.Client, apiKey, version string) *mcp.Server {
	return newServer(&tools{c: c, key: apiKey}, version)
}

func newServer(t *tools, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "deskgrid", Title: "deskgrid desktops", Version: version}, nil)
	addTool(s, t, &mcp.Tool{Name: "create_session", Description: "Create an isolated Linux desktop session and wait until it answers. Returns its id."}, t.createSession)
	addTool(s, t, &mcp.Tool{Name: "list_sessions", Description: "List desktop sessions with their state."}, t.listSessions)
	addTool(s, t, &mcp.Tool{Name: "delete_session", Description: "Stop a session and free everything it used."}, t.deleteSession)
	addTool(s, t, &mcp.Tool{Name: "screenshot", Description: "Take a PNG screenshot of a session's screen."}, t.screenshot)
	addTool(s, t, &mcp.Tool{Name: "click", Description: "Click at pixel (x, y) of a session's screen; button left (default), right or middle; clicks 1-3."}, t.click)
	addTool(s, t, &mcp.Tool{Name: "move_mouse", Description: "Move the pointer to pixel (x, y)."}, t.moveMouse)
	addTool(s, t, &mcp.Tool{Name: "type_text", Description: "Type text (any Unicode) into the focused window."}, t.typeText)
	addTool(s, t, &mcp.Tool{Name: "press_key", Description: "Press a key chord in xdotool names, such as Return, ctrl+c, ctrl+shift+t."}, t.pressKey)
	addTool(s, t, &mcp.Tool{Name: "scroll", Description: "Scroll at (x, y): positive dy scrolls down, negative up, in wheel clicks."}, t.scroll)
	addDesktopTools(s, t)
	addRecordingTools(s, t)
	addTool(s, t, &mcp.Tool{Name: "run_command", Description: "Run a shell command in the session's sandbox (its home is the working directory) and return its output and exit code."}, t.runCommand)
	addTool(s, t, &mcp.Tool{Name: "read_file", Description: "Read a text file of the session: a path relative to its home, or absolute (a session on an image shows its whole root filesystem, as its programs see it)."}, t.readFile)
	addTool(s, t, &mcp.Tool{Name: "write_file", Description: "Create or replace a file of the session: a path relative to its home, or absolute (a session on an image shows its whole root filesystem, as its programs see it)."}, t.writeFile)
	addTool(s, t, &mcp.Tool{Name: "start_run", Description: "Start an agent run on a session: deskgrid drives the desktop with the given provider and model until the task is done. With record, the session's screen is recorded while the run runs and recording_id names the video (download_recording fetches it once the run has ended)."}, t.startRun)
	return s
}

// HTTPHandler serves the tools over streamable HTTP. Every tool call uses
// the bearer key of the HTTP request that carries it, never the key of the
// request that opened the MCP session; and an MCP session answers only the
// key that opened it.
func HTTPHandler(c *deskgrid.Client, version string) http.Handler {
	srv := newServer(&tools{c: c, perRequest: true}, version)
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: sessionIdle})
	return newSessionOwners(inner, sessionIdle)
}

type tools struct {
	c   *deskgrid.Client
	key string
	// perRequest takes the key from each request's Authorization header
	// (streamable HTTP) instead of key.
	perRequest bool
}

// authorise returns ctx carrying the key the call must use. Over HTTP it is
// the key of the request carrying this very tool call, so a session opened
// by one key gives nothing to a request made with another.
func (t *tools) authorise(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	key := t.key
	if t.perRequest {
		key = ""
		if req != nil && req.Extra != nil {
			key = bearer(req.Extra.Header)
		}
	}
	if key != "" {
		ctx = deskgrid.WithCallAPIKey(ctx, key)
	}
	return ctx
}

func bearer(h http.Header) string {
	key, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(key)
}

// addTool registers h so it runs with the call's own key (authorise).
func addTool[In, Out any](s *mcp.Server, t *tools, tool *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(s, tool, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		return h(t.authorise(ctx, req), req, in)
	})
}

// leased is ctx carrying an input lease token for the calls made with it,
// when the tool call gave one.
func leased(ctx context.Context, token int64) context.Context {
	if token == 0 {
		return ctx
	}
	return deskgrid.WithInputLease(ctx, token)
}

func (t *tools) session(ctx context.Context, id string) (*deskgrid.Session, error) {
	if id == "" {
		return nil, fmt.Errorf("session_id is required")
	}
	return t.c.Sessions.Get(ctx, id)
}

// SessionInfo is what the tools say about a session.
type SessionInfo struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Width  int32  `json:"width"`
	Height int32  `json:"height"`
	Reason string `json:"reason,omitempty"`
}

func info(s *deskgrid.Session) SessionInfo {
	return SessionInfo{
		ID:     s.GetId(),
		State:  strings.ToLower(strings.TrimPrefix(s.GetState().String(), "SESSION_STATE_")),
		Width:  s.GetDisplay().GetWidth(),
		Height: s.GetDisplay().GetHeight(),
		Reason: s.GetStateReason(),
	}
}

type createIn struct {
	Width  int `json:"width,omitempty" jsonschema:"screen width in pixels (default 1280)"`
	Height int `json:"height,omitempty" jsonschema:"screen height in pixels (default 800)"`
	// Lifetime in minutes; 0 for the server default.
	TTLMinutes int               `json:"ttl_minutes,omitempty" jsonschema:"lifetime in minutes (default: server's)"`
	Labels     map[string]string `json:"labels,omitempty" jsonschema:"labels to find the session by"`
	Image      string            `json:"image,omitempty" jsonschema:"OCI image to run, such as docker.io/library/debian:bookworm or a committed my-team/qa-desktop:v3 (default: the desktop image)"`
}

func (t *tools) createSession(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, SessionInfo, error) {
	s, err := t.c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: in.Width, Height: in.Height, TTL: time.Duration(in.TTLMinutes) * time.Minute, Labels: in.Labels, Image: in.Image})
	if err != nil {
		return nil, SessionInfo{}, err
	}
	return nil, info(s), nil
}

type listOut struct {
	Sessions []SessionInfo `json:"sessions"`
}

func (t *tools) listSessions(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, listOut, error) {
	out := listOut{Sessions: []SessionInfo{}}
	for s, err := range t.c.Sessions.List(ctx, deskgrid.ListOptions{}) {
		if err != nil {
			return nil, listOut{}, err
		}
		out.Sessions = append(out.Sessions, info(s))
	}
	return nil, out, nil
}

type sessionIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id"`
}

func (t *tools) deleteSession(ctx context.Context, _ *mcp.CallToolRequest, in sessionIn) (*mcp.CallToolResult, SessionInfo, error) {
	if in.SessionID == "" {
		return nil, SessionInfo{}, fmt.Errorf("session_id is required")
	}
	if err := t.c.Sessions.Delete(ctx, in.SessionID); err != nil {
		return nil, SessionInfo{}, err
	}
	s, err := t.c.Sessions.Get(ctx, in.SessionID)
	if err != nil {
		return nil, SessionInfo{}, err
	}
	return nil, info(s), nil
}

func (t *tools) screenshot(ctx context.Context, _ *mcp.CallToolRequest, in sessionIn) (*mcp.CallToolResult, any, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, nil, err
	}
	png, err := s.Screenshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: png, MIMEType: "image/png"}}}, nil, nil
}

type clickIn struct {
	SessionID  string `json:"session_id"`
	X          int    `json:"x" jsonschema:"pixel column"`
	Y          int    `json:"y" jsonschema:"pixel row"`
	Button     string `json:"button,omitempty" jsonschema:"left, right or middle"`
	Clicks     int    `json:"clicks,omitempty" jsonschema:"1 to 3"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

type done struct {
	OK bool `json:"ok"`
}

func (t *tools) act(ctx context.Context, id string, lease int64, a *displayv1.Action) (*mcp.CallToolResult, done, error) {
	s, err := t.session(ctx, id)
	if err != nil {
		return nil, done{}, err
	}
	if _, err := s.Act(leased(ctx, lease), a); err != nil {
		return nil, done{}, err
	}
	return nil, done{OK: true}, nil
}

func (t *tools) click(ctx context.Context, _ *mcp.CallToolRequest, in clickIn) (*mcp.CallToolResult, done, error) {
	b := displayv1.MouseButton_MOUSE_BUTTON_LEFT
	switch in.Button {
	case "", "left":
	case "right":
		b = displayv1.MouseButton_MOUSE_BUTTON_RIGHT
	case "middle":
		b = displayv1.MouseButton_MOUSE_BUTTON_MIDDLE
	default:
		return nil, done{}, fmt.Errorf("button %q: want left, right or middle", in.Button)
	}
	clicks := in.Clicks
	if clicks == 0 {
		clicks = 1
	}
	return t.act(ctx, in.SessionID, in.LeaseToken, &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{
		At: &displayv1.Point{X: int32(in.X), Y: int32(in.Y)}, Button: b, Clicks: int32(clicks),
	}}})
}

type pointIn struct {
	SessionID  string `json:"session_id"`
	X          int    `json:"x"`
	Y          int    `json:"y"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

func (t *tools) moveMouse(ctx context.Context, _ *mcp.CallToolRequest, in pointIn) (*mcp.CallToolResult, done, error) {
	return t.act(ctx, in.SessionID, in.LeaseToken, &displayv1.Action{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{X: int32(in.X), Y: int32(in.Y)}}}})
}

type textIn struct {
	SessionID  string `json:"session_id"`
	Text       string `json:"text"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

func (t *tools) typeText(ctx context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, done, error) {
	return t.act(ctx, in.SessionID, in.LeaseToken, &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: in.Text}}})
}

type keyIn struct {
	SessionID  string `json:"session_id"`
	Chord      string `json:"chord" jsonschema:"xdotool key names joined by +, such as ctrl+shift+t"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

func (t *tools) pressKey(ctx context.Context, _ *mcp.CallToolRequest, in keyIn) (*mcp.CallToolResult, done, error) {
	return t.act(ctx, in.SessionID, in.LeaseToken, &displayv1.Action{Action: &displayv1.Action_Key{Key: &displayv1.Key{Chord: in.Chord}}})
}

type scrollIn struct {
	SessionID  string `json:"session_id"`
	X          int    `json:"x"`
	Y          int    `json:"y"`
	DY         int    `json:"dy" jsonschema:"wheel clicks; positive scrolls down"`
	LeaseToken int64  `json:"lease_token,omitempty" jsonschema:"the token of your input lease while input leases are in use (as REST lease_token): without it, input while another holds the lease is refused"`
}

func (t *tools) scroll(ctx context.Context, _ *mcp.CallToolRequest, in scrollIn) (*mcp.CallToolResult, done, error) {
	return t.act(ctx, in.SessionID, in.LeaseToken, &displayv1.Action{Action: &displayv1.Action_Scroll{Scroll: &displayv1.Scroll{At: &displayv1.Point{X: int32(in.X), Y: int32(in.Y)}, DeltaY: int32(in.DY)}}})
}

type commandIn struct {
	SessionID      string `json:"session_id"`
	Command        string `json:"command" jsonschema:"a shell command, run with sh -c"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"kill it after this long (default 60)"`
}

type commandOut struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out,omitempty"`
}

func (t *tools) runCommand(ctx context.Context, _ *mcp.CallToolRequest, in commandIn) (*mcp.CallToolResult, commandOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, commandOut{}, err
	}
	req := &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", in.Command}}
	if in.TimeoutSeconds > 0 {
		req.Timeout = durationpb.New(time.Duration(in.TimeoutSeconds) * time.Second)
	}
	res, err := s.ExecWith(ctx, req)
	if err != nil {
		return nil, commandOut{}, err
	}
	return nil, commandOut{Stdout: string(res.Stdout), Stderr: string(res.Stderr), ExitCode: res.ExitCode, TimedOut: res.TimedOut}, nil
}

type pathIn struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path" jsonschema:"relative to the session user's home, or absolute"`
}

type fileOut struct {
	Content string `json:"content"`
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, fileOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, fileOut{}, err
	}
	b, err := s.Files().Read(ctx, in.Path)
	if err != nil {
		return nil, fileOut{}, err
	}
	return nil, fileOut{Content: string(b)}, nil
}

type writeIn struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path" jsonschema:"relative to the session user's home, or absolute"`
	Content   string `json:"content"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, done, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, done{}, err
	}
	if err := s.Files().Write(ctx, in.Path, []byte(in.Content), 0); err != nil {
		return nil, done{}, err
	}
	return nil, done{OK: true}, nil
}

type runIn struct {
	SessionID string `json:"session_id"`
	Prompt    string `json:"prompt" jsonschema:"the task"`
	Provider  string `json:"provider" jsonschema:"anthropic, openai or gemini"`
	Model     string `json:"model,omitempty"`
	A11y      bool   `json:"accessibility_tree,omitempty" jsonschema:"give the model the screen's accessibility tree as text beside each screenshot"`
	Record    bool   `json:"record,omitempty" jsonschema:"record the session's screen while the run runs; recording_id names the video (download_recording)"`
}

type runOut struct {
	RunID       string `json:"run_id"`
	State       string `json:"state"`
	RecordingID string `json:"recording_id,omitempty"`
	StateReason string `json:"state_reason,omitempty"`
}

// recordingWait bounds how long start_run waits for a recorded run's
// recording to start (it starts as the run leaves the queue).
const recordingWait = 30 * time.Second

func (t *tools) startRun(ctx context.Context, _ *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, runOut, error) {
	r, err := t.c.Runs.Create(ctx, in.SessionID, in.Prompt, deskgrid.RunOptions{Provider: in.Provider, Model: in.Model, AccessibilityTree: in.A11y, Record: in.Record})
	if err != nil {
		return nil, runOut{}, err
	}
	if in.Record {
		// The run names its recording before it turns RUNNING: wait for
		// that (or its end, when the recording could not start).
		deadline := time.Now().Add(recordingWait)
		for r.GetRecordingId() == "" && r.GetState() == agentv1.RunState_RUN_STATE_QUEUED && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return nil, runOut{}, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if r, err = t.c.Runs.Get(ctx, r.GetId()); err != nil {
				return nil, runOut{}, err
			}
		}
	}
	return nil, runOut{RunID: r.GetId(), State: strings.ToLower(strings.TrimPrefix(r.GetState().String(), "RUN_STATE_")), RecordingID: r.GetRecordingId(), StateReason: r.GetStateReason()}, nil
}
