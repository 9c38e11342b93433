package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// The fake providers below answer the way the real APIs do on the wire
// (status codes, headers, server-sent events), so the official SDKs parse
// them exactly as they parse production traffic.

// step is what the scripted model does on one turn.
type step int

const (
	stepScreenshot step = iota
	stepClick
	stepType
	stepBash
	stepEdit
	stepDone
)

var script = []step{stepScreenshot, stepClick, stepType, stepBash, stepEdit, stepDone}

const finalText = "All done, the file is written."

// wireServer records requests and answers each turn of script in a
// provider's wire format.
type wireServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
	auth   []string
	paths  []string
	// fail, when set, answers every request with this status and body.
	failStatus int
	failBody   string
}

func newWireServer(t *testing.T, authHeader string, write func(w http.ResponseWriter, s step, turn int)) *wireServer {
	ws := &wireServer{}
	ws.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ws.mu.Lock()
		turn := len(ws.bodies)
		ws.bodies = append(ws.bodies, string(body))
		ws.auth = append(ws.auth, r.Header.Get(authHeader))
		ws.paths = append(ws.paths, r.URL.Path)
		failStatus, failBody := ws.failStatus, ws.failBody
		ws.mu.Unlock()
		if failStatus != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(failStatus)
			_, _ = io.WriteString(w, failBody)
			return
		}
		s := stepDone
		if turn < len(script) {
			s = script[turn]
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		write(w, s, turn)
	}))
	t.Cleanup(ws.srv.Close)
	return ws
}

func (ws *wireServer) requests() (bodies, auth, paths []string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return append([]string(nil), ws.bodies...), append([]string(nil), ws.auth...), append([]string(nil), ws.paths...)
}

// sse writes one server-sent event and flushes it, as a streaming API does.
func sse(w http.ResponseWriter, event string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func halves(s string) []string { return []string{s[:len(s)/2], s[len(s)/2:]} }

// Anthropic Messages API streaming.
func anthropicTurn(w http.ResponseWriter, s step, turn int) {
	sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_%d", turn), "type": "message", "role": "assistant", "model": "claude-test", "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 100, "output_tokens": 1, "cache_read_input_tokens": 40, "cache_creation_input_tokens": 7},
	}})
	sse(w, "ping", map[string]any{"type": "ping"})
	tool := func(name, input string) {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{
			"type": "tool_use", "id": fmt.Sprintf("toolu_%d", turn), "name": name, "input": map[string]any{}}})
		for _, part := range halves(input) {
			sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
		}
		sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	}
	stop := "tool_use"
	switch s {
	case stepScreenshot:
		tool("computer", `{"action":"screenshot"}`)
	case stepClick:
		tool("computer", `{"action":"left_click","coordinate":[100,200]}`)
	case stepType:
		tool("computer", `{"action":"type","text":"hello"}`)
	case stepBash:
		tool("bash", `{"command":"echo hi"}`)
	case stepEdit:
		tool("str_replace_based_edit_tool", `{"command":"create","path":"/home/user/a.txt","file_text":"one\ntwo\n"}`)
	case stepDone:
		stop = "end_turn"
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, part := range halves(finalText) {
			sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": part}})
		}
		sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	}
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 20}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// OpenAI Responses API streaming.
func openaiTurn(w http.ResponseWriter, s step, turn int) {
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		sse(w, typ, fields)
	}
	resp := func(status string, output []any) map[string]any {
		return map[string]any{
			"id": fmt.Sprintf("resp_%d", turn), "object": "response", "created_at": 1700000000, "status": status, "model": "computer-use-preview",
			"output": output, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{}, "temperature": 1, "top_p": 1,
			"incomplete_details": nil, "error": nil, "instructions": nil, "metadata": map[string]any{},
			"usage": map[string]any{"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
				"input_tokens_details": map[string]any{"cached_tokens": 40}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}},
		}
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{})})
	callID := fmt.Sprintf("call_%d", turn)
	computer := func(action map[string]any) map[string]any {
		return map[string]any{"type": "computer_call", "id": fmt.Sprintf("cu_%d", turn), "call_id": callID, "action": action, "pending_safety_checks": []any{}, "status": "completed"}
	}
	function := func(name, args string) map[string]any {
		return map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", turn), "call_id": callID, "name": name, "arguments": args, "status": "completed"}
	}
	var item map[string]any
	switch s {
	case stepScreenshot:
		item = computer(map[string]any{"type": "screenshot"})
	case stepClick:
		item = computer(map[string]any{"type": "click", "button": "left", "x": 100, "y": 200})
	case stepType:
		item = computer(map[string]any{"type": "type", "text": "hello"})
	case stepBash:
		item = function("bash", `{"command":"echo hi"}`)
	case stepEdit:
		item = function("str_replace_based_edit_tool", `{"command":"create","path":"/home/user/a.txt","file_text":"one\ntwo\n"}`)
	case stepDone:
		msgID := fmt.Sprintf("msg_%d", turn)
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "in_progress", "content": []any{}}})
		for _, part := range halves(finalText) {
			ev("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "delta": part, "logprobs": []any{}})
		}
		ev("response.output_text.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "text": finalText, "logprobs": []any{}})
		item = map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": finalText, "annotations": []any{}}}}
	}
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	ev("response.completed", map[string]any{"response": resp("completed", []any{item})})
}

