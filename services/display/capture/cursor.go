package capture

import (
	"fmt"
	"image"
	"image/draw"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xfixes"
)

// Cursor is the pointer's image where it is on the screen. X draws the
// pointer in hardware, outside the framebuffer GetImage reads, so a
// screenshot that should show it composites it in.
type Cursor struct {
	// Image is placed with its top-left corner at Pos, in screen pixels.
	Image *image.RGBA
	Pos   image.Point
}

// CursorOf reads the current cursor through XFIXES. The connection must
// have negotiated the XFIXES version (InitCursor).
func CursorOf(c *xgb.Conn) (*Cursor, error) {
	r, err := xfixes.GetCursorImage(c).Reply()
	if err != nil {
		return nil, fmt.Errorf("XFIXES GetCursorImage: %w", err)
	}
	w, h := int(r.Width), int(r.Height)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	if len(r.CursorImage) < w*h {
		return nil, fmt.Errorf("cursor image has %d pixels, want %d", len(r.CursorImage), w*h)
	}
	// Premultiplied ARGB, as image.RGBA is.
	for i, p := range r.CursorImage[:w*h] {
		o := i * 4
		img.Pix[o], img.Pix[o+1], img.Pix[o+2], img.Pix[o+3] = byte(p>>16), byte(p>>8), byte(p), byte(p>>24)
	}
	return &Cursor{Image: img, Pos: image.Pt(int(r.X)-int(r.Xhot), int(r.Y)-int(r.Yhot))}, nil
}

// InitCursor negotiates XFIXES on c, which its requests need first.
func InitCursor(c *xgb.Conn) error {
	if _, err := xfixes.QueryVersion(c, 4, 0).Reply(); err != nil {
		return fmt.Errorf("XFIXES version: %w", err)
	}
	return nil
}

// Draw composites the cursor onto img, a grab whose top-left corner is at
// origin on the screen.
func (cur *Cursor) Draw(img *image.RGBA, origin image.Point) {
	at := cur.Pos.Sub(origin)
	r := cur.Image.Rect.Add(at).Add(img.Rect.Min)
	draw.Draw(img, r, cur.Image, image.Point{}, draw.Over)
}
