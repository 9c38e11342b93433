package display

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

func TestWindowManagerRunsWithDisplay(t *testing.T) {
	wmPath, err := exec.LookPath("openbox")
	if err != nil {
		t.Fatalf("openbox not installed (Debian package openbox): %v", err)
	}
	cfg := DefaultConfig()
	cfg.RuntimeDir = t.TempDir()
	cfg.WarmDisplays = 0
	cfg.WindowManager = []string{wmPath}
	s, err := New(context.Background(), cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if _, err := s.CreateDisplay(ctxT(t), &displayv1.CreateDisplayRequest{SessionId: "wm", Width: 640, Height: 480}); err != nil {
		t.Fatal(err)
	}
	d := s.mustDisplay(t, "wm")
	xc := clientConn(t, s, "wm")
	atom, err := xproto.InternAtom(xc, false, uint16(len("_NET_SUPPORTING_WM_CHECK")), "_NET_SUPPORTING_WM_CHECK").Reply()
	if err != nil {
		t.Fatal(err)
	}
	// An EWMH window manager announces itself on the root window.
	eventually(t, 10*time.Second, "window manager on the display", func() bool {
		p, err := xproto.GetProperty(xc, false, xproto.Setup(xc).DefaultScreen(xc).Root, atom.Atom, xproto.AtomWindow, 0, 1).Reply()
		return err == nil && p.ValueLen == 1
	})
	if _, err := s.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: "wm"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.wm.Exited():
	default:
		t.Error("window manager still running after delete")
	}
	if syscall.Kill(d.wm.PID, 0) == nil {
		t.Error("window manager process still exists")
	}
}
