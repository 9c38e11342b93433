package display

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/xconn"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func TestTwoDisplaysAreIsolated(t *testing.T) {
	s, c := testService(t, "")
	a := createDisplay(t, c, "sess-a", 320, 200)
	b := createDisplay(t, c, "sess-b", 640, 480)
	if a.GetXDisplay() == b.GetXDisplay() {
		t.Fatalf("both sessions got display %s", a.GetXDisplay())
	}

	shot := func(id string) *displayv1.ScreenshotResponse {
		resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tc := range []struct {
		id   string
		w, h int
	}{{"sess-a", 320, 200}, {"sess-b", 640, 480}} {
		resp := shot(tc.id)
		if resp.GetContentType() != "image/png" {
			t.Errorf("content type = %q", resp.GetContentType())
		}
		img := decodePNG(t, resp.GetData())
		if got := img.Bounds().Size(); got.X != tc.w || got.Y != tc.h || int(resp.GetWidth()) != tc.w || int(resp.GetHeight()) != tc.h {
			t.Errorf("%s: image %v, response %dx%d, want %dx%d", tc.id, got, resp.GetWidth(), resp.GetHeight(), tc.w, tc.h)
		}
	}

	// A program on a draws a red window; a shows it, b does not.
	xa := clientConn(t, s, "sess-a")
	showWindow(t, xa, 10, 10, 100, 50, 0xff0000, 0)
	testkit.Eventually(t, 5*time.Second, func() bool {
		return isRed(decodePNG(t, shot("sess-a").GetData()).At(50, 30))
	}, "red window on a")
	imgB := decodePNG(t, shot("sess-b").GetData())
	for y := 0; y < 480; y++ {
		for x := 0; x < 640; x++ {
			if isRed(imgB.At(x, y)) {
				t.Fatalf("display b shows a's red window at %d,%d", x, y)
			}
		}
	}

	// b's cookie does not open a.
	_, xauthB, _ := s.Lookup("sess-b")
	numA, _ := strconv.Atoi(a.GetXDisplay()[1:])
	cookieB := mustReadCookie(t, xauthB)
	if conn, err := xconn.Dial(ctxT(t), numA, cookieB); err == nil {
		conn.Close()
		t.Fatal("b's cookie was accepted by a's X server")
	}
}

func TestScreenshotRegionAndJPEG(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "sess-r", 400, 300)
	xc := clientConn(t, s, "sess-r")
	showWindow(t, xc, 100, 100, 50, 40, 0xff0000, 0)

	region := &displayv1.Rect{X: 100, Y: 100, Width: 50, Height: 40}
	testkit.Eventually(t, 5*time.Second, func() bool {
		resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "sess-r", Region: region})
		if err != nil {
			t.Fatal(err)
		}
		img := decodePNG(t, resp.GetData())
		if img.Bounds().Dx() != 50 || img.Bounds().Dy() != 40 {
			t.Fatalf("region image is %v, want 50x40", img.Bounds())
		}
		return isRed(img.At(0, 0)) && isRed(img.At(49, 39))
	}, "red region")

	resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{
		SessionId: "sess-r", Format: displayv1.ImageFormat_IMAGE_FORMAT_JPEG, Quality: 90,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetContentType() != "image/jpeg" {
		t.Errorf("content type = %q", resp.GetContentType())
	}
	img := decode(t, resp)
	if img.Bounds().Dx() != 400 || img.Bounds().Dy() != 300 {
		t.Errorf("jpeg is %v, want 400x300", img.Bounds())
	}
	if !isRed(img.At(125, 120)) {
		t.Errorf("jpeg pixel at window centre is %v, want red", img.At(125, 120))
	}
}

