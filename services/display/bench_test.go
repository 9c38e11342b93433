package display

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
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

// BenchmarkClickAndScreenshot measures a click followed by the screenshot of
// the settled screen, as an agent step does: the click repaints a window
// (an X client answering at once), and the screenshot waits for it.
func BenchmarkClickAndScreenshot(b *testing.B) {
	s, c := testService(b, "")
	createDisplay(b, c, "bench-click", 1280, 800)
	var delay atomic.Int64
	lateClient(b, clientConn(b, s, "bench-click"), 540, 300, 200, 200, []uint32{0x0000ff, 0xff0000}, &delay)
	ctx := ctxT(b)
	req := &displayv1.PerformActionsRequest{
		SessionId: "bench-click",
		Actions: []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{
			At: &displayv1.Point{X: 640, Y: 400},
		}}}},
		Screenshot: true,
	}
	for b.Loop() {
		resp, err := c.PerformActions(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.GetScreenshot().GetData()) == 0 {
			b.Fatal("no screenshot")
		}
		if o := resp.GetSettle().GetOutcome(); o != displayv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			b.Fatalf("settle %v", resp.GetSettle())
		}
	}
}

// BenchmarkClickAndScreenshotXdotoolScrot is the same step done the way
// existing computer-use stacks do it, with xdotool and scrot processes, for
// the ratio deskgrid must beat. It waits for nothing after the click.
func BenchmarkClickAndScreenshotXdotoolScrot(b *testing.B) {
	s, c := testService(b, "")
	createDisplay(b, c, "bench-xdotool", 1280, 800)
	xd, xauth, _ := s.Lookup("bench-xdotool")
	env := append(os.Environ(), "DISPLAY="+xd, "XAUTHORITY="+xauth)
	out := filepath.Join(b.TempDir(), "shot.png")
	for _, tool := range []string{"xdotool", "scrot"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Fatalf("%s not installed (Debian package %s): %v", tool, tool, err)
		}
	}
	for b.Loop() {
		click := exec.Command("xdotool", "mousemove", "640", "400", "click", "1")
		click.Env = env
		if o, err := click.CombinedOutput(); err != nil {
			b.Fatalf("xdotool: %v: %s", err, o)
		}
		shot := exec.Command("scrot", "-o", out)
		shot.Env = env
		if o, err := shot.CombinedOutput(); err != nil {
			b.Fatalf("scrot: %v: %s", err, o)
		}
		data, err := os.ReadFile(out)
		if err != nil || len(data) == 0 {
			b.Fatalf("scrot wrote nothing: %v", err)
		}
	}
}

// BenchmarkCreateWarmToFirstScreenshot measures create + first screenshot
// when a warm display is ready, as it is between bursts of creates.
func BenchmarkCreateWarmToFirstScreenshot(b *testing.B) {
	cfg := DefaultConfig()
	cfg.RuntimeDir = b.TempDir()
	cfg.WarmDisplays = 1
	s, err := New(context.Background(), cfg, Deps{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := ctxT(b)
	i := 0
	for b.Loop() {
		b.StopTimer()
		testkit.Eventually(b, 10*time.Second, func() bool { return len(s.pool.ready) == 1 }, "warm display")
		id := "bench-warm-" + strconv.Itoa(i)
		i++
		b.StartTimer()
		if _, err := s.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: id}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: id}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := s.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: id}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
