package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The task suite's models: each is a script of moves, played back by a
// loopback server that answers in one provider's wire format (Anthropic
// Messages, OpenAI Responses, Gemini streamGenerateContent, all as
// server-sent events), so the agent's official SDKs parse them exactly as
// they parse a real model's answers. Coordinates are screen pixels of a
// 1280x800 display, which every provider keeps as it is; Gemini's are
// turned into its 0-999 grid.

const (
	taskScreenW, taskScreenH = 1280, 800
)

// move is one thing a scripted model does on its turn.
type move struct {
	kind string // look, click, type, key, bash, create, replace, done
	x, y int
	// text is what to type, the key combination (xdotool style, "ctrl+l"),
	// the bash command, or the file's content.
	text string
	// enter presses Enter after typing (Gemini's type_text_at does it in
	// the same call; the others send a key move).
	enter bool
	// keep, for Gemini's type_text_at, keeps what the field holds
	// (clear_before_typing false); by default it is cleared first.
	keep bool
	path string
	old  string
	// until, for a look, is what the model waits to see: it looks again
	// (a screenshot each turn) until until says so; without it, it looks
	// once.
	until func() bool
	// what a look waits for, for the failure message.
	what string
	// press, for a look, are key combinations the model presses in turn,
	// one on each turn it waits, instead of only looking.
	press []string
}

func look(what string, until func() bool) move { return move{kind: "look", until: until, what: what} }
func click(x, y int) move                      { return move{kind: "click", x: x, y: y} }
func typeAt(x, y int, text string) move        { return move{kind: "type", x: x, y: y, text: text} }
func typeEnterAt(x, y int, text string) move {
	return move{kind: "type", x: x, y: y, text: text, enter: true}
}
func appendAt(x, y int, text string) move {
	return move{kind: "type", x: x, y: y, text: text, keep: true}
}
func keys(combo string) move           { return move{kind: "key", text: combo} }
func bash(cmd string) move             { return move{kind: "bash", text: cmd} }
func create(path, text string) move    { return move{kind: "create", path: path, text: text} }
func replace(path, old, n string) move { return move{kind: "replace", path: path, old: old, text: n} }

// maxLooks bounds how often a scripted model looks for one thing.
const maxLooks = 90

// scriptedModel serves one task's script in one provider's wire format.
type scriptedModel struct {
	provider string
	srv      *httptest.Server
	mu       sync.Mutex
	moves    []move
	next     int
	looks    int
	turns    int
	// stuck says what the model was still waiting for when it gave up.
	stuck string
	// bodies are the requests' bodies, for failure messages.
	bodies []string
}

func newScriptedModel(t *testing.T, provider string, moves []move) *scriptedModel {
	m := &scriptedModel{provider: provider, moves: append(moves, move{kind: "done"})}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

// baseURL is what a run names as its provider's base URL.
func (m *scriptedModel) baseURL() string {
	if m.provider == "openai" {
		return m.srv.URL + "/v1/"
	}
	return m.srv.URL
}

func (m *scriptedModel) model() string {
	return map[string]string{"anthropic": "claude-sonnet-4-5", "openai": "computer-use-preview", "gemini": "gemini-2.5-computer-use-preview-10-2025"}[m.provider]
}

// nextMove picks the move of this turn: a look whose thing has appeared
// is passed over, as a model goes on once it sees what it waited for.
func (m *scriptedModel) nextMove() move {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.turns++
	for m.next < len(m.moves) {
		mv := m.moves[m.next]
		if mv.kind != "look" {
			m.next++
			return mv
		}
		if (mv.until == nil && m.looks > 0) || (mv.until != nil && mv.until()) {
			// Seen: a look for nothing in particular is one screenshot.
			m.next++
			m.looks = 0
			continue
		}
		if m.looks >= maxLooks {
			// Gives up, saying so; the checker tells the truth anyway.
			m.stuck = mv.what
			m.next = len(m.moves)
			return move{kind: "done", text: "I could not see " + mv.what + "."}
		}
		m.looks++
		if m.looks > 1 {
			// A model takes its time to answer; no need to hammer the
			// desktop with screenshots while a page loads.
			time.Sleep(250 * time.Millisecond)
		}
		if len(mv.press) > 0 {
			return keys(mv.press[(m.looks-1)%len(mv.press)])
		}
		return mv
	}
	return move{kind: "done"}
}

func (m *scriptedModel) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.bodies = append(m.bodies, string(body))
	turn := len(m.bodies)
	m.mu.Unlock()
	mv := m.nextMove()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	switch m.provider {
	case "anthropic":
		anthropicMove(w, mv, turn)
	case "openai":
		openaiMove(w, mv, turn)
	case "gemini":
		geminiMove(w, mv)
	}
}

