package metrics_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/deskgrid/deskgrid/services/platform/metrics"
)

// A viewer counts while connected; its bytes count when it leaves.
func TestVNCViewer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	viewOnly := attribute.String("view_only", "true")
	before := sum(t, "deskgrid.vnc.viewers", viewOnly)
	sent := sum(t, "deskgrid.vnc.bytes", attribute.String("direction", "to_viewer"))
	got := sum(t, "deskgrid.vnc.bytes", attribute.String("direction", "from_viewer"))
	disconnected := metrics.VNCViewer(ctx, true)
	if n := sum(t, "deskgrid.vnc.viewers", viewOnly) - before; n != 1 {
		t.Fatalf("viewers while connected: %+d, want +1", n)
	}
	cancel() // the viewer's request ended
	disconnected(1000, 20)
	if n := sum(t, "deskgrid.vnc.viewers", viewOnly) - before; n != 0 {
		t.Fatalf("viewers after: %+d, want 0", n)
	}
	if d := sum(t, "deskgrid.vnc.bytes", attribute.String("direction", "to_viewer")) - sent; d != 1000 {
		t.Errorf("bytes to the viewer: %d, want 1000", d)
	}
	if d := sum(t, "deskgrid.vnc.bytes", attribute.String("direction", "from_viewer")) - got; d != 20 {
		t.Errorf("bytes from the viewer: %d, want 20", d)
	}
}
