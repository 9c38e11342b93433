package resize

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/deskgrid/deskgrid/services/display/internal/xauthority"
	"github.com/deskgrid/deskgrid/services/display/internal/xconn"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
)

// startXvfb starts an Xvfb of w x h and connects to it. (Xtigervnc, which
// takes any size, is tested through the display service; one test process
// talks to one X server build.)
func startXvfb(t *testing.T, w, h int) (*xgb.Conn, xproto.Window) {
	t.Helper()
	dir := t.TempDir()
	cookie, err := xauthority.NewCookie()
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(dir, "Xauthority")
	if err := xauthority.Write(auth, cookie); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := xserver.Start(ctx, xserver.Options{Binary: "Xvfb", Width: w, Height: h, Depth: 24,
		AuthFile: auth, FirstDisplay: 4400, Displays: 20, StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	c, err := xconn.Dial(ctx, srv.Display, cookie)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, xproto.Setup(c).DefaultScreen(c).Root
}

func TestXvfbShrinksButCannotGrow(t *testing.T) {
	c, root := startXvfb(t, 640, 480)
	err := Screen(c, root, 800, 600, 96)
	var un *UnsupportedError
	if !errors.As(err, &un) || !strings.Contains(un.Reason, "640x480") {
		t.Fatalf("grow: %v, want an UnsupportedError naming the 640x480 limit", err)
	}
	for _, sz := range [][2]int{{320, 240}, {333, 222}, {640, 480}, {333, 222}} {
		if err := Screen(c, root, sz[0], sz[1], 120); err != nil {
			t.Fatalf("resize to %dx%d: %v", sz[0], sz[1], err)
		}
		w, h, err := Size(c, root)
		if err != nil || w != sz[0] || h != sz[1] {
			t.Fatalf("size %dx%d (%v), want %dx%d", w, h, err, sz[0], sz[1])
		}
	}
}

func TestMillimetresKeepDPI(t *testing.T) {
	for _, tc := range []struct{ px, dpi, mm int }{
		{1024, 96, 271}, {1920, 96, 508}, {800, 0, 212}, {1000, 254, 100},
	} {
		if got := millimetres(tc.px, tc.dpi); int(got) != tc.mm {
			t.Errorf("%d px at %d dpi: %d mm, want %d", tc.px, tc.dpi, got, tc.mm)
		}
	}
}
