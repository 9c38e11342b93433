package display

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/resize"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func resizeTo(t *testing.T, c displayv1.DisplayServiceClient, id string, w, h int32) *displayv1.Display {
	t.Helper()
	resp, err := c.ResizeDisplay(ctxT(t), &displayv1.ResizeDisplayRequest{SessionId: id, Width: w, Height: h})
	if err != nil {
		t.Fatalf("resize to %dx%d: %v", w, h, err)
	}
	d := resp.GetDisplay()
	if d.GetWidth() != w || d.GetHeight() != h {
		t.Fatalf("resize to %dx%d answered %dx%d", w, h, d.GetWidth(), d.GetHeight())
	}
	return d
}

func clickAt(x, y int32) *displayv1.Action {
	return &displayv1.Action{Action: &displayv1.Action_Click{Click: &displayv1.Click{At: &displayv1.Point{X: x, Y: y}}}}
}

func TestResizeDisplay(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "rs", 800, 600)
	xc := clientConn(t, s, "rs")
	// A window open before the resizes is still open after them.
	keep := appWindow{title: "kept", x: 10, y: 10, w: 100, h: 80}.create(t, xc)
	// The first screenshot makes the shared-memory segment at 800x600.
	shot := func(w, h int) {
		t.Helper()
		resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "rs"})
		if err != nil {
			t.Fatal(err)
		}
		img := decode(t, resp)
		if b := img.Bounds(); b.Dx() != w || b.Dy() != h || resp.GetWidth() != int32(w) || resp.GetHeight() != int32(h) {
			t.Fatalf("screenshot %v (%dx%d), want %dx%d", b, resp.GetWidth(), resp.GetHeight(), w, h)
		}
		// The bottom-right corner is grabbed too: a red square put there
		// shows in it, so the grab covers the whole new screen.
		sq := showWindow(t, xc, w-20, h-20, 20, 20, 0xff0000, 0)
		defer xproto.DestroyWindow(xc, sq)
		testkit.Eventually(t, 5*time.Second, func() bool {
			resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "rs"})
			return err == nil && isRed(decode(t, resp).At(w-1, h-1))
		}, "red corner in the screenshot")
	}
	shot(800, 600)

	for _, size := range [][2]int32{{1024, 768}, {640, 480}, {801, 601}} {
		w, h := size[0], size[1]
		resizeTo(t, c, "rs", w, h)
		get, err := c.GetDisplay(ctxT(t), &displayv1.GetDisplayRequest{SessionId: "rs"})
		if err != nil {
			t.Fatal(err)
		}
		if d := get.GetDisplay(); d.GetWidth() != w || d.GetHeight() != h || d.GetDpi() != 96 {
			t.Fatalf("after resize to %dx%d: display %dx%d at %d dpi", w, h, d.GetWidth(), d.GetHeight(), d.GetDpi())
		}
		if ws := get.GetDisplay().GetWindows(); len(ws) != 1 || ws[0].GetId() != uint32(keep) {
			t.Fatalf("after resize to %dx%d: windows %v, want the one kept", w, h, ws)
		}
		// What a program connecting now sees: the size, and the same DPI.
		fc := clientConn(t, s, "rs")
		fresh := xproto.Setup(fc).DefaultScreen(fc)
		if int32(fresh.WidthInPixels) != w || int32(fresh.HeightInPixels) != h ||
			math.Round(float64(fresh.WidthInPixels)*25.4/float64(fresh.WidthInMillimeters)) != 96 {
			t.Fatalf("a new connection sees %dx%d px, %dx%d mm; want %dx%d at 96 dpi", fresh.WidthInPixels, fresh.HeightInPixels,
				fresh.WidthInMillimeters, fresh.HeightInMillimeters, w, h)
		}
		if g, err := xproto.GetGeometry(xc, xproto.Drawable(xproto.Setup(xc).DefaultScreen(xc).Root)).Reply(); err != nil || int32(g.Width) != w || int32(g.Height) != h {
			t.Fatalf("root window %v (%v), want %dx%d", g, err, w, h)
		}
		shot(int(w), int(h))

		// A click at the new bottom-right corner lands there.
		iw := newInputWindow(t, s, "rs", int(w), int(h))
		act(c, t, "rs", clickAt(w-1, h-1))
		ev := iw.next(t, "button press", func(ev xgb.Event) bool { _, ok := ev.(xproto.ButtonPressEvent); return ok }).(xproto.ButtonPressEvent)
		if int32(ev.RootX) != w-1 || int32(ev.RootY) != h-1 {
			t.Fatalf("click at %d,%d landed at %d,%d", w-1, h-1, ev.RootX, ev.RootY)
		}
		xproto.DestroyWindow(iw.c, iw.win)
		// One pixel beyond is refused before it reaches X.
		_, err = c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: "rs", Actions: []*displayv1.Action{clickAt(w, h-1)}})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("click at %d,%d on a %dx%d screen: %v, want InvalidArgument", w, h-1, w, h, err)
		}
		// Scaling follows: 1024x768 fits only the screens at least that big.
		_, err = c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "rs", ScaleTo: &displayv1.Size{Width: 1024, Height: 768}})
		if fits := w >= 1024 && h >= 768; (err == nil) != fits {
			t.Fatalf("scale to 1024x768 on %dx%d: %v", w, h, err)
		}
		resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "rs", ScaleTo: &displayv1.Size{Width: 320, Height: 240}})
		if err != nil || resp.GetWidth() != 320 || resp.GetHeight() != 240 {
			t.Fatalf("scale to 320x240 on %dx%d: %v %dx%d", w, h, err, resp.GetWidth(), resp.GetHeight())
		}
	}
	// Each resize replaced the screenshot segment; the X server holds only
	// the newest (the kernel frees the others).
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", s.mustDisplay(t, "rs").server.PID))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(maps), "/SYSV"); n != 1 {
		t.Errorf("the X server has %d shared memory segments attached, want 1", n)
	}
	// The record left for crash recovery follows too.
	m, err := readMeta(s.sessionDir("rs"))
	if err != nil || m.Width != 801 || m.Height != 601 {
		t.Fatalf("meta %+v (%v), want 801x601", m, err)
	}
}