var base64Run = regexp.MustCompile(`[A-Za-z0-9+/=]{200,}`)

// lastTold is the model's last request, images left out, for a failure
// message.
func (m *scriptedModel) lastTold() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.bodies) == 0 {
		return "nothing"
	}
	s := base64Run.ReplaceAllString(m.bodies[len(m.bodies)-1], "<image>")
	if len(s) > 1500 {
		s = "…" + s[len(s)-1500:]
	}
	return s
}

// event writes one server-sent event and flushes it.
func event(w http.ResponseWriter, name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	if name != "" {
		fmt.Fprintf(w, "event: %s\n", name)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func doneText(mv move) string {
	if mv.text != "" {
		return mv.text
	}
	return "The task is done."
}

// anthropicMove answers as the Messages API streams: Claude's computer,
// bash and text editor tools.
func anthropicMove(w http.ResponseWriter, mv move, turn int) {
	event(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_%d", turn), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 1500, "output_tokens": 1},
	}})
	tool := func(name string, input map[string]any) {
		b, _ := json.Marshal(input)
		event(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{
			"type": "tool_use", "id": fmt.Sprintf("toolu_%d", turn), "name": name, "input": map[string]any{}}})
		event(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(b)}})
		event(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	}
	stop := "tool_use"
	switch mv.kind {
	case "look":
		tool("computer", map[string]any{"action": "screenshot"})
	case "click":
		tool("computer", map[string]any{"action": "left_click", "coordinate": []int{mv.x, mv.y}})
	case "type":
		text := mv.text
		if mv.enter {
			text += "\n"
		}
		tool("computer", map[string]any{"action": "type", "text": text})
	case "key":
		tool("computer", map[string]any{"action": "key", "text": mv.text})
	case "bash":
		tool("bash", map[string]any{"command": mv.text})
	case "create":
		tool("str_replace_based_edit_tool", map[string]any{"command": "create", "path": mv.path, "file_text": mv.text})
	case "replace":
		tool("str_replace_based_edit_tool", map[string]any{"command": "str_replace", "path": mv.path, "old_str": mv.old, "new_str": mv.text})
	default:
		stop = "end_turn"
		event(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		event(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": doneText(mv)}})
		event(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	}
	event(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 30}})
	event(w, "message_stop", map[string]any{"type": "message_stop"})
}

// openaiKeys spells a key combination as OpenAI's computer-use model does:
// a list of key names.
func openaiKeys(combo string) []string {
	var out []string
	for _, k := range strings.Split(combo, "+") {
		switch strings.ToLower(k) {
		case "ctrl":
			k = "CTRL"
		case "alt":
			k = "ALT"
		case "shift":
			k = "SHIFT"
		case "return":
			k = "ENTER"
		case "tab":
			k = "TAB"
		case "escape":
			k = "ESC"
		case "down":
			k = "ARROWDOWN"
		case "up":
			k = "ARROWUP"
		case "left":
			k = "ARROWLEFT"
		case "right":
			k = "ARROWRIGHT"
		case "space":
			k = "SPACE"
		}
		out = append(out, k)
	}
	return out
}

