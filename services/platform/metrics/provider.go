package metrics

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Model calls take from a fraction of a second to minutes (long thinking,
// large outputs), beyond the buckets of node calls.
var providerBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300}

var (
	providerCall, _ = meter.Float64Histogram("deskgrid.agent.provider.call.duration", metric.WithUnit("s"),
		metric.WithDescription("one model call of an agent run (each retry is a call), by provider, model and outcome"),
		metric.WithExplicitBucketBoundaries(providerBuckets...))
	providerTokens = counter("deskgrid.agent.provider.tokens", "",
		"model tokens the provider reported for the calls of agent runs, by provider, model and direction (input, output)")
)

// Outcomes of a model call, as ProviderCalled takes them.
const (
	CallOK          = "ok"
	CallCancelled   = "cancelled"    // the run was cancelled or timed out
	CallRateLimited = "rate_limited" // HTTP 429
	CallRejected    = "rejected"     // another 4xx: bad key, bad request, unknown model
	CallServerError = "server_error" // 5xx, overloaded
	CallNetwork     = "network"      // no answer or a stream cut short
)

// ProviderCalled records one model call that took d: its latency by
// outcome and, when it answered, the tokens the provider reported. model is
// a label from a ModelLabels.
func ProviderCalled(ctx context.Context, provider, model, outcome string, d time.Duration, inputTokens, outputTokens int64) {
	ctx = context.WithoutCancel(ctx)
	p := Provider(provider)
	providerCall.Record(ctx, secs(d), attrs("provider", p, "model", model, "outcome", outcome))
	if outcome != CallOK {
		return
	}
	providerTokens.Add(ctx, inputTokens, attrs("provider", p, "model", model, "direction", "input"))
	providerTokens.Add(ctx, outputTokens, attrs("provider", p, "model", model, "direction", "output"))
}

// ModelLabels bounds the model label: a run names its model freely, so
// only a model a provider answered for is a label of its own, and only the
// first Max of them; any other call is labelled "other". An operator's
// runs use a handful of models, well under the bound.
type ModelLabels struct {
	Max  int
	mu   sync.Mutex
	seen map[string]bool
}

// DefaultModelLabels is how many models get labels of their own.
const DefaultModelLabels = 32

// Label returns the label for model; answered says the provider answered a
// call for it, which admits it while there is room.
func (m *ModelLabels) Label(model string, answered bool) string {
	if model == "" {
		return "unknown"
	}
	if len(model) > 100 {
		return "other"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen[model] {
		return model
	}
	if !answered || len(m.seen) >= m.Max {
		return "other"
	}
	if m.seen == nil {
		m.seen = map[string]bool{}
	}
	m.seen[model] = true
	return model
}

var toolCalls = counter("deskgrid.agent.tool.calls", "",
	"tool calls of agent runs (the steps the model asked for), by provider, tool (computer, bash, editor, other) and outcome (ok, error: the tool reported an error to the model, rejected: a person rejected it, failed: the run could not carry it out)")

// Outcomes of a tool call, as ToolCalled takes them.
const (
	ToolOK       = "ok"
	ToolError    = "error"
	ToolRejected = "rejected"
	ToolFailed   = "failed"
)

// ToolCalled counts one tool call of a run. tool is the loop's tool name:
// computer, bash, or the text editor (str_replace_based_edit_tool, labelled
// editor); any other is "other".
func ToolCalled(ctx context.Context, provider, tool, outcome string) {
	switch tool {
	case "computer", "bash":
	case "str_replace_based_edit_tool":
		tool = "editor"
	default:
		tool = "other"
	}
	toolCalls.Add(context.WithoutCancel(ctx), 1, attrs("provider", Provider(provider), "tool", tool, "outcome", outcome))
}
