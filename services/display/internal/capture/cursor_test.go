package capture

import (
	"image"
	"testing"
)

// DrawPixels blends the premultiplied cursor over a frame in either pixel
// order, and clips it at the frame's edges.
func TestCursorDrawPixels(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 2, 1))
	copy(img.Pix, []byte{
		200, 100, 0, 255, // opaque orange
		64, 0, 0, 128, // half-transparent red, premultiplied
	})
	for _, tc := range []struct {
		name string
		bgrx bool
		pos  image.Point
		// want is the frame (3x1, every pixel 0,0,40,X in memory) after.
		want []byte
	}{
		{"rgba", false, image.Pt(1, 0), []byte{0, 0, 40, 9, 200, 100, 0, 9, 64, 0, 19, 9}},
		{"bgrx", true, image.Pt(1, 0), []byte{0, 0, 40, 9, 0, 100, 200, 9, 0, 0, 83, 9}},
		{"clipped left", false, image.Pt(-1, 0), []byte{64, 0, 19, 9, 0, 0, 40, 9, 0, 0, 40, 9}},
		{"clipped right", false, image.Pt(2, 0), []byte{0, 0, 40, 9, 0, 0, 40, 9, 200, 100, 0, 9}},
		{"off the frame", false, image.Pt(0, 1), []byte{0, 0, 40, 9, 0, 0, 40, 9, 0, 0, 40, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := []byte{0, 0, 40, 9, 0, 0, 40, 9, 0, 0, 40, 9}
			(&Cursor{Image: img, Pos: tc.pos}).DrawPixels(buf, 3, 1, tc.bgrx)
			if string(buf) != string(tc.want) {
				t.Fatalf("frame %v, want %v", buf, tc.want)
			}
		})
	}
}

// BenchmarkCursorDrawPixels is the cost the pointer adds to a recorded
// frame: a 24x24 cursor blended onto a 1280x800 frame.
func BenchmarkCursorDrawPixels(b *testing.B) {
	img := image.NewRGBA(image.Rect(0, 0, 24, 24))
	for i := range img.Pix {
		img.Pix[i] = byte(i)
	}
	cur := &Cursor{Image: img, Pos: image.Pt(600, 400)}
	buf := make([]byte, 4*1280*800)
	for b.Loop() {
		cur.DrawPixels(buf, 1280, 800, true)
	}
}
