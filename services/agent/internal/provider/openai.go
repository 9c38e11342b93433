package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// OpenAI talks to OpenAI's Responses API with its computer-use tool; bash
// and the editor are offered as function tools.
type OpenAI struct {
	client openai.Client
	key    string
}

// NewOpenAI returns the OpenAI provider.
func NewOpenAI(cfg Config) (*OpenAI, error) {
	opts := []option.RequestOption{option.WithMaxRetries(0)}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &OpenAI{client: openai.NewClient(opts...), key: cfg.APIKey}, nil
}

// Name implements Provider.
func (o *OpenAI) Name() string { return "openai" }

// DefaultScreen keeps screenshots within 1440x900.
func (o *OpenAI) DefaultScreen(w, h int) (int, int) { return fitScreen(w, h, 1440, 900) }

// previewModel says whether model takes the preview computer tool, which
// needs the screen size and environment and one action per call.
func previewModel(model string) bool { return strings.Contains(model, "computer-use-preview") }

var openaiFunctionTools = map[string]json.RawMessage{
	ToolBash:   json.RawMessage(`{"type":"function","name":"bash","description":"Run a command in the session's bash shell and return its output.","parameters":{"type":"object","properties":{"command":{"type":"string"},"restart":{"type":"boolean"}},"required":["command"]}}`),
	ToolEditor: json.RawMessage(`{"type":"function","name":"str_replace_based_edit_tool","description":"View, create and edit files: view, create, str_replace, insert, undo_edit.","parameters":{"type":"object","properties":{"command":{"type":"string","enum":["view","create","str_replace","insert","undo_edit"]},"path":{"type":"string"},"file_text":{"type":"string"},"old_str":{"type":"string"},"new_str":{"type":"string"},"insert_line":{"type":"integer"},"view_range":{"type":"array","items":{"type":"integer"}}},"required":["command","path"]}}`),
}

// Turn implements Provider.
func (o *OpenAI) Turn(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error) {
	params := responses.ResponseNewParams{
		Model:           responses.ResponsesModel(req.Model),
		MaxOutputTokens: openai.Int(int64(max(req.MaxTokens, 16))),
		Store:           openai.Bool(false),
	}
	if req.System != "" {
		params.Instructions = openai.String(req.System)
	}
	var tools []any
	if req.Tools.ScreenWidth > 0 {
		if previewModel(req.Model) {
			params.Truncation = responses.ResponseNewParamsTruncationAuto
			tools = append(tools, map[string]any{"type": "computer_use_preview", "display_width": req.Tools.ScreenWidth, "display_height": req.Tools.ScreenHeight, "environment": "linux"})
		} else {
			tools = append(tools, map[string]any{"type": "computer"})
		}
	}
	if req.Tools.Bash {
		tools = append(tools, openaiFunctionTools[ToolBash])
	}
	if req.Tools.Editor {
		tools = append(tools, openaiFunctionTools[ToolEditor])
	}
	// Input and tools are written as the wire JSON so replayed output items
	// travel back exactly as the API sent them.
	opts := []option.RequestOption{option.WithJSONSet("input", openaiInput(req.Messages))}
	if len(tools) > 0 {
		opts = append(opts, option.WithJSONSet("tools", tools))
	}
	stream := o.client.Responses.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	var done *responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			onDelta(Delta{Kind: DeltaText, Text: ev.Delta})
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			onDelta(Delta{Kind: DeltaThinking, Text: ev.Delta})
		case "response.completed", "response.incomplete":
			r := ev.Response
			done = &r
		case "response.failed":
			msg := scrub(ev.Response.Error.Message, o.key)
			return nil, &Error{Provider: "openai", Transient: strings.Contains(string(ev.Response.Error.Code), "server_error") || strings.Contains(string(ev.Response.Error.Code), "rate_limit"), Msg: msg}
		case "error":
			return nil, &Error{Provider: "openai", Transient: strings.Contains(ev.Code, "server_error") || strings.Contains(ev.Code, "rate_limit"), Msg: scrub(ev.Message, o.key)}
		}
	}
	if err := stream.Err(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ae *openai.Error
		if errors.As(err, &ae) {
			return nil, &Error{Provider: "openai", StatusCode: ae.StatusCode, Transient: transientStatus(ae.StatusCode), Msg: scrub(ae.Message, o.key)}
		}
		return nil, &Error{Provider: "openai", Transient: true, Msg: scrub(err.Error(), o.key)}
	}
	if done == nil {
		return nil, &Error{Provider: "openai", Transient: true, Msg: "stream ended before the response completed"}
	}
	out := &Response{
		Model:   string(done.Model),
		Message: Message{Role: RoleAssistant},
		Usage: Usage{
			InputTokens:     done.Usage.InputTokens,
			OutputTokens:    done.Usage.OutputTokens,
			CacheReadTokens: done.Usage.InputTokensDetails.CachedTokens,
		},
		StopReason: "end_turn",
	}
	if done.IncompleteDetails.Reason != "" {
		out.StopReason = done.IncompleteDetails.Reason
	}
	for _, item := range done.Output {
		raw := json.RawMessage(item.RawJSON())
		b := Block{Kind: BlockNative, Native: raw, Provider: "openai"}
		switch item.Type {
		case "message":
			var sb strings.Builder
			for _, c := range item.Content {
				sb.WriteString(c.Text)
			}
			b.Kind, b.Text = BlockText, sb.String()
		case "computer_call":
			var call struct {
				Action  json.RawMessage `json:"action"`
				Actions json.RawMessage `json:"actions"`
			}
			_ = json.Unmarshal(raw, &call)
			input := call.Actions
			if len(input) == 0 || string(input) == "null" {
				input = json.RawMessage("[" + string(call.Action) + "]")
			}
			tc := &ToolCall{ID: item.CallID, Name: ToolComputer, Input: input, Dialect: DialectOpenAI}
			for _, sc := range item.PendingSafetyChecks {
				tc.SafetyChecks = append(tc.SafetyChecks, SafetyCheck{ID: sc.ID, Code: sc.Code, Message: sc.Message})
			}
			b.Kind, b.ToolCall = BlockToolCall, tc
			out.StopReason = "tool_use"
		case "function_call":
			var call struct {
				Arguments string `json:"arguments"`
			}
			_ = json.Unmarshal(raw, &call)
			args := json.RawMessage(call.Arguments)
			if !json.Valid(args) {
				args = json.RawMessage("{}")
			}
			b.Kind, b.ToolCall = BlockToolCall, &ToolCall{ID: item.CallID, Name: item.Name, Input: args}
			out.StopReason = "tool_use"
		}
		out.Message.Blocks = append(out.Message.Blocks, b)
	}
	return out, nil
}

