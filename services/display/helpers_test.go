package display

import (
	"bytes"
	"context"
	"image"
	"image/color"
	_ "image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/xauthority"
	"github.com/deskgrid/deskgrid/services/display/internal/xconn"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

// testService starts a Service behind a real gRPC server and returns both
// the Service and a client for it.
func testService(tb testing.TB, dir string) (*Service, displayv1.DisplayServiceClient) {
	tb.Helper()
	return testServiceDeps(tb, dir, Deps{})
}

// testServiceDeps is testService with deps.
func testServiceDeps(tb testing.TB, dir string, deps Deps) (*Service, displayv1.DisplayServiceClient) {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	cfg := DefaultConfig()
	cfg.RuntimeDir = dir
	return testServiceConfig(tb, cfg, deps)
}

// testServiceConfig is testServiceDeps with a configuration.
func testServiceConfig(tb testing.TB, cfg Config, deps Deps) (*Service, displayv1.DisplayServiceClient) {
	tb.Helper()
	// Tests count processes and display numbers; the pool has its own.
	cfg.WarmDisplays = 0
	s, err := New(context.Background(), cfg, deps)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	cc := grpcservertest.Serve(tb, s.Register, grpcservertest.Options{})
	return s, displayv1.NewDisplayServiceClient(cc)
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func createDisplay(tb testing.TB, c displayv1.DisplayServiceClient, id string, w, h int32) *displayv1.Display {
	tb.Helper()
	resp, err := c.CreateDisplay(ctxT(tb), &displayv1.CreateDisplayRequest{SessionId: id, Width: w, Height: h})
	if err != nil {
		tb.Fatalf("create display %s: %v", id, err)
	}
	return resp.GetDisplay()
}

func decode(tb testing.TB, resp *displayv1.ScreenshotResponse) image.Image {
	tb.Helper()
	img, _, err := image.Decode(bytes.NewReader(resp.GetData()))
	if err != nil {
		tb.Fatalf("decode %s: %v", resp.GetContentType(), err)
	}
	return img
}

func decodePNG(tb testing.TB, data []byte) image.Image {
	tb.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		tb.Fatalf("decode png: %v", err)
	}
	return img
}

// clientConn connects to a session's display as a program in its sandbox
// would: with the display name and Xauthority file Lookup gives.
// startClient runs argv (a window manager, say) as an X client of the
// session's display until the test ends.
func startClient(tb testing.TB, s *Service, sessionID string, argv []string) *xserver.Client {
	tb.Helper()
	xd, xauth, ok := s.Lookup(sessionID)
	if !ok {
		tb.Fatalf("no display for %s", sessionID)
	}
	num, err := strconv.Atoi(xd[1:])
	if err != nil {
		tb.Fatal(err)
	}
	c, err := xserver.StartClient(num, xauth, filepath.Join(tb.TempDir(), "client.log"), argv, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func clientConn(tb testing.TB, s *Service, sessionID string) *xgb.Conn {
	tb.Helper()
	xd, xauth, ok := s.Lookup(sessionID)
	if !ok {
		tb.Fatalf("no display for %s", sessionID)
	}
	cookie, err := xauthority.Read(xauth)
	if err != nil {
		tb.Fatal(err)
	}
	num, err := strconv.Atoi(xd[1:])
	if err != nil {
		tb.Fatal(err)
	}
	c, err := xconn.Dial(ctxT(tb), num, cookie)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// showWindow maps a window filled with pixel at the given geometry and
// returns it.
func showWindow(tb testing.TB, c *xgb.Conn, x, y, w, h int, pixel uint32, events uint32) xproto.Window {
	tb.Helper()
	screen := xproto.Setup(c).DefaultScreen(c)
	wid, err := xproto.NewWindowId(c)
	if err != nil {
		tb.Fatal(err)
	}
	err = xproto.CreateWindowChecked(c, screen.RootDepth, wid, screen.Root,
		int16(x), int16(y), uint16(w), uint16(h), 0,
		xproto.WindowClassInputOutput, screen.RootVisual,
		xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{pixel, 1, events}).Check()
	if err != nil {
		tb.Fatal(err)
	}
	if err := xproto.MapWindowChecked(c, wid).Check(); err != nil {
		tb.Fatal(err)
	}
	return wid
}

func isRed(c color.Color) bool {
	r, g, b, _ := c.RGBA()
	return r>>8 > 200 && g>>8 < 50 && b>>8 < 50
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func mustReadCookie(tb testing.TB, path string) []byte {
	tb.Helper()
	c, err := xauthority.Read(path)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
