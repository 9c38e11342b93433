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
	"time"

	"github.com/jezek/xgb"

	"github.com/deskgrid/deskgrid/services/display/xauthority"
	"github.com/deskgrid/deskgrid/services/display/xserver"
)

// Dial connects to display num through its unix socket, authenticating with
// cookie.
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
	c, err := xgb.NewConnNet(&authConn{Conn: nc, cookie: cookie})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect to X display :%d: %w", num, err)
	}
	// The deadline bounded the handshake only; requests have their own.
	_ = nc.SetDeadline(time.Time{})
	return c, nil
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