// TestResizeByAProgramOnTheDisplay: a program in the session may resize the
// screen itself (xrandr); the service follows.
func TestResizeByAProgramOnTheDisplay(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "rs-prog", 640, 480)
	xc := clientConn(t, s, "rs-prog")
	// The program's own resize, through the same RandR requests.
	if err := resizeScreenAs(xc, 1024, 768); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		get, err := c.GetDisplay(ctxT(t), &displayv1.GetDisplayRequest{SessionId: "rs-prog"})
		return err == nil && get.GetDisplay().GetWidth() == 1024 && get.GetDisplay().GetHeight() == 768
	}, "1024x768 reported")
	resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "rs-prog"})
	if err != nil || resp.GetWidth() != 1024 || resp.GetHeight() != 768 {
		t.Fatalf("screenshot %dx%d (%v), want 1024x768", resp.GetWidth(), resp.GetHeight(), err)
	}
}

// resizeScreenAs resizes the screen as a program on the display would.
func resizeScreenAs(xc *xgb.Conn, w, h int) error {
	return resize.Screen(xc, xproto.Setup(xc).DefaultScreen(xc).Root, w, h, 96)
}

func TestResizeValidation(t *testing.T) {
	_, c := testService(t, "")
	createDisplay(t, c, "rs-bad", 640, 480)
	for _, tc := range []struct {
		id   string
		w, h int32
		code codes.Code
		msg  string
	}{
		{"rs-bad", 0, 480, codes.InvalidArgument, "width 0"},
		{"rs-bad", 640, 0, codes.InvalidArgument, "height 0"},
		{"rs-bad", 63, 480, codes.InvalidArgument, "width 63"},
		{"rs-bad", 7681, 480, codes.InvalidArgument, "width 7681"},
		{"rs-bad", 640, 4321, codes.InvalidArgument, "height 4321"},
		{"rs-bad", -1, 480, codes.InvalidArgument, "width -1"},
		{"", 640, 480, codes.InvalidArgument, "session_id"},
		{"nope", 640, 480, codes.NotFound, "nope"},
	} {
		_, err := c.ResizeDisplay(ctxT(t), &displayv1.ResizeDisplayRequest{SessionId: tc.id, Width: tc.w, Height: tc.h})
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
			t.Errorf("resize %q to %dx%d: %v, want %v mentioning %q", tc.id, tc.w, tc.h, err, tc.code, tc.msg)
		}
	}
	// The same size again is nothing to do.
	resizeTo(t, c, "rs-bad", 640, 480)
}

