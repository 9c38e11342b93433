// Package rfb understands enough of the RFB (VNC) protocol to relay a
// viewer's connection: it splits the viewer's byte stream into messages so
// a view-only viewer's input can be dropped without disturbing the rest.
package rfb

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Client-to-server message types (RFC 6143 and the registered extensions
// that noVNC and TigerVNC speak).
const (
	MsgSetPixelFormat           = 0
	MsgSetEncodings             = 2
	MsgFramebufferUpdateRequest = 3
	MsgKeyEvent                 = 4
	MsgPointerEvent             = 5
	MsgClientCutText            = 6
	MsgEnableContinuousUpdates  = 150
	MsgClientFence              = 248
	MsgXVP                      = 250
	MsgSetDesktopSize           = 251
	MsgGII                      = 253
	MsgQEMU                     = 255
)

// SecurityNone is the only security type the relay lets through: the viewer
// was authorised before the stream was opened.
const SecurityNone = 1

// maxCutText bounds a clipboard message, so a viewer cannot make the relay
// buffer without limit.
const maxCutText = 16 << 20

// ErrProtocol is returned for a stream that is not RFB as the relay speaks it.
var ErrProtocol = errors.New("RFB protocol error")

type phase int

const (
	phaseVersion phase = iota
	phaseSecurity
	phaseClientInit
	phaseMessages
)

// Filter reads a viewer's side of an RFB connection, from its first byte,
// and passes on what the viewer may send. With ViewOnly, input (keys,
// pointer, clipboard, desktop resize and power requests) is dropped.
type Filter struct {
	ViewOnly bool
	// OnInput, when set, is called for each key or pointer message
	// forwarded (QEMU's key events included, which noVNC sends): the
	// screen's changes after it may be its effect.
	OnInput func()

	phase phase
	buf   []byte
}

// Feed takes the next bytes from the viewer and returns those to forward to
// the server, in order. Incomplete messages are held until the rest comes.
func (f *Filter) Feed(data []byte) ([]byte, error) {
	f.buf = append(f.buf, data...)
	var out []byte
	for {
		message := f.phase == phaseMessages
		n, keep, err := f.next()
		if err != nil {
			return out, err
		}
		if n == 0 {
			break
		}
		if keep {
			if f.OnInput != nil && message && (f.buf[0] == MsgKeyEvent || f.buf[0] == MsgPointerEvent || f.buf[0] == MsgQEMU) {
				f.OnInput()
			}
			out = append(out, f.buf[:n]...)
		}
		f.buf = f.buf[n:]
	}
	// Do not pin a large backing array once it is drained.
	if len(f.buf) == 0 {
		f.buf = nil
	}
	return out, nil
}

// next sizes the first complete unit in buf: 0 when more bytes are needed.
func (f *Filter) next() (n int, keep bool, err error) {
	b := f.buf
	switch f.phase {
	case phaseVersion:
		if len(b) < 12 {
			return 0, false, nil
		}
		major, minor, ok := parseVersion(b[:12])
		if !ok || major != 3 {
			return 0, false, fmt.Errorf("%w: bad protocol version %q", ErrProtocol, b[:12])
		}
		if minor >= 7 {
			f.phase = phaseSecurity
		} else {
			// 3.3: the server decides the security type; the viewer says nothing.
			f.phase = phaseClientInit
		}
		return 12, true, nil
	case phaseSecurity:
		if len(b) < 1 {
			return 0, false, nil
		}
		if b[0] != SecurityNone {
			return 0, false, fmt.Errorf("%w: security type %d; the relay offers only None", ErrProtocol, b[0])
		}
		f.phase = phaseClientInit
		return 1, true, nil
	case phaseClientInit:
		if len(b) < 1 {
			return 0, false, nil
		}
		f.phase = phaseMessages
		return 1, true, nil
	}
	if len(b) == 0 {
		return 0, false, nil
	}
	size, input, err := messageSize(b)
	if err != nil || size == 0 || len(b) < size {
		return 0, false, err
	}
	return size, !(f.ViewOnly && input), nil
}

// messageSize returns the length of the client message at the start of b (0
// if b is too short to tell) and whether it is input.
func messageSize(b []byte) (int, bool, error) {
	need := func(n int) bool { return len(b) >= n }
	switch b[0] {
	case MsgSetPixelFormat:
		return 20, false, nil
	case MsgSetEncodings:
		if !need(4) {
			return 0, false, nil
		}
		return 4 + 4*int(binary.BigEndian.Uint16(b[2:4])), false, nil
	case MsgFramebufferUpdateRequest, MsgEnableContinuousUpdates:
		return 10, false, nil
	case MsgKeyEvent:
		return 8, true, nil
	case MsgPointerEvent:
		return 6, true, nil
	case MsgClientCutText:
		if !need(8) {
			return 0, false, nil
		}
		// The extended clipboard sends a negative (two's complement) length.
		l := int64(int32(binary.BigEndian.Uint32(b[4:8])))
		if l < 0 {
			l = -l
		}
		if l > maxCutText {
			return 0, false, fmt.Errorf("%w: clipboard message of %d bytes", ErrProtocol, l)
		}
		return 8 + int(l), true, nil
	case MsgClientFence:
		if !need(9) {
			return 0, false, nil
		}
		return 9 + int(b[8]), false, nil
	case MsgXVP:
		return 4, true, nil
	case MsgSetDesktopSize:
		if !need(8) {
			return 0, false, nil
		}
		return 8 + 16*int(b[6]), true, nil
	case MsgGII:
		if !need(4) {
			return 0, false, nil
		}
		// The sub-type byte's top bit says the byte order of what follows.
		var l uint16
		if b[1]&0x80 != 0 {
			l = binary.BigEndian.Uint16(b[2:4])
		} else {
			l = binary.LittleEndian.Uint16(b[2:4])
		}
		return 4 + int(l), true, nil
	case MsgQEMU:
		if !need(2) {
			return 0, false, nil
		}
		if b[1] == 0 { // extended key event
			return 12, true, nil
		}
		return 0, false, fmt.Errorf("%w: QEMU sub-message %d", ErrProtocol, b[1])
	}
	return 0, false, fmt.Errorf("%w: unknown client message type %d", ErrProtocol, b[0])
}

// parseVersion reads "RFB xxx.yyy\n".
func parseVersion(b []byte) (major, minor int, ok bool) {
	if string(b[:4]) != "RFB " || b[7] != '.' || b[11] != '\n' {
		return 0, 0, false
	}
	num := func(d []byte) (int, bool) {
		n := 0
		for _, c := range d {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	major, ok1 := num(b[4:7])
	minor, ok2 := num(b[8:11])
	return major, minor, ok1 && ok2
}
