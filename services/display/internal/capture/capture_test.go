package capture

import (
	"bytes"
	"image/color"
	"image/png"
	"math/rand/v2"
	"testing"
)

func bgrxScreen(w, h int) Screen {
	return Screen{Width: w, Height: h, Depth: 24, BitsPerPixel: 32, ScanlinePad: 32, LSBFirst: true,
		RedMask: 0xff0000, GreenMask: 0xff00, BlueMask: 0xff}
}

// The PNG writer must round-trip through the standard decoder pixel for
// pixel, in both pixel layouts.
func TestPNGRoundTrip(t *testing.T) {
	const w, h = 37, 23
	rng := rand.New(rand.NewPCG(1, 2))
	bgrx := make([]byte, w*h*4)
	for i := range bgrx {
		bgrx[i] = byte(rng.IntN(256))
	}
	rgb565 := make([]byte, w*h*2)
	for i := range rgb565 {
		rgb565[i] = byte(rng.IntN(256))
	}
	tests := []struct {
		name  string
		frame *Frame
	}{
		{"bgrx", &Frame{data: bgrx, screen: bgrxScreen(w, h), width: w, height: h}},
		{"rgb565", &Frame{data: rgb565, screen: Screen{Width: w, Height: h, Depth: 16, BitsPerPixel: 16, ScanlinePad: 16, LSBFirst: true,
			RedMask: 0xf800, GreenMask: 0x07e0, BlueMask: 0x001f}, width: w, height: h}},
	}
	enc := NewEncoder()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := tc.frame.RGBA()
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second run reuses pooled state
				data, err := enc.Encode(tc.frame, PNG, 0)
				if err != nil {
					t.Fatal(err)
				}
				got, err := png.Decode(bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				if got.Bounds() != want.Bounds() {
					t.Fatalf("bounds %v, want %v", got.Bounds(), want.Bounds())
				}
				for y := range h {
					for x := range w {
						g := color.RGBAModel.Convert(got.At(x, y)).(color.RGBA)
						if g != want.RGBAAt(x, y) {
							t.Fatalf("pixel %d,%d = %v, want %v", x, y, g, want.RGBAAt(x, y))
						}
					}
				}
			}
		})
	}
}

func TestBGRXToRGBA(t *testing.T) {
	f := &Frame{data: []byte{0x10, 0x20, 0x30, 0x00}, screen: bgrxScreen(1, 1), width: 1, height: 1}
	img, err := f.RGBA()
	if err != nil {
		t.Fatal(err)
	}
	if got := img.RGBAAt(0, 0); got != (color.RGBA{R: 0x30, G: 0x20, B: 0x10, A: 0xff}) {
		t.Errorf("pixel = %v", got)
	}
}

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		v     uint32
		width uint
		want  byte
	}{{31, 5, 255}, {0, 5, 0}, {63, 6, 255}, {255, 8, 255}, {0x80, 8, 0x80}} {
		if got := scale(tc.v, tc.width); got != tc.want {
			t.Errorf("scale(%d, %d) = %d, want %d", tc.v, tc.width, got, tc.want)
		}
	}
}

// BenchmarkEncodePNG1280x800 measures encoding alone, on a screen-like frame
// of flat areas and noise-free edges.
func BenchmarkEncodePNG1280x800(b *testing.B) {
	const w, h = 1280, 800
	data := make([]byte, w*h*4)
	for y := range h {
		for x := range w {
			i := (y*w + x) * 4
			switch {
			case x > 100 && x < 700 && y > 100 && y < 500:
				data[i], data[i+1], data[i+2] = 0xcc, 0x66, 0x33
			case (x/7+y/13)%5 == 0:
				data[i], data[i+1], data[i+2] = 0xff, 0xff, 0xff
			}
		}
	}
	f := &Frame{data: data, screen: bgrxScreen(w, h), width: w, height: h}
	enc := NewEncoder()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := enc.Encode(f, PNG, 0); err != nil {
			b.Fatal(err)
		}
	}
}
