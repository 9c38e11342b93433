package tools

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	"image/png"
)

// scalePNG resizes a PNG to w x h (nearest neighbour, which keeps text edges
// sharp and costs a few milliseconds). src is returned when already that size.
func scalePNG(src []byte, crop *image.Rectangle, w, h int) ([]byte, error) {
	img, err := png.Decode(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("decode screenshot: %w", err)
	}
	b := img.Bounds()
	if crop != nil {
		b = crop.Intersect(b)
	}
	if crop == nil && b.Dx() == w && b.Dy() == h {
		return src, nil
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	rgba, ok := img.(*image.RGBA)
	if !ok {
		rgba = image.NewRGBA(img.Bounds())
		draw.Draw(rgba, rgba.Bounds(), img, img.Bounds().Min, draw.Src)
	}
	for y := 0; y < h; y++ {
		sy := b.Min.Y + y*b.Dy()/h
		row := rgba.Pix[(sy-rgba.Rect.Min.Y)*rgba.Stride:]
		drow := dst.Pix[y*dst.Stride:]
		for x := 0; x < w; x++ {
			sx := (b.Min.X + x*b.Dx()/w - rgba.Rect.Min.X) * 4
			copy(drow[x*4:x*4+4], row[sx:sx+4])
		}
	}
	var out bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&out, dst); err != nil {
		return nil, fmt.Errorf("encode screenshot: %w", err)
	}
	return out.Bytes(), nil
}
