package display

import (
	"fmt"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// A click on a pixel of a scaled screenshot lands on the screen pixel that
// scaled pixel shows, at several aspect ratios.
func TestScaledClickLandsOnTheScaledPixel(t *testing.T) {
	s, c := testService(t, "")
	for i, r := range []struct{ sw, sh, w, h int32 }{
		{1920, 1080, 1024, 768},
		{1366, 768, 1024, 768},
		{1280, 800, 1024, 640},
		{1366, 768, 1280, 720},
	} {
		t.Run(fmt.Sprintf("%dx%d to %dx%d", r.sw, r.sh, r.w, r.h), func(t *testing.T) {
			id := fmt.Sprintf("scale-%d", i)
			createDisplay(t, c, id, r.sw, r.sh)
			iw := newInputWindow(t, s, id, int(r.sw), int(r.sh))
			to := &displayv1.Size{Width: r.w, Height: r.h}
			for _, p := range [][2]int32{{0, 0}, {r.w - 1, r.h - 1}, {r.w / 3, r.h / 2}, {517, 311}, {r.w - 2, 1}} {
				// The screen pixel under the scaled pixel's centre.
				wantX := int16((2*p[0] + 1) * r.sw / (2 * r.w))
				wantY := int16((2*p[1] + 1) * r.sh / (2 * r.h))
				// A red 7x7 square around it shows in the scaled screenshot
				// at exactly the scaled pixel.
				red := showWindow(t, iw.c, int(wantX)-3, int(wantY)-3, 7, 7, 0xff0000, xproto.EventMaskButtonPress)
				testkit.Eventually(t, 5*time.Second, func() bool {
					shot, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: id, ScaleTo: to})
					if err != nil {
						t.Fatal(err)
					}
					img := decodePNG(t, shot.GetData())
					if b := img.Bounds(); b.Dx() != int(r.w) || b.Dy() != int(r.h) {
						t.Fatalf("scaled screenshot is %v, want %dx%d", b, r.w, r.h)
					}
					return isRed(img.At(int(p[0]), int(p[1])))
				}, "red square in the scaled screenshot")
				resp, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: id, ScaleTo: to,
					Actions: []*displayv1.Action{{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: p[0], Y: p[1]}}}}}})
				if err != nil {
					t.Fatal(err)
				}
				if got := resp.GetCursor(); got.GetX() != p[0] || got.GetY() != p[1] {
					t.Errorf("cursor %v in scaled space, want %v", got, p)
				}
				ev := iw.next(t, "press", func(ev xgb.Event) bool { _, ok := ev.(xproto.ButtonPressEvent); return ok }).(xproto.ButtonPressEvent)
				if ev.RootX != wantX || ev.RootY != wantY || ev.Event != red {
					t.Errorf("scaled %v: press at %d,%d on window %d, want %d,%d on the red square %d", p, ev.RootX, ev.RootY, ev.Event, wantX, wantY, red)
				}
				xproto.DestroyWindow(iw.c, red)
			}
			// Coordinates outside the scaled space are refused.
			_, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: id, ScaleTo: to,
				Actions: []*displayv1.Action{moveTo(r.w, 0)}})
			if code := statusCode(err); code != "InvalidArgument" {
				t.Errorf("move to x=%d in %dx%d: %v, want InvalidArgument", r.w, r.w, r.h, err)
			}
		})
	}
}

func statusCode(err error) string { return status.Code(err).String() }
