package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genai"
)

// Gemini talks to Google's Gemini API with its computer-use tool, whose
// predefined functions (click_at, type_text_at, ...) take coordinates on a
// 0-999 grid; bash and the editor are function declarations.
type Gemini struct {
	client *genai.Client
	key    string
}

// NewGemini returns the Gemini provider; cfg.Platform "vertex" uses Vertex AI
// with cfg.Project and cfg.Region.
func NewGemini(ctx context.Context, cfg Config) (*Gemini, error) {
	cc := &genai.ClientConfig{APIKey: cfg.APIKey, Backend: genai.BackendGeminiAPI}
	if cfg.Platform == "vertex" {
		cc = &genai.ClientConfig{Backend: genai.BackendVertexAI, Project: cfg.Project, Location: cfg.Region}
	}
	if cfg.BaseURL != "" {
		cc.HTTPOptions.BaseURL = cfg.BaseURL
	}
	c, err := genai.NewClient(ctx, cc)
	if err != nil {
		return nil, &Error{Provider: "gemini", Msg: scrub(err.Error(), cfg.APIKey)}
	}
	return &Gemini{client: c, key: cfg.APIKey}, nil
}

// Name implements Provider.
func (g *Gemini) Name() string { return "gemini" }

// DefaultScreen: Gemini works in normalised coordinates; 1440x900 is the
// screenshot size it is documented with.
func (g *Gemini) DefaultScreen(w, h int) (int, int) { return fitScreen(w, h, 1440, 900) }

var geminiFunctions = map[string]*genai.FunctionDeclaration{
	ToolBash: {Name: ToolBash, Description: "Run a command in the session's bash shell and return its output.",
		ParametersJsonSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"restart":{"type":"boolean"}},"required":["command"]}`)},
	ToolEditor: {Name: ToolEditor, Description: "View, create and edit files: view, create, str_replace, insert, undo_edit.",
		ParametersJsonSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","enum":["view","create","str_replace","insert","undo_edit"]},"path":{"type":"string"},"file_text":{"type":"string"},"old_str":{"type":"string"},"new_str":{"type":"string"},"insert_line":{"type":"integer"},"view_range":{"type":"array","items":{"type":"integer"}}},"required":["command","path"]}`)},
}

// Turn implements Provider.
func (g *Gemini) Turn(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error) {
	cfg := &genai.GenerateContentConfig{MaxOutputTokens: int32(max(req.MaxTokens, 16))}
	if req.System != "" {
		cfg.SystemInstruction = genai.NewContentFromText(req.System, genai.RoleUser)
	}
	if req.ThinkingBudget > 0 {
		b := int32(req.ThinkingBudget)
		cfg.ThinkingConfig = &genai.ThinkingConfig{IncludeThoughts: true, ThinkingBudget: &b}
	}
	if req.Tools.ScreenWidth > 0 {
		cfg.Tools = append(cfg.Tools, &genai.Tool{ComputerUse: &genai.ComputerUse{Environment: genai.EnvironmentDesktop}})
	}
	var fns []*genai.FunctionDeclaration
	if req.Tools.Bash {
		fns = append(fns, geminiFunctions[ToolBash])
	}
	if req.Tools.Editor {
		fns = append(fns, geminiFunctions[ToolEditor])
	}
	if len(fns) > 0 {
		cfg.Tools = append(cfg.Tools, &genai.Tool{FunctionDeclarations: fns})
	}
	out := &Response{Message: Message{Role: RoleAssistant}, StopReason: "end_turn"}
	var parts []*genai.Part
	for chunk, err := range g.client.Models.GenerateContentStream(ctx, req.Model, geminiContents(req.Messages), cfg) {
		if err != nil {
			return nil, g.wrapErr(ctx, err)
		}
		if chunk.ModelVersion != "" {
			out.Model = chunk.ModelVersion
		}
		if u := chunk.UsageMetadata; u != nil {
			out.Usage = Usage{InputTokens: int64(u.PromptTokenCount), OutputTokens: int64(u.CandidatesTokenCount + u.ThoughtsTokenCount), CacheReadTokens: int64(u.CachedContentTokenCount)}
		}
		if len(chunk.Candidates) == 0 || chunk.Candidates[0].Content == nil {
			continue
		}
		c := chunk.Candidates[0]
		if c.FinishReason != "" {
			out.StopReason = strings.ToLower(string(c.FinishReason))
		}
		for _, p := range c.Content.Parts {
			if p.Text != "" {
				if p.Thought {
					onDelta(Delta{Kind: DeltaThinking, Text: p.Text})
				} else {
					onDelta(Delta{Kind: DeltaText, Text: p.Text})
				}
			}
			parts = append(parts, p)
		}
	}
	n := 0
	for _, p := range parts {
		native, _ := json.Marshal(p)
		switch {
		case p.FunctionCall != nil:
			n++
			fc := p.FunctionCall
			id := fc.ID
			if id == "" {
				id = fmt.Sprintf("gemini-%d", n)
			}
			tc := &ToolCall{ID: id, Name: fc.Name}
			if fc.Name != ToolBash && fc.Name != ToolEditor {
				// A predefined computer-use function: keep its name with the args.
				tc.Name, tc.Dialect = ToolComputer, DialectGemini
				tc.Input, _ = json.Marshal(map[string]any{"name": fc.Name, "args": fc.Args})
				if sd, ok := fc.Args["safety_decision"].(map[string]any); ok && sd["decision"] == "require_confirmation" {
					msg, _ := sd["explanation"].(string)
					tc.SafetyChecks = []SafetyCheck{{ID: id, Code: "require_confirmation", Message: msg}}
				}
			} else {
				tc.Input, _ = json.Marshal(fc.Args)
			}
			out.Message.Blocks = append(out.Message.Blocks, Block{Kind: BlockToolCall, ToolCall: tc, Native: native, Provider: "gemini"})
			out.StopReason = "tool_use"
		case p.Thought:
			out.Message.Blocks = append(out.Message.Blocks, Block{Kind: BlockThinking, Text: p.Text, Native: native, Provider: "gemini"})
		case p.Text != "":
			out.Message.Blocks = append(out.Message.Blocks, Block{Kind: BlockText, Text: p.Text, Native: native, Provider: "gemini"})
		}
	}
	out.Message.Blocks = mergeText(out.Message.Blocks)
	return out, nil
}

