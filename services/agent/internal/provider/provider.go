// Package provider puts the LLM providers deskgrid drives behind one
// interface: a turn takes the conversation and the tools and streams back
// text, thinking and tool calls, ending with usage and a stop reason.
//
// The conversation is kept in a provider-neutral form, so the loop can trim
// old screenshots and persist a run without knowing whose model it talks to.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/deskgrid/deskgrid/services/platform/computeruse"
)

// Role is who said a message.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Tool names, as the loop dispatches them.
const (
	ToolComputer = "computer"
	ToolBash     = "bash"
	ToolEditor   = "str_replace_based_edit_tool"
)

// Dialect says how a computer tool call's input is spelled; it is the
// decoder's (services/platform/computeruse).
type Dialect = computeruse.Dialect

const (
	DialectAnthropic = computeruse.Anthropic
	DialectOpenAI    = computeruse.OpenAI
	DialectGemini    = computeruse.Gemini
)

// Image is an image in the conversation.
type Image struct {
	MediaType string `json:"media_type"`
	Data      []byte `json:"data,omitempty"`
	// Elided marks a screenshot dropped from context to save tokens.
	Elided bool `json:"elided,omitempty"`
}

// ToolCall is a tool the model asked for.
type ToolCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// Dialect of Input for the computer tool.
	Dialect Dialect `json:"dialect,omitempty"`
	// SafetyChecks the provider raised; they must be acknowledged to go on.
	SafetyChecks []SafetyCheck `json:"safety_checks,omitempty"`
}

// SafetyCheck is a provider's warning about a tool call.
type SafetyCheck struct {
	ID      string `json:"id"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// ToolResult answers a ToolCall.
type ToolResult struct {
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Text    string `json:"text,omitempty"`
	Image   *Image `json:"image,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Acknowledged are the call's safety checks a person approved.
	Acknowledged []SafetyCheck `json:"acknowledged,omitempty"`
	// URL of the page shown, for providers that want it (Gemini browser).
	URL string `json:"url,omitempty"`
	// Tree is the accessibility tree as text beside Image (the run option
	// accessibility_tree); dropped with the image when it is elided.
	Tree string `json:"tree,omitempty"`
}

// BlockKind is what a Block holds.
type BlockKind string

const (
	BlockText       BlockKind = "text"
	BlockThinking   BlockKind = "thinking"
	BlockImage      BlockKind = "image"
	BlockToolCall   BlockKind = "tool_call"
	BlockToolResult BlockKind = "tool_result"
	// BlockNative is an item only its provider understands (reasoning items,
	// redacted thinking); it is sent back unchanged.
	BlockNative BlockKind = "native"
)

// Block is one part of a message.
type Block struct {
	Kind       BlockKind       `json:"kind"`
	Text       string          `json:"text,omitempty"`
	Signature  string          `json:"signature,omitempty"`
	Image      *Image          `json:"image,omitempty"`
	ToolCall   *ToolCall       `json:"tool_call,omitempty"`
	ToolResult *ToolResult     `json:"tool_result,omitempty"`
	Native     json.RawMessage `json:"native,omitempty"`
	// Provider that made a native block or a signature.
	Provider string `json:"provider,omitempty"`
}

// Message is one turn of the conversation.
type Message struct {
	Role   Role    `json:"role"`
	Blocks []Block `json:"blocks"`
}

// UserText returns a user message with one text block.
func UserText(s string) Message {
	return Message{Role: RoleUser, Blocks: []Block{{Kind: BlockText, Text: s}}}
}

// ToolCalls returns the tool calls in m.
func (m Message) ToolCalls() []*ToolCall {
	var out []*ToolCall
	for _, b := range m.Blocks {
		if b.Kind == BlockToolCall && b.ToolCall != nil {
			out = append(out, b.ToolCall)
		}
	}
	return out
}

