// Package telemetry sets up deskgrid's logs, metrics and traces: slog (JSON
// or text) with trace ids taken from the context, Prometheus metrics through
// the OpenTelemetry SDK, and an OTLP trace exporter when one is configured.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// Options configure Setup.
type Options struct {
	ServiceName string
	// LogFormat is "json" or "text".
	LogFormat string
	// LogLevel is "debug", "info", "warn" or "error".
	LogLevel  string
	LogOutput io.Writer
	// OTLPEndpoint, host:port of an OTLP/gRPC collector; empty disables trace export.
	OTLPEndpoint string
	OTLPInsecure bool
}

// Telemetry holds what Setup made.
type Telemetry struct {
	Logger *slog.Logger
	// Metrics serves the Prometheus exposition format.
	Metrics  http.Handler
	shutdown []func(context.Context) error
}

// Setup installs the global meter and tracer providers and returns the logger
// and metrics handler. Shutdown flushes them.
func Setup(ctx context.Context, opts Options) (*Telemetry, error) {
	level, err := parseLevel(opts.LogLevel)
	if err != nil {
		return nil, err
	}
	out := opts.LogOutput
	if out == nil {
		out = io.Discard
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch opts.LogFormat {
	case "", "text":
		h = slog.NewTextHandler(out, hopts)
	case "json":
		h = slog.NewJSONHandler(out, hopts)
	default:
		return nil, fmt.Errorf("telemetry: log format %q: want json or text", opts.LogFormat)
	}
	t := &Telemetry{Logger: slog.New(traceHandler{h}).With("process", opts.ServiceName)}

	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(opts.ServiceName))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	otel.SetMeterProvider(mp)
	metrics.Start(ctx)
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if opts.OTLPEndpoint != "" {
		eopts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(opts.OTLPEndpoint)}
		if opts.OTLPInsecure {
			eopts = append(eopts, otlptracegrpc.WithInsecure())
		}
		te, err := otlptracegrpc.New(ctx, eopts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(te))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.shutdown = append(t.shutdown, tp.Shutdown)
	return t, nil
}

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("telemetry: log level %q: %w", s, err)
	}
	return l, nil
}

// traceHandler adds trace_id and span_id from the record's context.
type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(as)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
