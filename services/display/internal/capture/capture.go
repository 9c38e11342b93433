// Package capture reads a display's pixels with GetImage and encodes them as
// PNG or JPEG.
package capture

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/jpeg"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// Format is an image encoding.
type Format int

const (
	PNG Format = iota
	JPEG
)

// ContentType is the MIME type of f.
func (f Format) ContentType() string {
	if f == JPEG {
		return "image/jpeg"
	}
	return "image/png"
}

// DefaultJPEGQuality is used when no quality is asked for.
const DefaultJPEGQuality = 80

// Screen is what Grab needs to know about a display's root window.
type Screen struct {
	Root          xproto.Window
	Width, Height int
	Depth         int
	// BitsPerPixel and ScanlinePad are of the ZPixmap format of Depth.
	BitsPerPixel int
	ScanlinePad  int
	// LSBFirst is the server's image byte order.
	LSBFirst bool
	// Masks of the root visual.
	RedMask, GreenMask, BlueMask uint32
}

// ScreenOf describes the default screen of c.
func ScreenOf(c *xgb.Conn) (Screen, error) {
	setup := xproto.Setup(c)
	if len(setup.Roots) == 0 {
		return Screen{}, errors.New("X server has no screen")
	}
	root := setup.DefaultScreen(c)
	s := Screen{
		Root:     root.Root,
		Width:    int(root.WidthInPixels),
		Height:   int(root.HeightInPixels),
		Depth:    int(root.RootDepth),
		LSBFirst: setup.ImageByteOrder == xproto.ImageOrderLSBFirst,
	}
	for _, f := range setup.PixmapFormats {
		if int(f.Depth) == s.Depth {
			s.BitsPerPixel, s.ScanlinePad = int(f.BitsPerPixel), int(f.ScanlinePad)
		}
	}
	for _, d := range root.AllowedDepths {
		for _, v := range d.Visuals {
			if v.VisualId == root.RootVisual {
				s.RedMask, s.GreenMask, s.BlueMask = v.RedMask, v.GreenMask, v.BlueMask
			}
		}
	}
	if s.BitsPerPixel == 0 {
		return Screen{}, fmt.Errorf("X server has no pixmap format for depth %d", s.Depth)
	}
	return s, nil
}

// Rect is a region of the screen.
type Rect struct{ X, Y, Width, Height int }

// Frame is a grab of a screen region in the server's pixel format.
type Frame struct {
	data   []byte
	screen Screen
	width  int
	height int
	rgba   *image.RGBA
}

// Width and Height are the frame's size in pixels.
func (f *Frame) Width() int  { return f.width }
func (f *Frame) Height() int { return f.height }

// Data is the frame's pixels as the server sent them, for comparing frames.
func (f *Frame) Data() []byte { return f.data }

// Grab reads rect of the screen (the whole screen when rect is empty).
func Grab(c *xgb.Conn, s Screen, rect Rect) (*Frame, error) {
	if rect.Width == 0 && rect.Height == 0 {
		rect = Rect{Width: s.Width, Height: s.Height}
	}
	reply, err := xproto.GetImage(c, xproto.ImageFormatZPixmap, xproto.Drawable(s.Root),
		int16(rect.X), int16(rect.Y), uint16(rect.Width), uint16(rect.Height), ^uint32(0)).Reply()
	if err != nil {
		return nil, fmt.Errorf("GetImage: %w", err)
	}
	f := &Frame{data: reply.Data, screen: s, width: rect.Width, height: rect.Height}
	if f.bgrx() && len(f.data) < f.width*f.height*4 {
		return nil, fmt.Errorf("GetImage returned %d bytes, want %d", len(f.data), f.width*f.height*4)
	}
	return f, nil
}

// bgrx reports whether the frame is 32-bit little-endian xRGB, the layout of
// every 24-bit X server on x86 and ARM, which has fast paths.
func (f *Frame) bgrx() bool { return f.screen.BGRX() }

// BGRX reports whether the screen's pixels are 32-bit little-endian xRGB
// (what a video encoder calls bgr0), so Frame.Data is that layout.
func (s Screen) BGRX() bool {
	return s.BitsPerPixel == 32 && s.LSBFirst && s.RedMask == 0xff0000 && s.GreenMask == 0xff00 && s.BlueMask == 0xff
}

// RGBA converts the frame to an image.
func (f *Frame) RGBA() (*image.RGBA, error) {
	if f.rgba != nil {
		return f.rgba, nil
	}
	w, h, s := f.width, f.height, f.screen
	var err error
	switch {
	case f.bgrx():
		pix := make([]byte, w*h*4)
		src := f.data[:w*h*4]
		for i := 0; i+3 < len(pix); i += 4 {
			pix[i], pix[i+1], pix[i+2], pix[i+3] = src[i+2], src[i+1], src[i], 0xff
		}
		f.rgba = &image.RGBA{Pix: pix, Stride: w * 4, Rect: image.Rect(0, 0, w, h)}
	case s.BitsPerPixel == 16 || s.BitsPerPixel == 32:
		f.rgba, err = convertMasked(f.data, s, w, h)
	default:
		err = fmt.Errorf("unsupported pixel format: %d bits per pixel", s.BitsPerPixel)
	}
	return f.rgba, err
}