// openaiMove answers as the Responses API streams: computer_call items for
// the screen, function calls for bash and the editor.
func openaiMove(w http.ResponseWriter, mv move, turn int) {
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		event(w, typ, fields)
	}
	resp := func(status string, output []any) map[string]any {
		return map[string]any{
			"id": fmt.Sprintf("resp_%d", turn), "object": "response", "created_at": 1700000000, "status": status, "model": "computer-use-preview",
			"output": output, "parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{}, "temperature": 1, "top_p": 1,
			"incomplete_details": nil, "error": nil, "instructions": nil, "metadata": map[string]any{},
			"usage": map[string]any{"input_tokens": 1500, "output_tokens": 30, "total_tokens": 1530,
				"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}},
		}
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{})})
	callID := fmt.Sprintf("call_%d", turn)
	computer := func(actions ...map[string]any) map[string]any {
		// The preview model sends one action a call.
		return map[string]any{"type": "computer_call", "id": fmt.Sprintf("cu_%d", turn), "call_id": callID, "action": actions[0], "pending_safety_checks": []any{}, "status": "completed"}
	}
	function := func(name string, args map[string]any) map[string]any {
		b, _ := json.Marshal(args)
		return map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", turn), "call_id": callID, "name": name, "arguments": string(b), "status": "completed"}
	}
	var items []any
	switch mv.kind {
	case "look":
		items = append(items, computer(map[string]any{"type": "screenshot"}))
	case "click":
		items = append(items, computer(map[string]any{"type": "click", "button": "left", "x": mv.x, "y": mv.y}))
	case "type":
		items = append(items, computer(map[string]any{"type": "type", "text": mv.text}))
		if mv.enter {
			// A second call in the same answer.
			callID = fmt.Sprintf("call_%d_enter", turn)
			item := computer(map[string]any{"type": "keypress", "keys": []string{"ENTER"}})
			item["id"] = fmt.Sprintf("cu_%d_enter", turn)
			items = append(items, item)
		}
	case "key":
		items = append(items, computer(map[string]any{"type": "keypress", "keys": openaiKeys(mv.text)}))
	case "bash":
		items = append(items, function("bash", map[string]any{"command": mv.text}))
	case "create":
		items = append(items, function("str_replace_based_edit_tool", map[string]any{"command": "create", "path": mv.path, "file_text": mv.text}))
	case "replace":
		items = append(items, function("str_replace_based_edit_tool", map[string]any{"command": "str_replace", "path": mv.path, "old_str": mv.old, "new_str": mv.text}))
	default:
		msgID := fmt.Sprintf("msg_%d", turn)
		text := doneText(mv)
		ev("response.output_item.added", map[string]any{"output_index": 0, "item": map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "in_progress", "content": []any{}}})
		ev("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []any{}})
		ev("response.output_text.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{}})
		items = append(items, map[string]any{"type": "message", "id": msgID, "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	}
	for i, item := range items {
		ev("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	ev("response.completed", map[string]any{"response": resp("completed", items)})
}

// geminiKeys spells a key combination as Gemini's computer-use model does.
func geminiKeys(combo string) string {
	parts := strings.Split(combo, "+")
	for i, k := range parts {
		switch strings.ToLower(k) {
		case "ctrl":
			parts[i] = "Control"
		case "alt":
			parts[i] = "Alt"
		case "shift":
			parts[i] = "Shift"
		case "return":
			parts[i] = "Enter"
		case "tab":
			parts[i] = "Tab"
		case "escape":
			parts[i] = "Escape"
		case "down":
			parts[i] = "ArrowDown"
		case "up":
			parts[i] = "ArrowUp"
		case "left":
			parts[i] = "ArrowLeft"
		case "right":
			parts[i] = "ArrowRight"
		case "space":
			parts[i] = "Space"
		}
	}
	return strings.Join(parts, "+")
}

// geminiMove answers as streamGenerateContent?alt=sse does: the computer
// use functions on Gemini's 0-999 grid, and bash and the editor as
// functions of their own.
func geminiMove(w http.ResponseWriter, mv move) {
	usage := map[string]any{"promptTokenCount": 1500, "candidatesTokenCount": 30, "totalTokenCount": 1530}
	chunk := func(parts []any) {
		event(w, "", map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0, "finishReason": "STOP"}},
			"usageMetadata": usage, "modelVersion": "gemini-2.5-computer-use-preview-10-2025"})
	}
	call := func(name string, args map[string]any) {
		chunk([]any{map[string]any{"functionCall": map[string]any{"name": name, "args": args}}})
	}
	gx := func(x int) int { return x * 1000 / taskScreenW }
	gy := func(y int) int { return y * 1000 / taskScreenH }
	switch mv.kind {
	case "look":
		// Gemini has no screenshot function; every function's answer is
		// one, and this one does nothing else.
		call("open_web_browser", map[string]any{})
	case "click":
		call("click_at", map[string]any{"x": gx(mv.x), "y": gy(mv.y)})
	case "type":
		call("type_text_at", map[string]any{"x": gx(mv.x), "y": gy(mv.y), "text": mv.text, "press_enter": mv.enter, "clear_before_typing": !mv.keep})
	case "key":
		call("key_combination", map[string]any{"keys": geminiKeys(mv.text)})
	case "bash":
		call("bash", map[string]any{"command": mv.text})
	case "create":
		call("str_replace_based_edit_tool", map[string]any{"command": "create", "path": mv.path, "file_text": mv.text})
	case "replace":
		call("str_replace_based_edit_tool", map[string]any{"command": "str_replace", "path": mv.path, "old_str": mv.old, "new_str": mv.text})
	default:
		chunk([]any{map[string]any{"text": doneText(mv)}})
	}
}
