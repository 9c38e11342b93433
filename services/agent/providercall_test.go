package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
)

// The package's metrics and spans go to one in-process meter and tracer
// provider, installed once: the OpenTelemetry API forwards the instruments
// and tracers made before to the first provider set.
var (
	telemetryOnce sync.Once
	metricReader  *sdkmetric.ManualReader
	spanRecorder  *tracetest.SpanRecorder
)

func installTelemetry() {
	telemetryOnce.Do(func() {
		metricReader = sdkmetric.NewManualReader()
		otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(metricReader)))
		spanRecorder = tracetest.NewSpanRecorder()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spanRecorder)))
	})
}

// Each provider's calls, through its official SDK against a server speaking
// its wire format, are measured: the latency histogram counts every call by
// outcome, the token counters move by exactly the tokens the provider
// reported, and each call is a gen_ai client span with the model, the
// tokens and the finish reason, and never the key or the prompt. A model no
// provider answered for does not get a label of its own.
func TestProviderCallsAreMeasured(t *testing.T) {
	installTelemetry()
	// The stop reason as each provider reports it to the loop.
	finish := map[string]string{"anthropic": "end_turn", "openai": "end_turn", "gemini": "stop"}
	system := map[string]string{"anthropic": "anthropic", "openai": "openai", "gemini": "gcp.gemini"}
	// The model each fake server says answered (wire_test.go).
	answered := map[string]string{"anthropic": "claude-test", "openai": "computer-use-preview", "gemini": "gemini-test"}
	for _, tc := range wireCases {
		t.Run(tc.provider, func(t *testing.T) {
			key := "sk-" + tc.provider + "-measured-secret-0123456789"
			prompt := "the secret prompt of " + tc.provider
			ws := newWireServer(t, tc.authHeader, tc.turn)
			cfg := allowing(DefaultConfig(), ws.srv.URL)
			cfg.Retries = 0
			h := newHarness(t, cfg, nil)
			ctx := context.Background()
			calls := func(model, outcome string) int64 {
				return int64(metricstest.HistCount(t, metricReader, "deskgrid.agent.provider.call.duration",
					attribute.String("provider", tc.provider), attribute.String("model", model), attribute.String("outcome", outcome)))
			}
			tokens := func(model, direction string) int64 {
				return metricstest.Sum(t, metricReader, "deskgrid.agent.provider.tokens",
					attribute.String("provider", tc.provider), attribute.String("model", model), attribute.String("direction", direction))
			}
			start := func() string {
				t.Helper()
				created, err := h.client.CreateRun(ctx, &agentv1.CreateRunRequest{
					SessionId: "s-1", Prompt: prompt, Provider: tc.provider, Model: tc.model, ApiKey: key, BaseUrl: tc.baseURL(ws.srv.URL),
				})
				if err != nil {
					t.Fatal(err)
				}
				return created.GetRun().GetId()
			}

			// Rate limited before the model ever answered: counted, under "other".
			limitedBefore, otherBefore := calls("other", "rate_limited"), calls(tc.model, "rate_limited")
			ws.mu.Lock()
			ws.failStatus, ws.failBody = http.StatusTooManyRequests, tc.errBody("x", http.StatusTooManyRequests)
			ws.mu.Unlock()
			waitState(t, h.client, start(), agentv1.RunState_RUN_STATE_FAILED)
			if d := calls("other", "rate_limited") - limitedBefore; d != 1 {
				t.Fatalf("rate limited calls under model=other moved by %d, want 1", d)
			}
			if d := calls(tc.model, "rate_limited") - otherBefore; d != 0 {
				t.Fatalf("a model that never answered got its own label")
			}

			// A whole run: every call and every token reported.
			ws.mu.Lock()
			ws.failStatus, ws.failBody, ws.bodies = 0, "", nil
			ws.mu.Unlock()
			okBefore, inBefore, outBefore := calls(tc.model, "ok"), tokens(tc.model, "input"), tokens(tc.model, "output")
			spanRecorder.Reset()
			run := waitState(t, h.client, start(), agentv1.RunState_RUN_STATE_SUCCEEDED, agentv1.RunState_RUN_STATE_FAILED)
			if run.GetState() != agentv1.RunState_RUN_STATE_SUCCEEDED {
				t.Fatalf("run %v: %s", run.GetState(), run.GetStateReason())
			}
			n := int64(len(script))
			if d := calls(tc.model, "ok") - okBefore; d != n {
				t.Errorf("ok calls moved by %d, want %d", d, n)
			}
			if d := tokens(tc.model, "input") - inBefore; d != 100*n || d != run.GetUsage().GetInputTokens() {
				t.Errorf("input tokens moved by %d, want %d (the run counts %d)", d, 100*n, run.GetUsage().GetInputTokens())
			}
			if d := tokens(tc.model, "output") - outBefore; d != 20*n || d != run.GetUsage().GetOutputTokens() {
				t.Errorf("output tokens moved by %d, want %d (the run counts %d)", d, 20*n, run.GetUsage().GetOutputTokens())
			}

			var chats []sdktrace.ReadOnlySpan
			for _, s := range spanRecorder.Ended() {
				if s.Name() == "chat "+tc.model {
					chats = append(chats, s)
				}
			}
			if int64(len(chats)) != n {
				t.Fatalf("%d chat spans, want %d", len(chats), n)
			}
			for i, s := range chats {
				a := map[attribute.Key]attribute.Value{}
				for _, kv := range s.Attributes() {
					a[kv.Key] = kv.Value
				}
				if a["gen_ai.system"].AsString() != system[tc.provider] || a["gen_ai.request.model"].AsString() != tc.model ||
					a["gen_ai.operation.name"].AsString() != "chat" || a["gen_ai.usage.input_tokens"].AsInt64() != 100 ||
					a["gen_ai.usage.output_tokens"].AsInt64() != 20 || a["gen_ai.response.model"].AsString() != answered[tc.provider] {
					t.Errorf("span %d attributes: %v", i, s.Attributes())
				}
				if i == len(chats)-1 {
					if fr := a["gen_ai.response.finish_reasons"].AsStringSlice(); len(fr) != 1 || fr[0] != finish[tc.provider] {
						t.Errorf("last span's finish reasons = %v, want %s", fr, finish[tc.provider])
					}
				}
				dump := fmt.Sprint(s.Attributes(), s.Events(), s.Status())
				if strings.Contains(dump, key) || strings.Contains(dump, prompt) {
					t.Fatalf("span %d carries the key or the prompt: %s", i, dump)
				}
			}
		})
	}
}
