package metrics

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/metric"
)

var (
	vncViewers, _ = meter.Int64UpDownCounter("deskgrid.vnc.viewers",
		metric.WithDescription("VNC viewers connected through this gateway, by whether they only view"))
	vncBytes = counter("deskgrid.vnc.bytes", "By",
		"RFB bytes a gateway carried between desktops and their VNC viewers, by direction, counted when a viewer disconnects")
)

// VNCViewer counts a VNC viewer connected until the returned function is
// called, with the bytes carried to and from the viewer.
func VNCViewer(ctx context.Context, viewOnly bool) (disconnected func(toViewer, fromViewer int64)) {
	a := attrs("view_only", strconv.FormatBool(viewOnly))
	vncViewers.Add(ctx, 1, a)
	return func(toViewer, fromViewer int64) {
		ctx := context.WithoutCancel(ctx)
		vncViewers.Add(ctx, -1, a)
		vncBytes.Add(ctx, toViewer, attrs("direction", "to_viewer"))
		vncBytes.Add(ctx, fromViewer, attrs("direction", "from_viewer"))
	}
}