func openaiInput(msgs []Message) []any {
	var items []any
	for _, m := range msgs {
		for _, b := range m.Blocks {
			if b.Provider == "openai" && len(b.Native) > 0 {
				items = append(items, b.Native)
				continue
			}
			switch b.Kind {
			case BlockText:
				if b.Text == "" {
					continue
				}
				typ := "input_text"
				if m.Role == RoleAssistant {
					typ = "output_text"
				}
				items = append(items, map[string]any{"role": string(m.Role), "content": []any{map[string]any{"type": typ, "text": b.Text}}})
			case BlockImage:
				if b.Image != nil && !b.Image.Elided {
					items = append(items, map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_image", "image_url": dataURL(b.Image)}}})
				}
			case BlockToolResult:
				r := b.ToolResult
				if r.Name == ToolComputer {
					out := map[string]any{"type": "computer_call_output", "call_id": r.CallID}
					if r.Image != nil && !r.Image.Elided {
						out["output"] = map[string]any{"type": "computer_screenshot", "image_url": dataURL(r.Image)}
					} else {
						// An elided screenshot still needs an output; a 1x1 image
						// keeps the item valid at almost no token cost.
						out["output"] = map[string]any{"type": "computer_screenshot", "image_url": "data:image/png;base64," + onePixelPNG}
					}
					if len(r.Acknowledged) > 0 {
						var acks []any
						for _, a := range r.Acknowledged {
							acks = append(acks, map[string]any{"id": a.ID, "code": a.Code, "message": a.Message})
						}
						out["acknowledged_safety_checks"] = acks
					}
					items = append(items, out)
					if r.Tree != "" && r.Image != nil && !r.Image.Elided {
						// A computer call's output holds a screenshot only:
						// the tree beside it is the user's next input.
						items = append(items, map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": r.Tree}}})
					}
					continue
				}
				text := r.Text
				if r.IsError {
					text = "error: " + text
				}
				items = append(items, map[string]any{"type": "function_call_output", "call_id": r.CallID, "output": text})
			}
		}
	}
	return items
}

const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

func dataURL(img *Image) string {
	return "data:" + img.MediaType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}
