package agent

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.36.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

var tracer = otel.Tracer("github.com/deskgrid/deskgrid/services/agent")

// callProvider is one model call: a client span with the GenAI semantic
// conventions' attributes (model, token counts, finish reason; never the
// prompt, the conversation or the key) and the provider metrics.
func (r *run) callProvider(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) (*provider.Response, error) {
	name := r.prov.Name()
	ctx, span := tracer.Start(ctx, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		semconv.GenAIOperationNameChat,
		genAISystem(name),
		// The newer conventions name the provider with this key.
		attribute.String("gen_ai.provider.name", genAISystem(name).Value.AsString()),
		semconv.GenAIRequestModel(req.Model),
		semconv.GenAIRequestMaxTokens(req.MaxTokens),
	))
	defer span.End()
	start := time.Now()
	resp, err := r.prov.Turn(ctx, req, onDelta)
	d := time.Since(start)
	outcome := callOutcome(ctx, err)
	model := r.svc.models.Label(req.Model, err == nil)
	if err != nil {
		// Provider errors are scrubbed of the key and carry no request.
		span.SetAttributes(semconv.ErrorTypeKey.String(outcome))
		span.SetStatus(otelcodes.Error, err.Error())
		metrics.ProviderCalled(ctx, name, model, outcome, d, 0, 0)
		return nil, err
	}
	span.SetAttributes(
		semconv.GenAIUsageInputTokens(int(resp.Usage.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(resp.Usage.OutputTokens)),
		semconv.GenAIResponseFinishReasons(resp.StopReason),
	)
	if resp.Model != "" {
		span.SetAttributes(semconv.GenAIResponseModel(resp.Model))
	}
	metrics.ProviderCalled(ctx, name, model, outcome, d, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	return resp, nil
}

// genAISystem is gen_ai.system for a provider name.
func genAISystem(name string) attribute.KeyValue {
	switch name {
	case "anthropic":
		return semconv.GenAISystemAnthropic
	case "openai":
		return semconv.GenAISystemOpenAI
	case "gemini":
		return semconv.GenAISystemGCPGemini
	}
	return semconv.GenAISystemKey.String(metrics.Provider(name))
}

// callOutcome classes a model call's error for the metrics.
func callOutcome(ctx context.Context, err error) string {
	if err == nil {
		return metrics.CallOK
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return metrics.CallCancelled
	}
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.StatusCode == 0 {
		return metrics.CallNetwork
	}
	switch {
	case pe.StatusCode == 429:
		return metrics.CallRateLimited
	case pe.StatusCode >= 400 && pe.StatusCode < 500:
		return metrics.CallRejected
	}
	return metrics.CallServerError
}