func TestDepth16(t *testing.T) {
	s, c := testService(t, "")
	if _, err := c.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: "sess-16", Width: 200, Height: 100, Depth: 16}); err != nil {
		t.Fatal(err)
	}
	xc := clientConn(t, s, "sess-16")
	// Pure red in RGB565.
	showWindow(t, xc, 0, 0, 50, 50, 0xf800, 0)
	testkit.Eventually(t, 5*time.Second, func() bool {
		resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "sess-16"})
		if err != nil {
			t.Fatal(err)
		}
		img := decodePNG(t, resp.GetData())
		r, g, b, _ := img.At(10, 10).RGBA()
		return r>>8 == 255 && g == 0 && b == 0
	}, "red on a 16-bit display")
}

func TestValidation(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "sess-v", 200, 100)
	ctx := ctxT(t)
	tests := []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"empty session", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{})
			return err
		}, codes.InvalidArgument},
		{"unsafe session", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "../etc"})
			return err
		}, codes.InvalidArgument},
		{"upper case session", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "ABC"})
			return err
		}, codes.InvalidArgument},
		{"width too small", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "x", Width: 63, Height: 100})
			return err
		}, codes.InvalidArgument},
		{"width too large", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "x", Width: 7681, Height: 100})
			return err
		}, codes.InvalidArgument},
		{"height too large", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "x", Width: 100, Height: 4321})
			return err
		}, codes.InvalidArgument},
		{"negative height", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "x", Width: 100, Height: -5})
			return err
		}, codes.InvalidArgument},
		{"depth 8", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "x", Depth: 8})
			return err
		}, codes.InvalidArgument},
		{"dpi too large", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "x", Dpi: 1001})
			return err
		}, codes.InvalidArgument},
		{"already exists", func() error {
			_, err := c.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{SessionId: "sess-v", Width: 200, Height: 100})
			return err
		}, codes.AlreadyExists},
		{"get unknown", func() error {
			_, err := c.GetDisplay(ctx, &displayv1.GetDisplayRequest{SessionId: "nope"})
			return err
		}, codes.NotFound},
		{"screenshot unknown", func() error {
			_, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "nope"})
			return err
		}, codes.NotFound},
		{"actions unknown", func() error {
			_, err := c.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: "nope", Actions: []*displayv1.Action{
				{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{}}}},
			}})
			return err
		}, codes.NotFound},
		{"region outside", func() error {
			_, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "sess-v", Region: &displayv1.Rect{X: 150, Y: 0, Width: 100, Height: 10}})
			return err
		}, codes.InvalidArgument},
		{"region negative", func() error {
			_, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "sess-v", Region: &displayv1.Rect{X: -1, Y: 0, Width: 10, Height: 10}})
			return err
		}, codes.InvalidArgument},
		{"region empty width", func() error {
			_, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "sess-v", Region: &displayv1.Rect{X: 1, Y: 1, Width: 0, Height: 10}})
			return err
		}, codes.InvalidArgument},
		{"quality too high", func() error {
			_, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "sess-v", Format: displayv1.ImageFormat_IMAGE_FORMAT_JPEG, Quality: 101})
			return err
		}, codes.InvalidArgument},
		{"unknown format", func() error {
			_, err := c.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "sess-v", Format: 9})
			return err
		}, codes.InvalidArgument},
		{"delete unknown succeeds", func() error {
			_, err := c.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: "nope"})
			return err
		}, codes.OK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
		})
	}
	// Nothing half-done: the failed creates left no directories.
	ents, err := os.ReadDir(filepath.Join(s.cfg.RuntimeDir, "displays"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "sess-v" {
		t.Errorf("display dirs after refused requests: %v", ents)
	}
}

func TestGetListDelete(t *testing.T) {
	s, c := testService(t, "")
	d := createDisplay(t, c, "sess-d", 300, 200)
	got, err := c.GetDisplay(ctxT(t), &displayv1.GetDisplayRequest{SessionId: "sess-d"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetDisplay().GetXDisplay() != d.GetXDisplay() || got.GetDisplay().GetWidth() != 300 || got.GetDisplay().GetDepth() != 24 {
		t.Errorf("get = %v, want %v", got.GetDisplay(), d)
	}
	createDisplay(t, c, "sess-e", 0, 0)
	list, err := c.ListDisplays(ctxT(t), &displayv1.ListDisplaysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetDisplays()); n != 2 {
		t.Fatalf("list has %d displays, want 2", n)
	}
	if e := list.GetDisplays()[1]; e.GetSessionId() != "sess-e" || e.GetWidth() != 1280 || e.GetHeight() != 800 {
		t.Errorf("default size display = %v", e)
	}

	num, _ := strconv.Atoi(d.GetXDisplay()[1:])
	pid := s.mustDisplay(t, "sess-d").server.PID
	dir := s.sessionDir("sess-d")
	for _, p := range []string{xserver.SocketPath(num), xserver.LockPath(num), dir, filepath.Join(dir, "Xauthority"), filepath.Join(dir, "display.json")} {
		if !exists(p) {
			t.Errorf("%s missing while the display runs", p)
		}
	}
	if _, err := c.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: "sess-d"}); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Errorf("X server %d still running after delete", pid)
	}
	for _, p := range []string{xserver.SocketPath(num), xserver.LockPath(num), dir} {
		if exists(p) {
			t.Errorf("%s left after delete", p)
		}
	}
	if _, err := c.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: "sess-d"}); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if _, err := c.GetDisplay(ctxT(t), &displayv1.GetDisplayRequest{SessionId: "sess-d"}); status.Code(err) != codes.NotFound {
		t.Errorf("get after delete = %v, want NotFound", err)
	}
	// The session can have a display again.
	createDisplay(t, c, "sess-d", 100, 100)
}