// encDesktopSize is the pseudo-encoding a viewer announces to be told of
// size changes.
const encDesktopSize = -223

// setEncodings replaces the viewer's encodings.
func (v *rfbViewer) setEncodings(encs ...int32) {
	b := []byte{2, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(len(encs)))
	for _, e := range encs {
		b = binary.BigEndian.AppendUint32(b, uint32(e))
	}
	v.send(b)
}

// awaitDesktopSize asks for updates until the server announces a new
// desktop size, and returns it.
func (v *rfbViewer) awaitDesktopSize() (int, int) {
	v.t.Helper()
	for {
		req := []byte{3, 1, 0, 0, 0, 0}
		req = binary.BigEndian.AppendUint16(req, uint16(v.width))
		req = binary.BigEndian.AppendUint16(req, uint16(v.height))
		v.send(req)
		switch hdr := v.mustRead(1); hdr[0] {
		case 0:
		case 2:
			continue
		case 3:
			h := v.mustRead(7)
			v.mustRead(int(binary.BigEndian.Uint32(h[3:7])))
			continue
		default:
			v.t.Fatalf("unexpected server message %d", hdr[0])
		}
		h := v.mustRead(3)
		rects := int(binary.BigEndian.Uint16(h[1:3]))
		for range rects {
			r := v.mustRead(12)
			rw, rh := int(binary.BigEndian.Uint16(r[4:6])), int(binary.BigEndian.Uint16(r[6:8]))
			switch enc := int32(binary.BigEndian.Uint32(r[8:12])); enc {
			case 0:
				v.mustRead(rw * rh * 4)
			case encDesktopSize:
				v.width, v.height = rw, rh
				return rw, rh
			default:
				v.t.Fatalf("rectangle encoding %d, not asked for", enc)
			}
		}
	}
}

func TestResizeReachesVNCViewers(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "rs-vnc", 800, 600)
	logPath := filepath.Join(s.sessionDir("rs-vnc"), logFile)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("X server log:\n%s", b)
		}
	})
	v := connectVNC(t, c, "rs-vnc", true)
	v.handshake()
	v.setEncodings(0, encDesktopSize)
	// The server handles a viewer's messages in order: once this update
	// arrives, it knows the viewer takes size changes. (One that does not
	// is disconnected by Xtigervnc at a resize, and sees the new size when
	// it connects again.)
	v.update(0, 0)
	// A viewer that only speaks raw cannot be told; Xtigervnc ends it.
	rawOnly := connectVNC(t, c, "rs-vnc", true)
	rawOnly.handshake()
	rawOnly.update(0, 0)
	if v.width != 800 || v.height != 600 {
		t.Fatalf("ServerInit %dx%d, want 800x600", v.width, v.height)
	}
	for _, size := range [][2]int{{1024, 768}, {640, 480}} {
		resizeTo(t, c, "rs-vnc", int32(size[0]), int32(size[1]))
		// The server may pass through the larger of the two sizes on the
		// way; it ends at the new one.
		deadline := time.Now().Add(10 * time.Second)
		for {
			w, h := v.awaitDesktopSize()
			if w == size[0] && h == size[1] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("viewer told %dx%d, want %dx%d", w, h, size[0], size[1])
			}
		}
	}
	var err error
	for err == nil {
		_, err = rawOnly.read(1 << 20)
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("viewer without desktop resize: stream ended with %v, want EOF", err)
	}
	// A viewer that connects now (as that one would again) is told the new
	// size at once.
	late := connectVNC(t, c, "rs-vnc", true)
	late.handshake()
	if late.width != 640 || late.height != 480 {
		t.Fatalf("new viewer ServerInit %dx%d, want 640x480", late.width, late.height)
	}
}

func TestResizeErrorsAtTheEdge(t *testing.T) {
	s, _ := testService(t, "")
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("cannot resize the display of session x to 9000x9000: the X server takes screen sizes up to 8192x8192: %w", errCannotResize), codes.FailedPrecondition},
		{fmt.Errorf("the screen of session x is 640x480 now: %w", errResized), codes.Aborted},
	} {
		err := s.toStatus(context.Background(), tc.err)
		if status.Code(err) != tc.code || status.Convert(err).Message() != tc.err.Error() {
			t.Errorf("%v became %v, want %v with the reason", tc.err, err, tc.code)
		}
	}
}
