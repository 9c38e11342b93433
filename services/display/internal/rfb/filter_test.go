package rfb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

var handshake = append([]byte("RFB 003.008\n"), SecurityNone, 1)

func msg(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

var (
	pixelFormat = msg([]byte{MsgSetPixelFormat, 0, 0, 0}, make([]byte, 16))
	encodings   = msg([]byte{MsgSetEncodings, 0}, u16(2), u32(0), u32(7))
	update      = msg([]byte{MsgFramebufferUpdateRequest, 1}, u16(0), u16(0), u16(100), u16(100))
	key         = msg([]byte{MsgKeyEvent, 1, 0, 0}, u32(0x61))
	pointer     = msg([]byte{MsgPointerEvent, 1}, u16(10), u16(20))
	cut         = msg([]byte{MsgClientCutText, 0, 0, 0}, u32(5), []byte("hello"))
	extCut      = msg([]byte{MsgClientCutText, 0, 0, 0}, u32(uint32(0xffffffff-3)), []byte("abcd"))
	fence       = msg([]byte{MsgClientFence, 0, 0, 0}, u32(1), []byte{3}, []byte("xyz"))
	contUpdates = msg([]byte{MsgEnableContinuousUpdates, 1}, u16(0), u16(0), u16(10), u16(10))
	desktopSize = msg([]byte{MsgSetDesktopSize, 0}, u16(800), u16(600), []byte{1, 0}, make([]byte, 16))
	qemuKey     = msg([]byte{MsgQEMU, 0}, u16(1), u32(0x61), u32(30))
	xvp         = []byte{MsgXVP, 0, 1, 2}
)

func TestFilter(t *testing.T) {
	all := msg(pixelFormat, encodings, update, key, pointer, cut, extCut, fence, contUpdates, desktopSize, qemuKey, xvp, update)
	for _, tc := range []struct {
		name     string
		viewOnly bool
		want     []byte
		inputs   int // keys and pointer events told to OnInput
	}{
		{"control passes everything", false, msg(handshake, all), 3},
		{"view-only drops input", true, msg(handshake, pixelFormat, encodings, update, fence, contUpdates, update), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := msg(handshake, all)
			// Every split of the stream gives the same result.
			for _, chunk := range []int{1, 2, 3, 7, 13, len(in)} {
				inputs := 0
				f := &Filter{ViewOnly: tc.viewOnly, OnInput: func() { inputs++ }}
				var got []byte
				for i := 0; i < len(in); i += chunk {
					out, err := f.Feed(in[i:min(i+chunk, len(in))])
					if err != nil {
						t.Fatalf("chunk %d: %v", chunk, err)
					}
					got = append(got, out...)
				}
				if !bytes.Equal(got, tc.want) {
					t.Fatalf("chunk %d: forwarded %x\nwant %x", chunk, got, tc.want)
				}
				if inputs != tc.inputs {
					t.Fatalf("chunk %d: OnInput called %d times, want %d", chunk, inputs, tc.inputs)
				}
			}
		})
	}
}

func TestFilterVersion33HasNoSecurityByte(t *testing.T) {
	f := &Filter{ViewOnly: true}
	in := msg([]byte("RFB 003.003\n"), []byte{1}, pointer, update)
	got, err := f.Feed(in)
	if err != nil {
		t.Fatal(err)
	}
	if want := msg([]byte("RFB 003.003\n"), []byte{1}, update); !bytes.Equal(got, want) {
		t.Fatalf("forwarded %x, want %x", got, want)
	}
}

func TestFilterRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"not RFB", []byte("GET / HTTP/1.1\r\n")},
		{"version 4", []byte("RFB 004.000\n")},
		{"VNC auth chosen", msg([]byte("RFB 003.008\n"), []byte{2})},
		{"unknown message", msg(handshake, []byte{99, 0, 0, 0})},
		{"huge clipboard", msg(handshake, []byte{MsgClientCutText, 0, 0, 0}, u32(1<<30))},
		{"unknown QEMU message", msg(handshake, []byte{MsgQEMU, 9})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&Filter{ViewOnly: true}).Feed(tc.in)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want ErrProtocol", err)
			}
		})
	}
}

func FuzzFilter(f *testing.F) {
	f.Add(msg(handshake, pixelFormat, key, pointer, cut), true)
	f.Add(msg(handshake, desktopSize, qemuKey, fence), false)
	f.Fuzz(func(t *testing.T, in []byte, viewOnly bool) {
		flt := &Filter{ViewOnly: viewOnly}
		out, err := flt.Feed(in)
		if len(out) > len(in) {
			t.Fatalf("forwarded %d bytes of %d", len(out), len(in))
		}
		_ = err
	})
}
