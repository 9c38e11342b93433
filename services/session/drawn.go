package session

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"time"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// DesktopDrawnWait bounds how long a create waits for an image's desktop
// program to draw the desktop: one that shows nothing by then is left to
// it, and the create goes on.
const DesktopDrawnWait = 10 * time.Second

// drawnPoll is how often waitDrawn looks at the screen.
const drawnPoll = 25 * time.Millisecond

// waitDrawn waits until session id's screen shows a desktop: a mapped
// top-level window (the panel) on a screen no longer mostly black, alike in
// two looks one after the other (a window mapped before it is painted, a
// panel drawn in parts). It looks at a small scaled screenshot, cheap for
// the node while the desktop starts. It gives up at wait and says so.
func waitDrawn(ctx context.Context, displays displayv1.DisplayServiceClient, id string, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	var last []byte
	for {
		shot, err := drawnLook(ctx, displays, id)
		if err != nil {
			return false, err
		}
		if shot != nil && bytes.Equal(shot, last) {
			return true, nil
		}
		last = shot
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(drawnPoll):
		}
	}
}

// drawnLook returns a small screenshot of session id when its screen shows
// a mapped window and is not mostly black; nil when it does not yet.
func drawnLook(ctx context.Context, displays displayv1.DisplayServiceClient, id string) ([]byte, error) {
	ws, err := displays.ListWindows(ctx, &displayv1.ListWindowsRequest{SessionId: id})
	if err != nil {
		return nil, err
	}
	mapped := false
	for _, w := range ws.GetWindows() {
		mapped = mapped || w.GetMapped()
	}
	if !mapped {
		return nil, nil
	}
	shot, err := displays.Screenshot(ctx, &displayv1.ScreenshotRequest{
		SessionId: id, Format: displayv1.ImageFormat_IMAGE_FORMAT_PNG, ScaleTo: &displayv1.Size{Width: 160, Height: 100},
	})
	if err != nil {
		return nil, err
	}
	if MostlyDark(shot.GetData()) {
		return nil, nil
	}
	return shot.GetData(), nil
}

// MostlyDark reports whether a PNG screenshot is mostly black (an X
// server's screen before anything is drawn on it); one that cannot be read
// counts as black.
func MostlyDark(data []byte) bool {
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		return true
	}
	return darkShare(img) > 0.5
}

// darkShare is the share of img's pixels, sampled on a grid of at most
// every 8th each way, that are nearly black.
func darkShare(img image.Image) float64 {
	b := img.Bounds()
	step := max(1, min(8, b.Dx()/32, b.Dy()/32))
	dark, total := 0, 0
	for y := b.Min.Y; y < b.Max.Y; y += step {
		for x := b.Min.X; x < b.Max.X; x += step {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r+g+bl < 3*0x1000 {
				dark++
			}
			total++
		}
	}
	if total == 0 {
		return 1
	}
	return float64(dark) / float64(total)
}
