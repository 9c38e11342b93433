package trail_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/trail"
)

// BenchmarkActionPath measures an action over gRPC on loopback with and
// without the trail, publishing to a real JetStream; the difference is what
// the trail adds to an action (added-us/op on the "with" line).
func BenchmarkActionPath(b *testing.B) {
	req := &displayv1.PerformActionsRequest{SessionId: "s-1", Actions: []*displayv1.Action{
		{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: 100, Y: 200}, Clicks: 1}}},
		{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: "hello"}}},
	}}
	run := func(b *testing.B, h *harness) time.Duration {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "test-key", "k1")
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if _, err := h.display.PerformActions(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / time.Duration(b.N)
	}
	var without time.Duration
	b.Run("without", func(b *testing.B) {
		h := startServer(b, trail.DefaultConfig(), nil, false)
		without = run(b, h)
	})
	b.Run("with", func(b *testing.B) {
		h := start(b, trail.DefaultConfig(), nil)
		with := run(b, h)
		b.StopTimer()
		if err := h.rec.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
		st := h.rec.Stats()
		b.ReportMetric(float64(with-without)/1e3, "added-us/op")
		b.ReportMetric(float64(st.Dropped)/float64(st.Published+st.Dropped), "dropped-share")
	})
}

// BenchmarkInterceptor is the interceptor alone around a call that does
// nothing: the time a call spends on its record.
func BenchmarkInterceptor(b *testing.B) {
	h := start(b, trail.Config{Queue: 1 << 20}, nil)
	intercept := h.rec.UnaryServerInterceptor()
	req := &displayv1.PerformActionsRequest{SessionId: "s-1"}
	info := &grpc.UnaryServerInfo{FullMethod: displayv1.DisplayService_PerformActions_FullMethodName}
	handler := func(context.Context, any) (any, error) { return &displayv1.PerformActionsResponse{}, nil }
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := intercept(ctx, req, info, handler); err != nil {
			b.Fatal(err)
		}
	}
}
