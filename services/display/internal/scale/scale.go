// Package scale maps between a screen and the smaller space computer-use
// models see it in (such as 1024x768 for a 1920x1080 screen), for images
// and for coordinates, so that a click on a pixel of a scaled screenshot
// lands on the screen pixel that scaled pixel was taken from.
package scale

import (
	"fmt"
	"image"

	"golang.org/x/image/draw"
)

// Mapping relates a screen of ScreenW x ScreenH to a scaled space of W x H.
// Each axis scales on its own. The zero Mapping is not valid; use New or
// Identity.
type Mapping struct {
	ScreenW, ScreenH int
	W, H             int
}

// Identity is the mapping of a screen onto itself.
func Identity(w, h int) Mapping { return Mapping{w, h, w, h} }

// New returns the mapping of a screenW x screenH screen to w x h. Only
// scaling down (or to the same size) is allowed: scaling up would invent
// pixels a click could not tell apart.
func New(screenW, screenH, w, h int) (Mapping, error) {
	if w <= 0 || h <= 0 {
		return Mapping{}, fmt.Errorf("scale_to %dx%d must be positive", w, h)
	}
	if w > screenW || h > screenH {
		return Mapping{}, fmt.Errorf("scale_to %dx%d is larger than the %dx%d screen; it only scales down", w, h, screenW, screenH)
	}
	return Mapping{screenW, screenH, w, h}, nil
}

// Scaled reports whether the mapping changes anything.
func (m Mapping) Scaled() bool { return m.W != m.ScreenW || m.H != m.ScreenH }

// ToScreen maps a scaled pixel to the screen pixel under its centre, which
// is the one a nearest-neighbour scaler takes it from and the centre of
// what a filtering scaler blends: floor((x + 1/2) * ScreenW / W).
func (m Mapping) ToScreen(x, y int) (int, int) {
	return axisToScreen(x, m.W, m.ScreenW), axisToScreen(y, m.H, m.ScreenH)
}

// ToScaled maps a screen pixel to the scaled pixel whose centre is nearest
// to its centre: floor((X + 1/2) * W / ScreenW). ToScaled(ToScreen(p)) == p
// for every scaled pixel p.
func (m Mapping) ToScaled(x, y int) (int, int) {
	return axisToScaled(x, m.ScreenW, m.W), axisToScaled(y, m.ScreenH, m.H)
}

func axisToScreen(v, n, screen int) int {
	return clamp((2*v+1)*screen/(2*n), screen)
}

func axisToScaled(v, screen, n int) int {
	return clamp((2*v+1)*n/(2*screen), n)
}

func clamp(v, n int) int {
	if v < 0 {
		return 0
	}
	if v >= n {
		return n - 1
	}
	return v
}

// RectToScreen maps a scaled rectangle (x, y, w, h) to the smallest screen
// rectangle covering every screen pixel its scaled pixels draw from.
func (m Mapping) RectToScreen(x, y, w, h int) (int, int, int, int) {
	x0, x1 := x*m.ScreenW/m.W, ceilDiv((x+w)*m.ScreenW, m.W)
	y0, y1 := y*m.ScreenH/m.H, ceilDiv((y+h)*m.ScreenH, m.H)
	return x0, y0, min(x1, m.ScreenW) - x0, min(y1, m.ScreenH) - y0
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Fit returns the largest size within w x h with the aspect ratio of
// srcW x srcH, never larger than the source.
func Fit(srcW, srcH, w, h int) (int, int) {
	if srcW <= w && srcH <= h {
		return srcW, srcH
	}
	// Compare srcW/srcH with w/h without rounding.
	if srcW*h >= srcH*w {
		return w, max(1, srcH*w/srcW)
	}
	return max(1, srcW*h/srcH), h
}

// Image scales src to w x h. Bilinear filtering over the source footprint
// keeps thin text and lines readable at the factors screens are scaled by
// (1.2 to 2.5) at a fraction of the cost of Catmull-Rom.
func Image(src *image.RGBA, w, h int) *image.RGBA {
	if src.Rect.Dx() == w && src.Rect.Dy() == h {
		return src
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.BiLinear.Scale(dst, dst.Rect, src, src.Rect, draw.Src, nil)
	return dst
}
