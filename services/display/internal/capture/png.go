package capture

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"
)

// A PNG writer for opaque RGB frames. The standard library's encoder tries
// all five filters on every row and scans the image for transparency; for
// screenshots at the fastest level that is most of the time spent. Screens
// are flat colour and text, which the cheap Sub filter already reduces to
// runs of zeros, so every row uses it.

var pngSignature = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

const (
	pngFilterSub = 1
	idatSize     = 64 << 10
)

// chunkWriter cuts the zlib stream into IDAT chunks.
type chunkWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && c.err == nil {
		room := idatSize - len(c.buf)
		if room > len(p) {
			room = len(p)
		}
		c.buf = append(c.buf, p[:room]...)
		p = p[room:]
		if len(c.buf) == idatSize {
			c.flush()
		}
	}
	return n, c.err
}

func (c *chunkWriter) flush() {
	if len(c.buf) > 0 && c.err == nil {
		c.err = writeChunk(c.w, "IDAT", c.buf)
	}
	c.buf = c.buf[:0]
}

func writeChunk(w io.Writer, typ string, data []byte) error {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(len(data)))
	copy(hdr[4:], typ)
	crc := crc32.NewIEEE()
	crc.Write(hdr[4:8])
	crc.Write(data)
	var tail [4]byte
	binary.BigEndian.PutUint32(tail[:], crc.Sum32())
	for _, b := range [][]byte{hdr[:], data, tail[:]} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// pngState is reused between encodes: the deflate state alone is hundreds
// of kilobytes.
type pngState struct {
	zw     *zlib.Writer
	chunks chunkWriter
	row    []byte
}

type pngWriter struct{ pool sync.Pool }

// write encodes a width x height RGB image. row fills one row, already
// Sub-filtered: 3 bytes per pixel, each the difference to the pixel on its
// left.
func (p *pngWriter) write(w io.Writer, width, height int, row func(y int, dst []byte)) error {
	st, _ := p.pool.Get().(*pngState)
	if st == nil {
		zw, err := zlib.NewWriterLevel(nil, zlib.BestSpeed)
		if err != nil {
			return err
		}
		st = &pngState{zw: zw, chunks: chunkWriter{buf: make([]byte, 0, idatSize)}}
	}
	defer p.pool.Put(st)

	bw := bufio.NewWriterSize(w, 8<<10)
	if _, err := bw.Write(pngSignature); err != nil {
		return err
	}
	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(width))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(height))
	ihdr[8] = 8  // bits per channel
	ihdr[9] = 2  // truecolour
	ihdr[10] = 0 // deflate
	ihdr[11] = 0 // adaptive filtering
	ihdr[12] = 0 // no interlace
	if err := writeChunk(bw, "IHDR", ihdr[:]); err != nil {
		return err
	}

	st.chunks.w, st.chunks.err, st.chunks.buf = bw, nil, st.chunks.buf[:0]
	st.zw.Reset(&st.chunks)
	n := 1 + width*3
	if cap(st.row) < n {
		st.row = make([]byte, n)
	}
	out := st.row[:n]
	for y := 0; y < height; y++ {
		out[0] = pngFilterSub
		row(y, out[1:])
		if _, err := st.zw.Write(out); err != nil {
			return err
		}
	}
	if err := st.zw.Close(); err != nil {
		return err
	}
	st.chunks.flush()
	if st.chunks.err != nil {
		return st.chunks.err
	}
	st.chunks.w = nil
	if err := writeChunk(bw, "IEND", nil); err != nil {
		return err
	}
	return bw.Flush()
}

// subRowBGRX writes the Sub-filtered RGB row of src, 32-bit little-endian
// xRGB pixels, into dst.
func subRowBGRX(dst, src []byte) {
	var pr, pg, pb byte
	for len(src) >= 4 && len(dst) >= 3 {
		p := binary.LittleEndian.Uint32(src)
		r, g, b := byte(p>>16), byte(p>>8), byte(p)
		dst[0], dst[1], dst[2] = r-pr, g-pg, b-pb
		pr, pg, pb = r, g, b
		src, dst = src[4:], dst[3:]
	}
}

// subRowRGBA writes the Sub-filtered RGB row of src, RGBA pixels, into dst.
func subRowRGBA(dst, src []byte) {
	var pr, pg, pb byte
	for len(src) >= 4 && len(dst) >= 3 {
		r, g, b := src[0], src[1], src[2]
		dst[0], dst[1], dst[2] = r-pr, g-pg, b-pb
		pr, pg, pb = r, g, b
		src, dst = src[4:], dst[3:]
	}
}