// mergeText joins adjacent streamed text parts without signatures, so a
// reply is one block rather than one per chunk.
func mergeText(bs []Block) []Block {
	var out []Block
	for _, b := range bs {
		if n := len(out); n > 0 && b.Kind == BlockText && out[n-1].Kind == BlockText {
			var prev, cur genai.Part
			_ = json.Unmarshal(out[n-1].Native, &prev)
			_ = json.Unmarshal(b.Native, &cur)
			if len(cur.ThoughtSignature) == 0 {
				prev.Text += cur.Text
				out[n-1].Text += b.Text
				out[n-1].Native, _ = json.Marshal(&prev)
				continue
			}
		}
		out = append(out, b)
	}
	return out
}

func (g *Gemini) wrapErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ae genai.APIError
	if errors.As(err, &ae) {
		return &Error{Provider: "gemini", StatusCode: ae.Code, Transient: transientStatus(ae.Code), Msg: scrub(ae.Message, g.key)}
	}
	var ap *genai.APIError
	if errors.As(err, &ap) {
		return &Error{Provider: "gemini", StatusCode: ap.Code, Transient: transientStatus(ap.Code), Msg: scrub(ap.Message, g.key)}
	}
	return &Error{Provider: "gemini", Transient: true, Msg: scrub(err.Error(), g.key)}
}

func geminiContents(msgs []Message) []*genai.Content {
	var out []*genai.Content
	// A function response must name the predefined function it answers.
	fnName := map[string]string{}
	for _, m := range msgs {
		role := genai.RoleUser
		if m.Role == RoleAssistant {
			role = genai.RoleModel
		}
		c := &genai.Content{Role: role}
		for _, b := range m.Blocks {
			if b.Provider == "gemini" && len(b.Native) > 0 {
				var p genai.Part
				if json.Unmarshal(b.Native, &p) == nil {
					c.Parts = append(c.Parts, &p)
					if p.FunctionCall != nil && b.ToolCall != nil {
						fnName[b.ToolCall.ID] = p.FunctionCall.Name
					}
				}
				continue
			}
			switch b.Kind {
			case BlockText:
				if b.Text != "" {
					c.Parts = append(c.Parts, genai.NewPartFromText(b.Text))
				}
			case BlockImage:
				if b.Image != nil && !b.Image.Elided {
					c.Parts = append(c.Parts, genai.NewPartFromBytes(b.Image.Data, b.Image.MediaType))
				}
			case BlockToolCall:
				var args map[string]any
				_ = json.Unmarshal(b.ToolCall.Input, &args)
				c.Parts = append(c.Parts, genai.NewPartFromFunctionCall(b.ToolCall.Name, args))
			case BlockToolResult:
				r := b.ToolResult
				name := r.Name
				if n, ok := fnName[r.CallID]; ok {
					name = n
				}
				resp := map[string]any{}
				if r.Text != "" {
					resp["output"] = r.Text
				}
				if r.IsError {
					resp["error"] = r.Text
				}
				if r.URL != "" {
					resp["url"] = r.URL
				}
				if r.Tree != "" && r.Image != nil && !r.Image.Elided {
					resp["accessibility_tree"] = r.Tree
				}
				if len(r.Acknowledged) > 0 {
					resp["safety_acknowledgement"] = "true"
				}
				fr := &genai.FunctionResponse{ID: r.CallID, Name: name, Response: resp}
				if r.Image != nil && !r.Image.Elided {
					fr.Parts = []*genai.FunctionResponsePart{{InlineData: &genai.FunctionResponseBlob{MIMEType: r.Image.MediaType, Data: r.Image.Data}}}
				}
				c.Parts = append(c.Parts, &genai.Part{FunctionResponse: fr})
			}
		}
		if len(c.Parts) > 0 {
			out = append(out, c)
		}
	}
	return out
}