func TestConcurrentCreatesGetDistinctDisplays(t *testing.T) {
	_, c := testService(t, "")
	const n = 6
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: "par-" + strconv.Itoa(i), Width: 100, Height: 100})
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = resp.GetDisplay().GetXDisplay()
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, x := range got {
		if seen[x] {
			t.Fatalf("display %s given twice: %v", x, got)
		}
		seen[x] = true
	}
}

func TestReconcileAfterCrash(t *testing.T) {
	dir := t.TempDir()
	s1, c1 := testService(t, dir)
	createDisplay(t, c1, "crashed", 200, 100)
	createDisplay(t, c1, "kept", 200, 100)
	crashed := s1.mustDisplay(t, "crashed")
	kept := s1.mustDisplay(t, "kept")
	s1.forget()

	s2, _ := testService(t, dir)
	removed, err := s2.Reconcile(ctxT(t), func(id string) bool { return id == "kept" })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "crashed" {
		t.Fatalf("removed = %v, want [crashed]", removed)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		return !xserver.IsServerFor(crashed.server.PID, crashed.server.Display)
	}, "crashed X server gone")
	for _, p := range []string{xserver.SocketPath(crashed.server.Display), xserver.LockPath(crashed.server.Display), s2.sessionDir("crashed")} {
		if exists(p) {
			t.Errorf("%s left after reconcile", p)
		}
	}
	if !xserver.IsServerFor(kept.server.PID, kept.server.Display) || !exists(s2.sessionDir("kept")) {
		t.Fatal("reconcile removed a display keep asked for")
	}

	// keep nil removes everything left.
	removed, err = s2.Reconcile(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "kept" {
		t.Fatalf("removed = %v, want [kept]", removed)
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		return !xserver.IsServerFor(kept.server.PID, kept.server.Display)
	}, "kept X server gone")
	if exists(xserver.SocketPath(kept.server.Display)) || exists(xserver.LockPath(kept.server.Display)) {
		t.Error("socket or lock left after reconcile")
	}
}

