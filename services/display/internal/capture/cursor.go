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

// DrawPixels composites the cursor onto a w x h frame of the whole screen
// held as 4-byte pixels in buf: B, G, R, X when bgrx, else R, G, B, A.
// The part of the cursor outside the frame is left out.
func (cur *Cursor) DrawPixels(buf []byte, w, h int, bgrx bool) {
	cw, ch := cur.Image.Rect.Dx(), cur.Image.Rect.Dy()
	for y := range ch {
		fy := cur.Pos.Y + y
		if fy < 0 || fy >= h {
			continue
		}
		for x := range cw {
			fx := cur.Pos.X + x
			if fx < 0 || fx >= w {
				continue
			}
			s := cur.Image.Pix[y*cur.Image.Stride+4*x:]
			a := uint32(s[3])
			if a == 0 {
				continue
			}
			d := buf[4*(fy*w+fx):]
			r, g, b := s[0], s[1], s[2]
			if bgrx {
				r, b = b, r
			}
			// Premultiplied source over the destination.
			d[0] = byte(uint32(r) + uint32(d[0])*(255-a)/255)
			d[1] = byte(uint32(g) + uint32(d[1])*(255-a)/255)
			d[2] = byte(uint32(b) + uint32(d[2])*(255-a)/255)
		}
	}
}
