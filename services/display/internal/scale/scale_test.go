package scale

import (
	"image"
	"image/color"
	"testing"
)

var ratios = []struct{ sw, sh, w, h int }{
	{1920, 1080, 1024, 768},
	{1920, 1080, 1280, 720},
	{1366, 768, 1024, 768},
	{1366, 768, 1280, 720},
	{1280, 800, 1024, 640},
	{2560, 1440, 1366, 768},
	{1024, 768, 1024, 768},
	{3840, 2160, 1280, 800},
	{1281, 799, 1280, 798},
}

func TestRoundTrip(t *testing.T) {
	for _, r := range ratios {
		m, err := New(r.sw, r.sh, r.w, r.h)
		if err != nil {
			t.Fatal(err)
		}
		for x := 0; x < r.w; x++ {
			sx, _ := m.ToScreen(x, 0)
			if sx < 0 || sx >= r.sw {
				t.Fatalf("%v: x %d maps off screen to %d", r, x, sx)
			}
			if back, _ := m.ToScaled(sx, 0); back != x {
				t.Fatalf("%v: x %d -> screen %d -> %d", r, x, sx, back)
			}
			// Screen pixels under successive scaled pixels only grow.
			if x > 0 {
				if prev, _ := m.ToScreen(x-1, 0); prev >= sx {
					t.Fatalf("%v: x %d and %d both map to %d", r, x-1, x, sx)
				}
			}
		}
		for y := 0; y < r.h; y++ {
			_, sy := m.ToScreen(0, y)
			if _, back := m.ToScaled(0, sy); back != y {
				t.Fatalf("%v: y %d -> screen %d -> %d", r, y, sy, back)
			}
		}
		// Every screen pixel maps into the scaled space.
		for x := 0; x < r.sw; x++ {
			if v, _ := m.ToScaled(x, 0); v < 0 || v >= r.w {
				t.Fatalf("%v: screen x %d maps to %d", r, x, v)
			}
		}
	}
}

// The scaled pixel a click maps from shows the screen pixel it lands on: a
// 1-pixel grid of distinct colours, scaled, sampled at each scaled pixel's
// centre with nearest-neighbour, is the colour of the mapped screen pixel.
func TestImageAgreesWithMapping(t *testing.T) {
	for _, r := range ratios[:4] {
		m, _ := New(r.sw, r.sh, r.w, r.h)
		src := image.NewRGBA(image.Rect(0, 0, r.sw, r.sh))
		// Wide bands, so bilinear blending leaves the band's colour intact
		// at a scaled pixel's centre.
		for y := 0; y < r.sh; y++ {
			for x := 0; x < r.sw; x++ {
				src.Set(x, y, color.RGBA{uint8(x / 16 * 20), uint8(y / 16 * 20), 0, 255})
			}
		}
		dst := Image(src, r.w, r.h)
		for _, p := range []image.Point{{0, 0}, {r.w / 2, r.h / 3}, {r.w - 1, r.h - 1}, {r.w / 3, r.h - 1}} {
			sx, sy := m.ToScreen(p.X, p.Y)
			// Skip scaled pixels straddling a band edge.
			if sx%16 < 3 || sx%16 > 12 || sy%16 < 3 || sy%16 > 12 {
				continue
			}
			want := src.RGBAAt(sx, sy)
			got := dst.RGBAAt(p.X, p.Y)
			if got.R != want.R || got.G != want.G {
				t.Errorf("%v: scaled %v shows %v, screen %d,%d is %v", r, p, got, sx, sy, want)
			}
		}
	}
}

func TestNewRefusesUpscaleAndEmpty(t *testing.T) {
	for _, c := range [][4]int{{1280, 800, 1281, 800}, {1280, 800, 0, 10}, {1280, 800, 10, -1}} {
		if _, err := New(c[0], c[1], c[2], c[3]); err == nil {
			t.Errorf("New%v succeeded", c)
		}
	}
}

func TestRectToScreenCovers(t *testing.T) {
	m, _ := New(1920, 1080, 1024, 768)
	x, y, w, h := m.RectToScreen(0, 0, 1024, 768)
	if x != 0 || y != 0 || w != 1920 || h != 1080 {
		t.Fatalf("whole screen maps to %d,%d %dx%d", x, y, w, h)
	}
	x, y, w, h = m.RectToScreen(100, 100, 10, 10)
	sx, sy := m.ToScreen(100, 100)
	ex, ey := m.ToScreen(109, 109)
	if sx < x || sy < y || ex >= x+w || ey >= y+h {
		t.Fatalf("rect %d,%d %dx%d misses %d,%d or %d,%d", x, y, w, h, sx, sy, ex, ey)
	}
}

func TestFit(t *testing.T) {
	for _, c := range []struct{ sw, sh, w, h, ww, wh int }{
		{400, 300, 1024, 768, 400, 300},
		{2000, 1000, 1024, 768, 1024, 512},
		{1000, 2000, 1024, 768, 384, 768},
	} {
		if w, h := Fit(c.sw, c.sh, c.w, c.h); w != c.ww || h != c.wh {
			t.Errorf("Fit(%d,%d in %d,%d) = %d,%d, want %d,%d", c.sw, c.sh, c.w, c.h, w, h, c.ww, c.wh)
		}
	}
}
