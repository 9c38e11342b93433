package display

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// Many create/screenshot/type/delete cycles leave no process, socket, lock,
// directory, shared memory, file descriptor or goroutine behind.
func TestCyclesLeaveNothing(t *testing.T) {
	s, c := testService(t, "")
	// Warm up once so lazily created process-wide state is not counted.
	createDisplay(t, c, "warmup", 100, 100)
	if _, err := c.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: "warmup"}); err != nil {
		t.Fatal(err)
	}
	fds0, shm0 := countFDs(t), countSHM(t)
	g0 := runtime.NumGoroutine()

	const cycles = 30
	var seen []*display
	for i := range cycles {
		id := "cycle-" + strconv.Itoa(i)
		createDisplay(t, c, id, 200, 100)
		seen = append(seen, s.mustDisplay(t, id))
		if _, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
		if i == 0 && countSHM(t) <= shm0 {
			t.Fatal("the screenshot mapped no shared memory; the leak check would see nothing")
		}
		act(c, t, id, &displayv1.Action{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: "x€"}}})
		if _, err := c.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range seen {
		if xserver.IsServerFor(d.server.PID, d.server.Display) {
			t.Errorf("X server of %s still running", d.sessionID)
		}
		if exists(xserver.SocketPath(d.server.Display)) || exists(xserver.LockPath(d.server.Display)) || exists(d.dir) {
			t.Errorf("files of %s left", d.sessionID)
		}
	}
	if got := countFDs(t); got > fds0 {
		t.Errorf("%d file descriptors open after the cycles, %d before", got, fds0)
	}
	if got := countSHM(t); got > shm0 {
		t.Errorf("%d shared memory segments after the cycles, %d before", got, shm0)
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= g0 }, "goroutines to end")
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// countSHM counts the shared memory segments this process has mapped.
func countSHM(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "/SYSV")
}

// A display has no screen saver: left alone for ten minutes (an agent
// waiting on a model or a long command) it keeps showing its screen, even
// after a program asks for the pattern saver instead of blanking
// (`xset s noblank`), which draws black over everything.
func TestDisplayHasNoScreenSaver(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "saver", 320, 240)
	xc := clientConn(t, s, "saver")
	r, err := xproto.GetScreenSaver(xc).Reply()
	if err != nil {
		t.Fatal(err)
	}
	if r.Timeout != 0 {
		t.Fatalf("screen saver after %d s, want none", r.Timeout)
	}
}
