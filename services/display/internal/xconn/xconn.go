// Package xconn opens X protocol connections to a private display with its
// cookie.
//
// xgb only takes credentials from the file named by $XAUTHORITY, which is
// process-wide; changing it per display would race between sessions. Instead
// the connection's first write, xgb's setup request, is replaced by one that
// carries the display's own cookie.
package xconn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/randr"
	"github.com/jezek/xgb/screensaver"
	"github.com/jezek/xgb/shm"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"github.com/deskgrid/deskgrid/services/display/internal/xauthority"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
)

// Dial connects to display num through its unix socket, authenticating with
// cookie, and prepares the XTEST, DAMAGE and MIT-SHM extensions.
func Dial(ctx context.Context, num int, cookie []byte) (*xgb.Conn, error) {
	if len(cookie) != xauthority.CookieLen {
		return nil, fmt.Errorf("X cookie has %d bytes, want %d", len(cookie), xauthority.CookieLen)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", xserver.SocketPath(num))
	if err != nil {
		return nil, fmt.Errorf("connect to X display :%d: %w", num, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	// Held across the handshake and extension set-up: see initExtensions.
	extMu.Lock()
	defer extMu.Unlock()
	c, err := xgb.NewConnNet(&authConn{Conn: nc, cookie: cookie})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect to X display :%d: %w", num, err)
	}
	if err := initExtensions(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("X display :%d: %w", num, err)
	}
	// The deadline bounded the handshake only; requests have their own.
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// xgb keeps the decoders of extension events and errors in package-level
// maps that each extension's Init writes and every connection's reader goroutine
// reads, without a lock. So the maps are written once per process, by the
// first connection, while no other connection exists (extMu is held across
// every Dial); later connections only record the extension's opcode.
var (
	extMu      sync.Mutex
	registered = map[string]extensionBase{}
)

type extensionBase struct{ firstEvent, firstError byte }

var extensions = []struct {
	name     string
	init     func(*xgb.Conn) error
	optional bool
	// requestsOnly: only the extension's requests are used, never its
	// events or errors; its numbers may differ between X servers.
	requestsOnly bool
}{
	{"XTEST", xtest.Init, false, false},
	{"DAMAGE", damage.Init, false, false},
	// Screenshots fall back to plain GetImage without it.
	{"MIT-SHM", shm.Init, true, false},
	// Cursor in screenshots, and the size of the screen after a resize.
	{"XFIXES", xfixes.Init, true, false},
	{"RANDR", randr.Init, true, false},
	{"MIT-SCREEN-SAVER", screensaver.Init, true, true},
}

// initExtensions makes XTEST, DAMAGE and (if present) MIT-SHM, XFIXES, RANDR and MIT-SCREEN-SAVER usable on c. Callers hold extMu.
func initExtensions(c *xgb.Conn) error {
	for _, ext := range extensions {
		reply, err := xproto.QueryExtension(c, uint16(len(ext.name)), ext.name).Reply()
		if err != nil {
			return fmt.Errorf("query extension %s: %w", ext.name, err)
		}
		if !reply.Present {
			if ext.optional {
				continue
			}
			return fmt.Errorf("the X server lacks the %s extension", ext.name)
		}
		base := extensionBase{reply.FirstEvent, reply.FirstError}
		prev, ok := registered[ext.name]
		if ext.requestsOnly {
			ok, prev = true, base
		}
		if !ok {
			if err := ext.init(c); err != nil {
				return fmt.Errorf("extension %s: %w", ext.name, err)
			}
			registered[ext.name] = base
			continue
		}
		if prev != base {
			// Decoders are keyed by event number for the whole process.
			return fmt.Errorf("extension %s numbers its events from %d here, %d on the first display; mixing X server builds is not supported",
				ext.name, base.firstEvent, prev.firstEvent)
		}
		c.ExtLock.Lock()
		c.Extensions[ext.name] = reply.MajorOpcode
		c.ExtLock.Unlock()
	}
	return nil
}

// authConn rewrites the connection setup request, the first write on the
// connection, to carry cookie.
type authConn struct {
	net.Conn
	cookie []byte
	// sent is only touched by the first Write, which runs before xgb starts
	// its writer goroutine.
	sent bool
}

func (c *authConn) Write(p []byte) (int, error) {
	if c.sent {
		return c.Conn.Write(p)
	}
	c.sent = true
	// xgb writes the whole setup request at once: byte order, pad, major,
	// minor, name length, data length, pad, then name and data.
	if len(p) < 12 || p[0] != 'l' {
		return 0, errors.New("unexpected X connection setup request")
	}
	name := xauthority.CookieName
	buf := make([]byte, 12+pad4(len(name))+pad4(len(c.cookie)))
	buf[0] = 'l'
	binary.LittleEndian.PutUint16(buf[2:], 11)
	binary.LittleEndian.PutUint16(buf[4:], 0)
	binary.LittleEndian.PutUint16(buf[6:], uint16(len(name)))
	binary.LittleEndian.PutUint16(buf[8:], uint16(len(c.cookie)))
	copy(buf[12:], name)
	copy(buf[12+pad4(len(name)):], c.cookie)
	if _, err := c.Conn.Write(buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

func pad4(n int) int { return (n + 3) &^ 3 }

// InternAtoms interns atoms by name, writing each id where its name points,
// in one round trip: every request is sent before the first reply is read.
func InternAtoms(c *xgb.Conn, atoms map[string]*xproto.Atom) error {
	names := make([]string, 0, len(atoms))
	cookies := make([]xproto.InternAtomCookie, 0, len(atoms))
	for n := range atoms {
		names = append(names, n)
		cookies = append(cookies, xproto.InternAtom(c, false, uint16(len(n)), n))
	}
	for i, ck := range cookies {
		r, err := ck.Reply()
		if err != nil {
			return fmt.Errorf("intern atom %s: %w", names[i], err)
		}
		*atoms[names[i]] = r.Atom
	}
	return nil
}