// Text returns m's text blocks joined.
func (m Message) Text() string {
	var sb strings.Builder
	for _, b := range m.Blocks {
		if b.Kind == BlockText {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

// Tools are the tools offered to the model.
type Tools struct {
	// Computer is offered when ScreenWidth and ScreenHeight are set.
	ScreenWidth, ScreenHeight int
	// ComputerVersion picks the Anthropic computer tool version.
	ComputerVersion string
	Bash            bool
	Editor          bool
}

// Request is one turn's input.
type Request struct {
	Model          string
	System         string
	Messages       []Message
	Tools          Tools
	MaxTokens      int
	ThinkingBudget int
}

// Usage counts a turn's tokens.
type Usage struct {
	InputTokens      int64
	OutputTokens     int64
	CacheReadTokens  int64
	CacheWriteTokens int64
}

// Add returns u + o.
func (u Usage) Add(o Usage) Usage {
	return Usage{u.InputTokens + o.InputTokens, u.OutputTokens + o.OutputTokens, u.CacheReadTokens + o.CacheReadTokens, u.CacheWriteTokens + o.CacheWriteTokens}
}

// Response is a finished turn.
type Response struct {
	Message    Message
	StopReason string
	Usage      Usage
	// Model is the model the provider says answered (it may name a
	// dated version of the one asked for); empty if it did not say.
	Model string
}

// DeltaKind is what a Delta carries.
type DeltaKind int

const (
	DeltaText DeltaKind = iota + 1
	DeltaThinking
)

// Delta is a piece of a turn as it streams.
type Delta struct {
	Kind DeltaKind
	Text string
}

// Provider runs model turns.
type Provider interface {
	// Name is "anthropic", "openai", "gemini" or a test name.
	Name() string
	// Turn sends req and streams deltas to onDelta (on the caller's
	// goroutine) until the model stops. Cancelling ctx aborts the request.
	Turn(ctx context.Context, req Request, onDelta func(Delta)) (*Response, error)
	// DefaultScreen is the screenshot size the model works best with, for
	// a display of w x h; coordinates the model sends are in this size.
	DefaultScreen(w, h int) (int, int)
}

// Config chooses and configures a provider for one run.
type Config struct {
	Name    string
	APIKey  string
	BaseURL string
	// Anthropic through Bedrock or Vertex: "bedrock", "vertex"; empty for the API.
	Platform string
	// Region and Project for Bedrock/Vertex.
	Region  string
	Project string
	// MaxRetries is left to the loop; SDK retries are turned off.
}

// ErrUnknownProvider is returned for a provider name deskgrid does not know.
var ErrUnknownProvider = errors.New("unknown provider")

// ErrNoKey is returned when a provider that needs an API key has none.
var ErrNoKey = errors.New("no API key")

// New returns the provider cfg names.
func New(ctx context.Context, cfg Config) (Provider, error) {
	var newFn func() (Provider, error)
	switch cfg.Name {
	case "anthropic", "":
		newFn = func() (Provider, error) { return NewAnthropic(ctx, cfg) }
	case "openai":
		newFn = func() (Provider, error) { return NewOpenAI(cfg) }
	case "gemini", "google":
		newFn = func() (Provider, error) { return NewGemini(ctx, cfg) }
	default:
		return nil, fmt.Errorf("%w %q: use anthropic, openai or gemini", ErrUnknownProvider, cfg.Name)
	}
	// Without a key every request would fail with the SDK's login hint,
	// after the loop's retries; say so at once instead.
	if cfg.APIKey == "" && cfg.Platform == "" {
		return nil, fmt.Errorf("%w for %s", ErrNoKey, cfg.Name)
	}
	return newFn()
}

// Error is a provider failure with what the loop needs to decide to retry.
// Its message never carries the request, so no key can leak through it.
type Error struct {
	Provider   string
	StatusCode int
	Transient  bool
	Msg        string
}

func (e *Error) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("%s: HTTP %d: %s", e.Provider, e.StatusCode, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Provider, e.Msg)
}

// IsTransient says whether err is worth retrying.
func IsTransient(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Transient
}

// transientStatus says which HTTP answers a retry may fix.
func transientStatus(code int) bool {
	return code == 408 || code == 409 || code == 429 || code >= 500
}

// scrub removes secret from s, so an SDK message that echoes a key (some
// print the request) cannot carry it further.
func scrub(s, secret string) string {
	if len(secret) >= 4 {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

// fitScreen scales w x h down to fit maxW x maxH, keeping the aspect ratio.
func fitScreen(w, h, maxW, maxH int) (int, int) {
	if w <= 0 || h <= 0 {
		return maxW, maxH
	}
	if w <= maxW && h <= maxH {
		return w, h
	}
	sw := float64(maxW) / float64(w)
	sh := float64(maxH) / float64(h)
	s := min(sw, sh)
	return max(1, int(float64(w)*s)), max(1, int(float64(h)*s))
}
