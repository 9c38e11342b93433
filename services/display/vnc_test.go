package display

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// rfbViewer is a minimal RFB client speaking through ConnectVNC, as the
// gateway's WebSocket relay does for a browser.
type rfbViewer struct {
	t      *testing.T
	stream displayv1.DisplayService_ConnectVNCClient
	buf    []byte
	width  int
	height int
	name   string
}

func connectVNC(t *testing.T, c displayv1.DisplayServiceClient, id string, viewOnly bool) *rfbViewer {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	t.Cleanup(cancel)
	st, err := c.ConnectVNC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&displayv1.ConnectVNCRequest{SessionId: id, ViewOnly: viewOnly}); err != nil {
		t.Fatal(err)
	}
	return &rfbViewer{t: t, stream: st}
}

func (v *rfbViewer) read(n int) ([]byte, error) {
	for len(v.buf) < n {
		m, err := v.stream.Recv()
		if err != nil {
			return nil, err
		}
		v.buf = append(v.buf, m.GetData()...)
	}
	out := v.buf[:n]
	v.buf = v.buf[n:]
	return out, nil
}

func (v *rfbViewer) mustRead(n int) []byte {
	v.t.Helper()
	b, err := v.read(n)
	if err != nil {
		v.t.Fatalf("read %d RFB bytes: %v", n, err)
	}
	return b
}

func (v *rfbViewer) send(b []byte) {
	v.t.Helper()
	if err := v.stream.Send(&displayv1.ConnectVNCRequest{Data: b}); err != nil {
		v.t.Fatal(err)
	}
}

// handshake runs RFB 3.8 with security None up to ServerInit.
func (v *rfbViewer) handshake() {
	v.t.Helper()
	if got := string(v.mustRead(12)); got[:4] != "RFB " {
		v.t.Fatalf("server version %q", got)
	}
	v.send([]byte("RFB 003.008\n"))
	n := int(v.mustRead(1)[0])
	if n == 0 {
		v.t.Fatalf("server refused: %s", v.mustRead(int(binary.BigEndian.Uint32(v.mustRead(4)))))
	}
	types := v.mustRead(n)
	hasNone := false
	for _, ty := range types {
		hasNone = hasNone || ty == 1
	}
	if !hasNone {
		v.t.Fatalf("security types %v lack None", types)
	}
	v.send([]byte{1})
	if res := binary.BigEndian.Uint32(v.mustRead(4)); res != 0 {
		v.t.Fatalf("security result %d", res)
	}
	v.send([]byte{1}) // shared
	init := v.mustRead(24)
	v.width = int(binary.BigEndian.Uint16(init[0:2]))
	v.height = int(binary.BigEndian.Uint16(init[2:4]))
	if bpp := init[4]; bpp != 32 {
		v.t.Fatalf("server pixel format has %d bits per pixel", bpp)
	}
	v.name = string(v.mustRead(int(binary.BigEndian.Uint32(init[20:24]))))
	// Raw encoding only, so the test can read pixels directly.
	v.send([]byte{2, 0, 0, 1, 0, 0, 0, 0})
}

// update asks for the whole screen and returns the pixel at x, y of the
// reply, as (r, g, b) in the server's default little-endian xRGB format.
func (v *rfbViewer) update(x, y int) [3]byte {
	v.t.Helper()
	req := []byte{3, 0, 0, 0, 0, 0}
	req = binary.BigEndian.AppendUint16(req, uint16(v.width))
	req = binary.BigEndian.AppendUint16(req, uint16(v.height))
	v.send(req)
	var px [3]byte
	for {
		hdr := v.mustRead(1)
		switch hdr[0] {
		case 0: // FramebufferUpdate
		case 2: // Bell
			continue
		case 3: // ServerCutText
			h := v.mustRead(7)
			v.mustRead(int(binary.BigEndian.Uint32(h[3:7])))
			continue
		default:
			v.t.Fatalf("unexpected server message %d", hdr[0])
		}
		h := v.mustRead(3)
		rects := int(binary.BigEndian.Uint16(h[1:3]))
		got := false
		for range rects {
			r := v.mustRead(12)
			rx, ry := int(binary.BigEndian.Uint16(r[0:2])), int(binary.BigEndian.Uint16(r[2:4]))
			rw, rh := int(binary.BigEndian.Uint16(r[4:6])), int(binary.BigEndian.Uint16(r[6:8]))
			if enc := int32(binary.BigEndian.Uint32(r[8:12])); enc != 0 {
				v.t.Fatalf("rectangle encoding %d, asked for raw", enc)
			}
			data := v.mustRead(rw * rh * 4)
			if x >= rx && x < rx+rw && y >= ry && y < ry+rh {
				o := ((y-ry)*rw + (x - rx)) * 4
				px = [3]byte{data[o+2], data[o+1], data[o]}
				got = true
			}
		}
		if got {
			return px
		}
	}
}