// convertMasked handles any true-colour layout by its channel masks.
func convertMasked(data []byte, s Screen, w, h int) (*image.RGBA, error) {
	bpp := s.BitsPerPixel / 8
	pad := s.ScanlinePad / 8
	if pad == 0 {
		pad = 1
	}
	stride := (w*bpp + pad - 1) / pad * pad
	if len(data) < stride*h {
		return nil, fmt.Errorf("GetImage returned %d bytes, want %d", len(data), stride*h)
	}
	rs, rw := maskShift(s.RedMask)
	gs, gw := maskShift(s.GreenMask)
	bs, bw := maskShift(s.BlueMask)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		row := data[y*stride:]
		out := img.Pix[y*img.Stride:]
		for x := 0; x < w; x++ {
			var p uint32
			b := row[x*bpp:]
			if bpp == 2 {
				if s.LSBFirst {
					p = uint32(b[0]) | uint32(b[1])<<8
				} else {
					p = uint32(b[1]) | uint32(b[0])<<8
				}
			} else if s.LSBFirst {
				p = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
			} else {
				p = uint32(b[3]) | uint32(b[2])<<8 | uint32(b[1])<<16 | uint32(b[0])<<24
			}
			o := out[x*4:]
			o[0] = scale(p&s.RedMask>>rs, rw)
			o[1] = scale(p&s.GreenMask>>gs, gw)
			o[2] = scale(p&s.BlueMask>>bs, bw)
			o[3] = 0xff
		}
	}
	return img, nil
}

func maskShift(m uint32) (shift, width uint) {
	if m == 0 {
		return 0, 0
	}
	for m&1 == 0 {
		m >>= 1
		shift++
	}
	for m&1 == 1 {
		m >>= 1
		width++
	}
	return shift, width
}

// scale widens a channel of width bits to 8 bits, so 5-bit 31 becomes 255.
func scale(v uint32, width uint) byte {
	switch {
	case width == 0:
		return 0
	case width >= 8:
		return byte(v >> (width - 8))
	default:
		return byte(v * 255 / (1<<width - 1))
	}
}

// Encoder encodes frames; it is safe for concurrent use and reuses its
// compression state between calls.
type Encoder struct {
	png pngWriter
}

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder { return &Encoder{} }

// Encode writes f in format ft. quality applies to JPEG; 0 means the default.
func (e *Encoder) Encode(f *Frame, ft Format, quality int) ([]byte, error) {
	var buf bytes.Buffer
	if ft == JPEG {
		img, err := f.RGBA()
		if err != nil {
			return nil, err
		}
		if quality <= 0 {
			quality = DefaultJPEGQuality
		}
		buf.Grow(f.width * f.height / 8)
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality}); err != nil {
			return nil, fmt.Errorf("encode JPEG: %w", err)
		}
		return buf.Bytes(), nil
	}
	if !f.bgrx() {
		img, err := f.RGBA()
		if err != nil {
			return nil, err
		}
		return e.EncodeImage(img, ft, quality)
	}
	stride := f.width * 4
	row := func(y int, dst []byte) { subRowBGRX(dst, f.data[y*stride:(y+1)*stride]) }
	buf.Grow(f.width * f.height / 32)
	if err := e.png.write(&buf, f.width, f.height, row); err != nil {
		return nil, fmt.Errorf("encode PNG: %w", err)
	}
	return buf.Bytes(), nil
}

// EncodeImage writes an opaque image in format ft, as Encode does.
func (e *Encoder) EncodeImage(img *image.RGBA, ft Format, quality int) ([]byte, error) {
	var buf bytes.Buffer
	w, h := img.Rect.Dx(), img.Rect.Dy()
	if ft == JPEG {
		if quality <= 0 {
			quality = DefaultJPEGQuality
		}
		buf.Grow(w * h / 8)
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: quality}); err != nil {
			return nil, fmt.Errorf("encode JPEG: %w", err)
		}
		return buf.Bytes(), nil
	}
	row := func(y int, dst []byte) {
		off := img.PixOffset(img.Rect.Min.X, img.Rect.Min.Y+y)
		subRowRGBA(dst, img.Pix[off:off+w*4])
	}
	buf.Grow(w * h / 32)
	if err := e.png.write(&buf, w, h, row); err != nil {
		return nil, fmt.Errorf("encode PNG: %w", err)
	}
	return buf.Bytes(), nil
}
