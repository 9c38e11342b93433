package provider

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/bedrock"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/vertex"
)

// Anthropic computer tool versions.
const (
	Computer20250124 = "computer_20250124"
	Computer20251124 = "computer_20251124"
)

// Anthropic talks to Claude through the Messages API (beta tools).
type Anthropic struct {
	client anthropic.Client
	key    string
}

// NewAnthropic returns the Anthropic provider. cfg.Platform "bedrock" or
// "vertex" sends the same requests through those clouds with their own
// credentials (AWS default chain; Google application default credentials).
func NewAnthropic(ctx context.Context, cfg Config) (*Anthropic, error) {
	// The loop retries with its own backoff and records each attempt.
	opts := []option.RequestOption{option.WithMaxRetries(0)}
	switch cfg.Platform {
	case "bedrock":
		opts = append(opts, bedrock.WithLoadDefaultConfig(ctx))
	case "vertex":
		opts = append(opts, vertex.WithGoogleAuth(ctx, cfg.Region, cfg.Project))
	case "":
	default:
		return nil, errors.New("anthropic: platform must be empty, bedrock or vertex")
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &Anthropic{client: anthropic.NewClient(opts...), key: cfg.APIKey}, nil
}

// Name implements Provider.
func (a *Anthropic) Name() string { return "anthropic" }

// DefaultScreen keeps screenshots within 1280x800, where Claude's pointing
// is most accurate and images are not downscaled by the API.
func (a *Anthropic) DefaultScreen(w, h int) (int, int) { return fitScreen(w, h, 1280, 800) }

// Turn implements Provider.
func (a *Anthropic) Turn(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error) {
	params := anthropic.BetaMessageNewParams{
		Model:     anthropic.Model(req.Model),
		MaxTokens: int64(max(req.MaxTokens, 1)),
		Messages:  anthropicMessages(req.Messages),
		Tools:     anthropicTools(req.Tools),
	}
	beta := anthropic.AnthropicBeta("computer-use-2025-01-24")
	if req.Tools.ComputerVersion == Computer20251124 {
		beta = "computer-use-2025-11-24"
	}
	params.Betas = []anthropic.AnthropicBeta{beta}
	if req.System != "" {
		// Caching the system prompt and tools saves their tokens on every step.
		params.System = []anthropic.BetaTextBlockParam{{Text: req.System, CacheControl: anthropic.NewBetaCacheControlEphemeralParam()}}
	}
	if req.ThinkingBudget > 0 {
		params.Thinking = anthropic.BetaThinkingConfigParamOfEnabled(int64(req.ThinkingBudget))
	}
	stream := a.client.Beta.Messages.NewStreaming(ctx, params)
	defer stream.Close()
	var msg anthropic.BetaMessage
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, &Error{Provider: "anthropic", Msg: scrub(err.Error(), a.key)}
		}
		if ev.Type == "content_block_delta" {
			switch ev.Delta.Type {
			case "text_delta":
				onDelta(Delta{Kind: DeltaText, Text: ev.Delta.Text})
			case "thinking_delta":
				onDelta(Delta{Kind: DeltaThinking, Text: ev.Delta.Thinking})
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, a.wrapErr(ctx, err)
	}
	out := &Response{
		Model:      string(msg.Model),
		StopReason: string(msg.StopReason),
		Usage: Usage{
			InputTokens:      msg.Usage.InputTokens,
			OutputTokens:     msg.Usage.OutputTokens,
			CacheReadTokens:  msg.Usage.CacheReadInputTokens,
			CacheWriteTokens: msg.Usage.CacheCreationInputTokens,
		},
		Message: Message{Role: RoleAssistant},
	}
	for _, c := range msg.Content {
		switch c.Type {
		case "text":
			out.Message.Blocks = append(out.Message.Blocks, Block{Kind: BlockText, Text: c.Text})
		case "thinking":
			out.Message.Blocks = append(out.Message.Blocks, Block{Kind: BlockThinking, Text: c.Thinking, Signature: c.Signature, Provider: "anthropic"})
		case "redacted_thinking":
			raw, _ := json.Marshal(map[string]string{"type": "redacted_thinking", "data": c.Data})
			out.Message.Blocks = append(out.Message.Blocks, Block{Kind: BlockNative, Native: raw, Provider: "anthropic"})
		case "tool_use":
			input := json.RawMessage(c.Input)
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			out.Message.Blocks = append(out.Message.Blocks, Block{Kind: BlockToolCall, ToolCall: &ToolCall{ID: c.ID, Name: c.Name, Input: input, Dialect: DialectAnthropic}})
		}
	}
	return out, nil
}

func (a *Anthropic) wrapErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		msg := scrub(ae.RawJSON(), a.key)
		overloaded := strings.Contains(msg, "overloaded") || strings.Contains(msg, "rate_limit") || strings.Contains(msg, "api_error")
		return &Error{Provider: "anthropic", StatusCode: ae.StatusCode, Transient: transientStatus(ae.StatusCode) || overloaded, Msg: msg}
	}
	// A connection dropped mid-stream is worth another try.
	return &Error{Provider: "anthropic", Transient: true, Msg: scrub(err.Error(), a.key)}
}

