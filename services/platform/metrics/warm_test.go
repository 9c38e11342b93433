package metrics_test

import (
	"context"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/platform/metrics/metricstest"
)

// A pool's ready members are read at each collection, its claim counters
// exist at zero from the start, and stop ends its series.
func TestWarmDesktops(t *testing.T) {
	const image = "deskgrid/desktop:warmtest"
	img := attribute.String("image", image)
	var ready atomic.Int64
	ready.Store(2)
	stop, err := metrics.ObserveWarmDesktops(image, func() int { return int(ready.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := metricstest.IntGauge(t, reader, "deskgrid.warm_desktops", img); !ok || v != 2 {
		t.Errorf("warm desktops = %d (%v), want 2", v, ok)
	}
	for _, o := range []string{"hit", "miss"} {
		if n := sum(t, "deskgrid.warm_desktop.claims", img, attribute.String("outcome", o)); n != 0 {
			t.Errorf("%s claims before any = %d, want 0", o, n)
		}
	}
	ctx := context.Background()
	metrics.WarmDesktopClaimed(ctx, image, true)
	metrics.WarmDesktopClaimed(ctx, image, true)
	metrics.WarmDesktopClaimed(ctx, image, false)
	ready.Store(0)
	if n := sum(t, "deskgrid.warm_desktop.claims", img, attribute.String("outcome", "hit")); n != 2 {
		t.Errorf("hits = %d, want 2", n)
	}
	if n := sum(t, "deskgrid.warm_desktop.claims", img, attribute.String("outcome", "miss")); n != 1 {
		t.Errorf("misses = %d, want 1", n)
	}
	if v, ok := metricstest.IntGauge(t, reader, "deskgrid.warm_desktops", img); !ok || v != 0 {
		t.Errorf("warm desktops once claimed = %d (%v), want 0", v, ok)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, ok := metricstest.IntGauge(t, reader, "deskgrid.warm_desktops", img); ok {
		t.Error("the gauge of a closed pool is still reported")
	}
}
