package display

import (
	"strconv"
	"testing"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// BenchmarkScreenshotPNG1280x800 measures one full-screen PNG screenshot
// through gRPC.
func BenchmarkScreenshotPNG1280x800(b *testing.B) {
	s, c := testService(b, "")
	createDisplay(b, c, "bench-shot", 1280, 800)
	xc := clientConn(b, s, "bench-shot")
	// Something on screen, so the encoder has more than a flat colour.
	showWindow(b, xc, 100, 100, 600, 400, 0x3366cc, 0)
	showWindow(b, xc, 300, 200, 500, 300, 0xffcc00, 0)
	ctx := ctxT(b)
	req := &displayv1.ScreenshotRequest{SessionId: "bench-shot"}
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Screenshot(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(resp.GetData())))
	}
}

// BenchmarkCreateToFirstScreenshot measures a cold display: create, the
// first screenshot answered, delete.
func BenchmarkCreateToFirstScreenshot(b *testing.B) {
	_, c := testService(b, "")
	ctx := ctxT(b)
	i := 0
	for b.Loop() {
		id := "bench-cold-" + strconv.Itoa(i)
		i++
		if _, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: id, Width: 1280, Height: 800}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: id}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: id}); err != nil {
			b.Fatal(err)
		}
	}
}