// Gemini API streamGenerateContent?alt=sse.
func geminiTurn(w http.ResponseWriter, s step, _ int) {
	usage := map[string]any{"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120, "cachedContentTokenCount": 40}
	chunk := func(parts []any, finish string) {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		m := map[string]any{"candidates": []any{c}, "modelVersion": "gemini-test"}
		if finish != "" {
			c["finishReason"] = finish
			m["usageMetadata"] = usage
		}
		sse(w, "", m)
	}
	call := func(name string, args map[string]any) {
		chunk([]any{map[string]any{"functionCall": map[string]any{"name": name, "args": args}}}, "STOP")
	}
	switch s {
	case stepScreenshot:
		call("open_web_browser", map[string]any{})
	case stepClick:
		call("click_at", map[string]any{"x": 500, "y": 250})
	case stepType:
		call("type_text_at", map[string]any{"x": 500, "y": 250, "text": "hello", "press_enter": false, "clear_before_typing": false})
	case stepBash:
		call("bash", map[string]any{"command": "echo hi"})
	case stepEdit:
		call("str_replace_based_edit_tool", map[string]any{"command": "create", "path": "/home/user/a.txt", "file_text": "one\ntwo\n"})
	case stepDone:
		p := halves(finalText)
		chunk([]any{map[string]any{"text": p[0]}}, "")
		chunk([]any{map[string]any{"text": p[1]}}, "STOP")
	}
}

type wireCase struct {
	provider, model string
	authHeader      string
	wantAuth        func(key string) string
	wantPath        string
	baseURL         func(srv string) string
	turn            func(w http.ResponseWriter, s step, turn int)
	click           *displayv1.Point
	// toolResult is how the n-th tool result is named in the next request.
	toolResult func(turn int) string
	// errBody is an error answer that echoes the key, as some proxies do.
	errBody func(key string, status int) string
	// imageMark shows a screenshot in a request body.
	imageMark string
	// tools are how the first request offers the tools (and caching).
	tools []string
}

var wireCases = []wireCase{
	{
		provider: "anthropic", model: "claude-test", authHeader: "X-Api-Key", wantAuth: func(k string) string { return k },
		wantPath: "/v1/messages", baseURL: func(s string) string { return s }, turn: anthropicTurn,
		click:      &displayv1.Point{X: 100, Y: 200},
		toolResult: func(turn int) string { return fmt.Sprintf(`"tool_use_id":"toolu_%d"`, turn) },
		imageMark:  `"type":"base64"`,
		tools:      []string{`"type":"computer_20250124"`, `"display_width_px":1280`, `"type":"bash_20250124"`, `"type":"text_editor_20250728"`, `"cache_control":{"type":"ephemeral"}`},
		errBody: func(k string, code int) string {
			return `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: ` + k + `"}}`
		},
	},
	{
		provider: "openai", model: "computer-use-preview", authHeader: "Authorization", wantAuth: func(k string) string { return "Bearer " + k },
		wantPath: "/v1/responses", baseURL: func(s string) string { return s + "/v1/" }, turn: openaiTurn,
		click:      &displayv1.Point{X: 100, Y: 200},
		toolResult: func(turn int) string { return fmt.Sprintf(`"call_id":"call_%d"`, turn) },
		imageMark:  `data:image/png;base64,`,
		tools:      []string{`"type":"computer_use_preview"`, `"display_width":1280`, `"environment":"linux"`, `"name":"bash"`, `"name":"str_replace_based_edit_tool"`, `"stream":true`},
		errBody: func(k string, code int) string {
			return `{"error":{"message":"Incorrect API key provided: ` + k + `.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
		},
	},
	{
		provider: "gemini", model: "gemini-test", authHeader: "X-Goog-Api-Key", wantAuth: func(k string) string { return k },
		wantPath: "/v1beta/models/gemini-test:streamGenerateContent", baseURL: func(s string) string { return s }, turn: geminiTurn,
		// 500/1000 and 250/1000 of the 1280x800 screen.
		click:      &displayv1.Point{X: 640, Y: 200},
		toolResult: func(int) string { return `"functionResponse"` },
		imageMark:  `"inlineData"`,
		tools:      []string{`"computerUse":{"environment":"ENVIRONMENT_DESKTOP"}`, `"name":"bash"`, `"name":"str_replace_based_edit_tool"`},
		errBody: func(k string, code int) string {
			return fmt.Sprintf(`{"error":{"code":%d,"message":"API key not valid: %s","status":"UNAUTHENTICATED"}}`, code, k)
		},
	},
}

// logBuffer collects a service's log output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// allowing lets runs name a fake provider's base URL, as an operator lists
// a proxy with -provider-base-urls.
func allowing(cfg Config, baseURL string) Config {
	cfg.ProviderBaseURLs = append(slices.Clone(cfg.ProviderBaseURLs), baseURL)
	return cfg
}

func captureLogs(logs *logBuffer) func(*Deps) {
	return func(d *Deps) {
		d.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
}

// Each provider, through its official SDK, drives the whole loop: a
// screenshot, a click, typing, a bash command and a file edit reach the
// session, their results go back to the model, and the final streamed text
// reaches the run's event stream.
func TestProvidersOverTheirWireFormat(t *testing.T) {
	for _, tc := range wireCases {
		t.Run(tc.provider, func(t *testing.T) {
			key := "sk-" + tc.provider + "-wire-secret-0123456789"
			ws := newWireServer(t, tc.authHeader, tc.turn)
			logs := &logBuffer{}
			h := newHarness(t, allowing(DefaultConfig(), ws.srv.URL), nil, captureLogs(logs))
			ctx := context.Background()
			created, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{
				SessionId: "s-1", Prompt: "write the file", Provider: tc.provider, Model: tc.model,
				ApiKey: key, BaseUrl: tc.baseURL(ws.srv.URL),
			})
			if err != nil {
				t.Fatal(err)
			}
			id := created.GetRun().GetId()
			run := waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_FAILED)
			if run.GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED {
				t.Fatalf("run %v: %s", run.GetState(), run.GetStateReason())
			}
			if run.GetSteps() != int32(len(script)) || run.GetUsage().GetInputTokens() != 100*int64(len(script)) || run.GetUsage().GetCacheReadTokens() != 40*int64(len(script)) {
				t.Fatalf("run = %v", run)
			}

			// The effects are on the session.
			h.node.mu.Lock()
			acts := append([]*displayv1.Action(nil), h.node.actions...)
			h.node.mu.Unlock()
			var clicked, typed bool
			for _, a := range acts {
				if c := a.GetClick(); c != nil && c.GetAt().GetX() == tc.click.X && c.GetAt().GetY() == tc.click.Y {
					clicked = true
				}
				if a.GetType().GetText() == "hello" {
					typed = true
				}
			}
			if !clicked || !typed {
				t.Fatalf("display actions %v: clicked %v typed %v", acts, clicked, typed)
			}
			if got := h.node.shellCommands(); len(got) != 1 || got[0] != "echo hi" {
				t.Fatalf("shell commands = %v", got)
			}
			if got := h.node.file("a.txt"); got != "one\ntwo\n" {
				t.Fatalf("file = %q", got)
			}

			// Each request carried the key the SDK's way and the previous
			// turn's tool result.
			bodies, auth, paths := ws.requests()
			if len(bodies) != len(script) {
				t.Fatalf("%d requests, want %d", len(bodies), len(script))
			}
			for i := range bodies {
				if auth[i] != tc.wantAuth(key) || paths[i] != tc.wantPath {
					t.Fatalf("request %d: path %s, auth %q", i, paths[i], auth[i])
				}
				if i > 0 && !strings.Contains(bodies[i], tc.toolResult(i-1)) {
					t.Fatalf("request %d lacks the tool result %s: %.400s", i, tc.toolResult(i-1), bodies[i])
				}
			}
			for _, want := range tc.tools {
				if !strings.Contains(bodies[0], want) {
					t.Fatalf("first request lacks %s: %.1500s", want, bodies[0])
				}
			}
			if !strings.Contains(bodies[1], tc.imageMark) {
				t.Fatalf("the screenshot did not go back to the model")
			}
			if strings.Contains(bodies[2], "Accessibility tree") {
				t.Fatalf("a run without the accessibility_tree option gave the model a tree")
			}
			if !strings.Contains(bodies[4], "ran: echo hi") {
				t.Fatalf("the bash output did not go back to the model")
			}
			if !strings.Contains(bodies[5], "File created successfully") {
				t.Fatalf("the editor result did not go back to the model")
			}

			// The streamed text arrived as deltas, in order.
			evs := collect(t, h.client, id, 0)
			var text strings.Builder
			for _, ev := range evs {
				text.WriteString(ev.GetTextDelta())
			}
			if text.String() != finalText {
				t.Fatalf("streamed text = %q", text.String())
			}
			conv, err := h.svc.store.Conversation(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			list, err := h.client.ListRuns(ctx, &agentv1.ListRunsRequest{SessionId: "s-1"})
			if err != nil {
				t.Fatal(err)
			}
			assertNoKey(t, key, created, run, evs, list)
			assertNoSecret(t, key, "logs", logs.String())
			assertNoSecret(t, key, "stored conversation", string(conv))
		})
	}
}

func assertNoSecret(t *testing.T, key, what, s string) {
	t.Helper()
	if strings.Contains(s, key) {
		t.Fatalf("api key leaked in %s: %s", what, s)
	}
}

// A provider that echoes the key in its errors, transient (retried and
// logged) or final (the run's failure reason), never gets it into logs,
// errors, events or records.
func TestProviderErrorsNeverCarryTheKey(t *testing.T) {
	for _, tc := range wireCases {
		t.Run(tc.provider, func(t *testing.T) {
			key := "sk-" + tc.provider + "-leaky-secret-9876543210"
			ws := newWireServer(t, tc.authHeader, tc.turn)
			logs := &logBuffer{}
			cfg := allowing(DefaultConfig(), ws.srv.URL)
			cfg.Retries = 2
			cfg.RetryBackoff = time.Millisecond
			h := newHarness(t, cfg, nil, captureLogs(logs))
			ctx := context.Background()

			// Transient first: retried, each attempt logged.
			ws.mu.Lock()
			ws.failStatus, ws.failBody = http.StatusServiceUnavailable, tc.errBody(key, http.StatusServiceUnavailable)
			ws.mu.Unlock()
			created, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{
				SessionId: "s-1", Prompt: "x", Provider: tc.provider, Model: tc.model, ApiKey: key, BaseUrl: tc.baseURL(ws.srv.URL),
			})
			if err != nil {
				t.Fatal(err)
			}
			run := waitState(t, h.client, created.GetRun().GetId(), agentv1.RunState_RUN_STATE_FAILED)
			if !strings.Contains(run.GetStateReason(), "503") {
				t.Fatalf("reason = %q", run.GetStateReason())
			}
			if bodies, _, _ := ws.requests(); len(bodies) != 3 {
				t.Fatalf("%d attempts, want 3", len(bodies))
			}
			if !strings.Contains(logs.String(), "retrying") {
				t.Fatalf("retries not logged: %s", logs.String())
			}

			// Then final: the key is refused.
			ws.mu.Lock()
			ws.failStatus, ws.failBody = http.StatusUnauthorized, tc.errBody(key, http.StatusUnauthorized)
			ws.mu.Unlock()
			created2, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{
				SessionId: "s-1", Prompt: "x", Provider: tc.provider, Model: tc.model, ApiKey: key, BaseUrl: tc.baseURL(ws.srv.URL),
			})
			if err != nil {
				t.Fatal(err)
			}
			run2 := waitState(t, h.client, created2.GetRun().GetId(), agentv1.RunState_RUN_STATE_FAILED)
			if !strings.Contains(run2.GetStateReason(), "401") || !strings.Contains(run2.GetStateReason(), "[redacted]") {
				t.Fatalf("reason = %q", run2.GetStateReason())
			}
			evs := append(collect(t, h.client, created.GetRun().GetId(), 0), collect(t, h.client, created2.GetRun().GetId(), 0)...)
			list, err := h.client.ListRuns(ctx, &agentv1.ListRunsRequest{SessionId: "s-1"})
			if err != nil {
				t.Fatal(err)
			}
			assertNoKey(t, key, created, created2, run, run2, evs, list)
			assertNoSecret(t, key, "logs", logs.String())

			// A request the service refuses does not echo the key either.
			_, err = h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Provider: "nobody", ApiKey: key})
			if err == nil {
				t.Fatal("unknown provider accepted")
			}
			assertNoSecret(t, key, "error", err.Error())
		})
	}
}

// A provider's safety check pauses the run for approval; approving sends
// the acknowledgement back the way that provider expects it.
func TestSafetyChecksOverTheWire(t *testing.T) {
	cases := []struct {
		provider, model string
		base            func(string) string
		first           func(w http.ResponseWriter)
		ack             string
	}{
		{
			provider: "openai", model: "computer-use-preview", base: func(s string) string { return s + "/v1/" },
			first: func(w http.ResponseWriter) {
				item := map[string]any{"type": "computer_call", "id": "cu_0", "call_id": "call_0", "status": "completed",
					"action":                map[string]any{"type": "click", "button": "left", "x": 10, "y": 20},
					"pending_safety_checks": []any{map[string]any{"id": "sc_1", "code": "malicious_instructions", "message": "The page asks for a password."}}}
				sse(w, "response.completed", map[string]any{"type": "response.completed", "sequence_number": 0, "response": map[string]any{
					"id": "resp_0", "object": "response", "created_at": 1, "status": "completed", "model": "computer-use-preview", "output": []any{item},
					"usage": map[string]any{"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}})
			},
			ack: `"acknowledged_safety_checks":[{"code":"malicious_instructions","id":"sc_1","message":"The page asks for a password."}]`,
		},
		{
			provider: "gemini", model: "gemini-test", base: func(s string) string { return s },
			first: func(w http.ResponseWriter) {
				sse(w, "", map[string]any{"candidates": []any{map[string]any{"index": 0, "finishReason": "STOP", "content": map[string]any{"role": "model", "parts": []any{
					map[string]any{"functionCall": map[string]any{"name": "click_at", "args": map[string]any{"x": 10, "y": 20,
						"safety_decision": map[string]any{"decision": "require_confirmation", "explanation": "It buys something."}}}},
				}}}}})
			},
			ack: `"safety_acknowledgement":"true"`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.provider, func(t *testing.T) {
			ws := newWireServer(t, "", func(w http.ResponseWriter, _ step, turn int) {
				if turn == 0 {
					tc.first(w)
					return
				}
				map[string]func(http.ResponseWriter, step, int){"openai": openaiTurn, "gemini": geminiTurn}[tc.provider](w, stepDone, turn)
			})
			h := newHarness(t, allowing(DefaultConfig(), ws.srv.URL), nil)
			ctx := context.Background()
			resp, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{SessionId: "s-1", Prompt: "x", Provider: tc.provider, Model: tc.model, ApiKey: "k-123456", BaseUrl: tc.base(ws.srv.URL)})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetRun().GetId()
			r := waitState(t, h.client, id, agentv1.RunState_RUN_STATE_WAITING_APPROVAL)
			if len(r.GetPendingToolCall().GetSafetyChecks()) != 1 {
				t.Fatalf("pending = %v", r.GetPendingToolCall())
			}
			h.node.mu.Lock()
			n := len(h.node.actions)
			h.node.mu.Unlock()
			if n != 0 {
				t.Fatal("the checked action ran before approval")
			}
			if _, err := h.client.ApproveStep(ctx, &agentv1.ApproveStepRequest{RunId: id}); err != nil {
				t.Fatal(err)
			}
			waitState(t, h.client, id, agentv1.RunState_RUN_STATE_SUCCEEDED)
			bodies, _, _ := ws.requests()
			if len(bodies) != 2 || !strings.Contains(bodies[1], tc.ack) {
				t.Fatalf("acknowledgement missing from %.600s", bodies[len(bodies)-1])
			}
		})
	}
}