func anthropicTools(t Tools) []anthropic.BetaToolUnionParam {
	var out []anthropic.BetaToolUnionParam
	if t.ScreenWidth > 0 && t.ScreenHeight > 0 {
		if t.ComputerVersion == Computer20251124 {
			out = append(out, anthropic.BetaToolUnionParam{OfComputerUseTool20251124: &anthropic.BetaToolComputerUse20251124Param{
				DisplayWidthPx: int64(t.ScreenWidth), DisplayHeightPx: int64(t.ScreenHeight), EnableZoom: anthropic.Bool(true),
			}})
		} else {
			out = append(out, anthropic.BetaToolUnionParam{OfComputerUseTool20250124: &anthropic.BetaToolComputerUse20250124Param{
				DisplayWidthPx: int64(t.ScreenWidth), DisplayHeightPx: int64(t.ScreenHeight),
			}})
		}
	}
	if t.Bash {
		out = append(out, anthropic.BetaToolUnionParam{OfBashTool20250124: &anthropic.BetaToolBash20250124Param{}})
	}
	if t.Editor {
		out = append(out, anthropic.BetaToolUnionParam{OfTextEditor20250728: &anthropic.BetaToolTextEditor20250728Param{}})
	}
	if n := len(out); n > 0 {
		// A cache breakpoint after the last tool caches every tool definition.
		setToolCache(&out[n-1])
	}
	return out
}

func setToolCache(u *anthropic.BetaToolUnionParam) {
	cc := anthropic.NewBetaCacheControlEphemeralParam()
	switch {
	case u.OfTextEditor20250728 != nil:
		u.OfTextEditor20250728.CacheControl = cc
	case u.OfBashTool20250124 != nil:
		u.OfBashTool20250124.CacheControl = cc
	case u.OfComputerUseTool20250124 != nil:
		u.OfComputerUseTool20250124.CacheControl = cc
	case u.OfComputerUseTool20251124 != nil:
		u.OfComputerUseTool20251124.CacheControl = cc
	}
}

func anthropicImage(img *Image) anthropic.BetaImageBlockParam {
	return anthropic.BetaImageBlockParam{Source: anthropic.BetaImageBlockParamSourceUnion{OfBase64: &anthropic.BetaBase64ImageSourceParam{
		MediaType: anthropic.BetaBase64ImageSourceMediaType(img.MediaType),
		Data:      base64.StdEncoding.EncodeToString(img.Data),
	}}}
}

func anthropicMessages(msgs []Message) []anthropic.BetaMessageParam {
	out := make([]anthropic.BetaMessageParam, 0, len(msgs))
	for _, m := range msgs {
		var blocks []anthropic.BetaContentBlockParamUnion
		for _, b := range m.Blocks {
			switch b.Kind {
			case BlockText:
				if b.Text != "" {
					blocks = append(blocks, anthropic.NewBetaTextBlock(b.Text))
				}
			case BlockThinking:
				if b.Provider == "anthropic" && b.Signature != "" {
					blocks = append(blocks, anthropic.NewBetaThinkingBlock(b.Signature, b.Text))
				}
			case BlockNative:
				if b.Provider == "anthropic" {
					var r struct{ Data string }
					if json.Unmarshal(b.Native, &r) == nil {
						blocks = append(blocks, anthropic.NewBetaRedactedThinkingBlock(r.Data))
					}
				}
			case BlockImage:
				if b.Image != nil && !b.Image.Elided {
					img := anthropicImage(b.Image)
					blocks = append(blocks, anthropic.BetaContentBlockParamUnion{OfImage: &img})
				}
			case BlockToolCall:
				blocks = append(blocks, anthropic.NewBetaToolUseBlock(b.ToolCall.ID, b.ToolCall.Input, b.ToolCall.Name))
			case BlockToolResult:
				r := b.ToolResult
				p := anthropic.BetaToolResultBlockParam{ToolUseID: r.CallID, IsError: anthropic.Bool(r.IsError)}
				if r.Text != "" {
					p.Content = append(p.Content, anthropic.BetaToolResultBlockParamContentUnion{OfText: &anthropic.BetaTextBlockParam{Text: r.Text}})
				}
				if r.Image != nil {
					if r.Image.Elided {
						p.Content = append(p.Content, anthropic.BetaToolResultBlockParamContentUnion{OfText: &anthropic.BetaTextBlockParam{Text: "[older screenshot omitted]"}})
					} else {
						img := anthropicImage(r.Image)
						p.Content = append(p.Content, anthropic.BetaToolResultBlockParamContentUnion{OfImage: &img})
						if r.Tree != "" {
							p.Content = append(p.Content, anthropic.BetaToolResultBlockParamContentUnion{OfText: &anthropic.BetaTextBlockParam{Text: r.Tree}})
						}
					}
				}
				blocks = append(blocks, anthropic.BetaContentBlockParamUnion{OfToolResult: &p})
			}
		}
		if len(blocks) == 0 {
			continue
		}
		role := anthropic.BetaMessageParamRoleUser
		if m.Role == RoleAssistant {
			role = anthropic.BetaMessageParamRoleAssistant
		}
		out = append(out, anthropic.BetaMessageParam{Role: role, Content: blocks})
	}
	// Caching up to the newest message makes each step pay only for what is new.
	if n := len(out); n > 0 {
		c := out[n-1].Content
		if k := len(c); k > 0 {
			if cc := c[k-1].GetCacheControl(); cc != nil {
				*cc = anthropic.NewBetaCacheControlEphemeralParam()
			}
		}
	}
	return out
}
