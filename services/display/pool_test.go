package display

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func poolService(t *testing.T, dir string, warm int) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.WarmDisplays = warm
	cfg.DefaultWidth, cfg.DefaultHeight = 320, 200
	s, err := New(context.Background(), cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func waitWarm(t *testing.T, s *Service, n int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() bool { return len(s.pool.ready) == n }, "warm displays")
}

func TestWarmDisplayIsHandedOver(t *testing.T) {
	dir := t.TempDir()
	s := poolService(t, dir, 1)
	waitWarm(t, s, 1)
	warm := <-s.pool.ready
	s.pool.ready <- warm
	poolDir := warm.dir

	resp, err := s.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	d := s.mustDisplay(t, "warm")
	if d != warm || resp.GetDisplay().GetXDisplay() != warm.xDisplay() {
		t.Fatal("create did not take the warm display")
	}
	if exists(poolDir) {
		t.Error("pool dir still there after hand-over")
	}
	m, err := readMeta(s.sessionDir("warm"))
	if err != nil || m.SessionID != "warm" || m.PID != warm.server.PID {
		t.Errorf("meta = %+v, %v", m, err)
	}
	xd, xauth, ok := s.Lookup("warm")
	if !ok || xd != warm.xDisplay() || xauth != filepath.Join(s.sessionDir("warm"), "Xauthority") {
		t.Errorf("lookup = %s %s %v", xd, xauth, ok)
	}
	// The moved cookie still opens the display, and the display works.
	xc := clientConn(t, s, "warm")
	showWindow(t, xc, 0, 0, 20, 20, 0xff0000, 0)
	testkit.Eventually(t, 5*time.Second, func() bool {
		r, err := s.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "warm"})
		if err != nil {
			t.Fatal(err)
		}
		return isRed(decodePNG(t, r.GetData()).At(5, 5))
	}, "red on the warm display")

	// The pool refills; another size starts cold.
	waitWarm(t, s, 1)
	if _, err := s.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: "cold", Width: 100, Height: 100}); err != nil {
		t.Fatal(err)
	}
	if len(s.pool.ready) != 1 {
		t.Error("a display of another size took the warm one")
	}

	// Close stops the pool too.
	refilled := <-s.pool.ready
	s.pool.ready <- refilled
	if err := s.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, dd := range []*display{warm, refilled} {
		if syscall.Kill(dd.server.PID, 0) == nil {
			t.Errorf("X server %d still running after close", dd.server.PID)
		}
		if exists(xserver.SocketPath(dd.server.Display)) || exists(xserver.LockPath(dd.server.Display)) {
			t.Errorf("files of :%d left after close", dd.server.Display)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, poolDirName)); len(ents) != 0 {
		t.Errorf("pool dirs left after close: %v", ents)
	}
}

func TestReconcileRemovesLeftoverWarmDisplays(t *testing.T) {
	dir := t.TempDir()
	s1 := poolService(t, dir, 2)
	waitWarm(t, s1, 2)
	var old []*display
	for range 2 {
		d := <-s1.pool.ready
		old = append(old, d)
		s1.pool.ready <- d
	}
	s1.forget()

	s2 := poolService(t, dir, 1)
	waitWarm(t, s2, 1)
	mine := <-s2.pool.ready
	s2.pool.ready <- mine
	if _, err := s2.Reconcile(ctxT(t), nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range old {
		testkit.Eventually(t, 5*time.Second, func() bool {
			return !xserver.IsServerFor(d.server.PID, d.server.Display)
		}, "leftover warm X server gone")
		if exists(d.dir) {
			t.Errorf("leftover pool dir %s not removed", d.dir)
		}
	}
	if !xserver.IsServerFor(mine.server.PID, mine.server.Display) || !exists(mine.dir) {
		t.Fatal("reconcile removed the new service's own warm display")
	}
}