func (v *rfbViewer) pointer(x, y int, buttons byte) {
	b := []byte{5, buttons}
	b = binary.BigEndian.AppendUint16(b, uint16(x))
	b = binary.BigEndian.AppendUint16(b, uint16(y))
	v.send(b)
}

func TestVNCShowsTheDesktop(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "vnc-a", 320, 200)
	xc := clientConn(t, s, "vnc-a")
	showWindow(t, xc, 10, 10, 100, 50, 0xff0000, 0)
	// The VNC server is reachable only through its owner-only socket.
	sock := filepath.Join(s.sessionDir("vnc-a"), vncSocket)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want a 0600 socket", sock, fi.Mode())
	}
	if di, err := os.Stat(filepath.Dir(sock)); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("session dir mode %v (%v), want 0700", di.Mode(), err)
	}

	v := connectVNC(t, c, "vnc-a", false)
	v.handshake()
	if v.width != 320 || v.height != 200 || v.name != "deskgrid" {
		t.Fatalf("ServerInit %dx%d %q, want 320x200 \"deskgrid\"", v.width, v.height, v.name)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		px := v.update(50, 30)
		return px[0] > 200 && px[1] < 50 && px[2] < 50
	}, "red window in the VNC frame")
	if px := v.update(200, 150); px != [3]byte{0, 0, 0} {
		t.Errorf("background pixel %v, want black", px)
	}
}

func TestVNCViewOnlyCannotDrive(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "vnc-b", 320, 200)
	xc := clientConn(t, s, "vnc-b")
	root := xproto.Setup(xc).DefaultScreen(xc).Root
	pointerAt := func() (int, int) {
		r, err := xproto.QueryPointer(xc, root).Reply()
		if err != nil {
			t.Fatal(err)
		}
		return int(r.RootX), int(r.RootY)
	}

	watcher := connectVNC(t, c, "vnc-b", true)
	watcher.handshake()
	controller := connectVNC(t, c, "vnc-b", false)
	controller.handshake()

	// The server handles a viewer's messages in order, so once the update
	// asked for after the pointer event arrives, the event has been handled.
	watcher.pointer(100, 100, 0)
	watcher.update(0, 0)
	if x, y := pointerAt(); x == 100 && y == 100 {
		t.Fatal("a view-only viewer moved the pointer")
	}
	controller.pointer(200, 150, 0)
	controller.update(0, 0)
	testkit.Eventually(t, 5*time.Second, func() bool {
		x, y := pointerAt()
		return x == 200 && y == 150
	}, "pointer at 200,150")
	watcher.pointer(10, 10, 0)
	watcher.update(0, 0)
	if x, y := pointerAt(); x != 200 || y != 150 {
		t.Fatalf("pointer at %d,%d after a view-only move, want 200,150", x, y)
	}
}

func TestVNCEndsWithTheDisplay(t *testing.T) {
	_, c := testService(t, "")
	createDisplay(t, c, "vnc-c", 320, 200)
	v := connectVNC(t, c, "vnc-c", false)
	v.handshake()
	if _, err := c.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: "vnc-c"}); err != nil {
		t.Fatal(err)
	}
	var err error
	for err == nil {
		_, err = v.read(1 << 20)
	}
	if errors.Is(err, io.EOF) {
		return
	}
	if code := status.Code(err); code != codes.NotFound {
		t.Fatalf("stream ended with %v, want NotFound or EOF", err)
	}
}

func TestVNCUnknownSessionAndBadStream(t *testing.T) {
	_, c := testService(t, "")
	v := connectVNC(t, c, "no-such-session", false)
	if _, err := v.read(1); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown session: %v, want NotFound", err)
	}

	createDisplay(t, c, "vnc-d", 320, 200)
	v = connectVNC(t, c, "vnc-d", true)
	v.mustRead(12)
	v.send([]byte("RFB 003.008\n"))
	v.send([]byte{2}) // VNC authentication, which the relay does not offer
	var err error
	for err == nil {
		_, err = v.read(1 << 20)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad security type: %v, want InvalidArgument", err)
	}
}

// A person on VNC clicking a window three times does not make its repaints
// the screen's own background (a blinking cursor): the agent's next click
// there is seen to change it, at once, not after the change bound.
func TestViewerInputIsNotBackground(t *testing.T) {
	s, c := testService(t, "")
	colours, _ := lateDisplay(t, s, c, "viewer")
	v := connectVNC(t, c, "viewer", false)
	v.handshake()
	for range 3 {
		since := time.Now()
		v.pointer(100, 100, 1)
		v.pointer(100, 100, 0)
		waitPainted(t, s, "viewer", since, 50, 50, 100, 100)
	}
	fourthClickSettles(t, c, "viewer", colours)
}
