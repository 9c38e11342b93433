package display

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver"
)

// BenchmarkActionPathMetrics measures a click over gRPC on loopback against
// a real display served by the node's gRPC server (its otelgrpc handler and
// metrics interceptor), first with no meter provider installed (the
// OpenTelemetry API's no-op, as a node without telemetry runs), then with a
// real SDK provider recording; the difference is what the metrics add to an
// action (added-us/op on the metrics-on line). The global provider binds the
// package-level instruments once, so run it with -count 1.
func BenchmarkActionPathMetrics(b *testing.B) {
	if installedReader != nil {
		b.Skip("a meter provider is already installed: run with -count 1")
	}
	dir := b.TempDir()
	cfg := DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.WarmDisplays = 0
	s, err := New(context.Background(), cfg, Deps{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	srv := grpcserver.New(grpcserver.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.Register(srv.GRPC)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.GRPC.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	c := displayv1.NewDisplayServiceClient(cc)
	createDisplay(b, c, "bench-metrics", 1280, 800)
	ctx := ctxT(b)
	req := &displayv1.PerformActionsRequest{SessionId: "bench-metrics", Actions: []*displayv1.Action{
		{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 640, Y: 400}, Clicks: 1}}},
	}}
	run := func(b *testing.B) time.Duration {
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if _, err := c.PerformActions(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / time.Duration(b.N)
	}
	var off time.Duration
	b.Run("metrics-off", func(b *testing.B) { off = run(b) })
	b.Run("metrics-on", func(b *testing.B) {
		if installedReader == nil {
			installedReader = sdkmetric.NewManualReader()
			otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(installedReader)))
		}
		on := run(b)
		b.StopTimer()
		// The recording side really recorded this run's actions.
		var rm metricdata.ResourceMetrics
		if err := installedReader.Collect(context.Background(), &rm); err != nil {
			b.Fatal(err)
		}
		var n uint64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "deskgrid.display.actions.duration" {
					for _, p := range h.DataPoints {
						n += p.Count
					}
				}
			}
		}
		if n < uint64(b.N) {
			b.Fatalf("deskgrid.display.actions.duration counted %d actions, want at least %d", n, b.N)
		}
		if off > 0 {
			b.ReportMetric(float64(on-off)/1e3, "added-us/op")
		}
	})
}

// installedReader is the SDK reader BenchmarkActionPathMetrics installed
// as the global meter provider's.
var installedReader *sdkmetric.ManualReader