func TestReconcileSparesOwnDisplays(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "mine", 100, 100)
	removed, err := s.Reconcile(ctxT(t), nil)
	if err != nil || len(removed) != 0 {
		t.Fatalf("reconcile = %v, %v; want nothing removed", removed, err)
	}
	if _, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "mine"}); err != nil {
		t.Fatal(err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.WarmDisplays = 0
	s, err := New(context.Background(), cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	var ds []*display
	for _, id := range []string{"c1", "c2", "c3"} {
		req := &displayv1.CreateDisplayRequest{SessionId: id, Width: 100, Height: 100}
		if _, err := s.CreateDisplay(ctxT(t), req); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, s.mustDisplay(t, id))
	}
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if syscall.Kill(d.server.PID, 0) == nil {
			t.Errorf("X server of %s still running", d.sessionID)
		}
		if exists(xserver.SocketPath(d.server.Display)) || exists(xserver.LockPath(d.server.Display)) || exists(d.dir) {
			t.Errorf("files of %s left after close", d.sessionID)
		}
	}
	_, err = s.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: "late"})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("create after close = %v, want Unavailable", err)
	}
}

func TestStartFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.XvfbPath = "/bin/false"
	cfg.WarmDisplays = 0
	s, err := New(context.Background(), cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	_, err = s.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: "fail", Width: 100, Height: 100})
	if status.Code(err) != codes.Internal {
		t.Fatalf("create with a failing X server = %v, want Internal", err)
	}
	if exists(s.sessionDir("fail")) {
		t.Error("session dir left after failed start")
	}
	if _, ok := s.displays["fail"]; ok {
		t.Error("failed display still registered")
	}
}

// mustDisplay returns the running display of id.
func (s *Service) mustDisplay(tb testing.TB, id string) *display {
	tb.Helper()
	d, err := s.get(context.Background(), id)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// forget drops every display as a crash would: the X servers keep running
// and their files stay, but this Service no longer knows them.
func (s *Service) forget() {
	if s.pool.cancel != nil {
		s.pool.cancel()
	}
	<-s.pool.done
	for len(s.pool.ready) > 0 {
		d := <-s.pool.ready
		d.conn.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.displays {
		if e.d != nil {
			e.d.conn.Close()
		}
		delete(s.displays, id)
	}
}

// Screenshots through shared memory and through the socket (the fallback
// when MIT-SHM is unavailable) give the same pixels.
func TestSharedAndSocketGrabsAgree(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "grab", 300, 200)
	xc := clientConn(t, s, "grab")
	showWindow(t, xc, 10, 20, 100, 50, 0xff0000, 0)
	showWindow(t, xc, 150, 100, 60, 60, 0x00ff80, 0)
	d := s.mustDisplay(t, "grab")
	shot := func(region *displayv1.Rect) []byte {
		resp, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "grab", Region: region})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetData()
	}
	testkit.Eventually(t, 5*time.Second, func() bool {
		img := decodePNG(t, shot(nil))
		r, g, _, _ := img.At(170, 120).RGBA()
		return isRed(img.At(50, 40)) && g>>8 == 0xff && r == 0
	}, "windows drawn")
	region := &displayv1.Rect{X: 5, Y: 15, Width: 200, Height: 150}
	viaShared := [][]byte{shot(nil), shot(region)}
	d.shotMu.Lock()
	if d.shared == nil {
		t.Error("screenshots did not use shared memory")
	} else {
		_ = d.shared.Close()
		d.shared = nil
	}
	d.noShared = true
	d.shotMu.Unlock()
	viaSocket := [][]byte{shot(nil), shot(region)}
	for i := range viaShared {
		a, b := decodePNG(t, viaShared[i]), decodePNG(t, viaSocket[i])
		if a.Bounds() != b.Bounds() {
			t.Fatalf("bounds %v vs %v", a.Bounds(), b.Bounds())
		}
		for y := a.Bounds().Min.Y; y < a.Bounds().Max.Y; y++ {
			for x := a.Bounds().Min.X; x < a.Bounds().Max.X; x++ {
				if a.At(x, y) != b.At(x, y) {
					t.Fatalf("shot %d differs at %d,%d: %v vs %v", i, x, y, a.At(x, y), b.At(x, y))
				}
			}
		}
	}
}
