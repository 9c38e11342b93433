package display

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/xserver"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// helperEnv makes the test binary act as a node agent that starts a display
// and then waits to be killed.
const helperEnv = "DESKGRID_DISPLAY_TEST_AGENT"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		runAgent(dir)
		return
	}
	os.Exit(m.Run())
}

func runAgent(dir string) {
	cfg := DefaultConfig()
	cfg.RuntimeDir = dir
	cfg.WarmDisplays = 0
	s, err := New(context.Background(), cfg, Deps{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	resp, err := s.CreateDisplay(context.Background(), &displayv1.CreateDisplayRequest{SessionId: "agent", Width: 200, Height: 100})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	d := s.displays["agent"].d
	fmt.Println("ready", resp.GetDisplay().GetXDisplay()[1:], d.server.PID)
	select {}
}

// kill -9 of the process that runs the display service: its X server dies
// with it, and the next process's Reconcile removes what is left.
func TestKilledAgentLeavesNothingAfterReconcile(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ready" {
		t.Fatalf("agent said %q", line)
	}
	num, _ := strconv.Atoi(f[1])
	pid, _ := strconv.Atoi(f[2])
	if !xserver.IsServerFor(pid, num) {
		t.Fatalf("no X server %d for :%d", pid, num)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	testkit.Eventually(t, 5*time.Second, func() bool { return !xserver.IsServerFor(pid, num) }, "X server killed with its parent")

	s, _ := testService(t, dir)
	removed, err := s.Reconcile(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "agent" {
		t.Fatalf("removed = %v, want [agent]", removed)
	}
	for _, p := range []string{xserver.SocketPath(num), xserver.LockPath(num), s.sessionDir("agent")} {
		if exists(p) {
			t.Errorf("%s left after reconcile", p)
		}
	}
}

// An X server that dies under a running display makes its requests fail
// with FailedPrecondition, and Delete still cleans up.
func TestServerDeathIsReported(t *testing.T) {
	s, c := testService(t, "")
	createDisplay(t, c, "dies", 200, 100)
	d := s.mustDisplay(t, "dies")
	if err := syscall.Kill(d.server.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.server.Exited()
	testkit.Eventually(t, 5*time.Second, func() bool {
		_, err := c.Screenshot(ctxT(t), &displayv1.ScreenshotRequest{SessionId: "dies"})
		return status.Code(err) == codes.FailedPrecondition
	}, "death noticed")
	_, err := c.PerformActions(ctxT(t), &displayv1.PerformActionsRequest{SessionId: "dies", Actions: []*displayv1.Action{moveTo(1, 1)}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("actions on a dead display = %v, want FailedPrecondition", err)
	}
	if _, err := c.DeleteDisplay(ctxT(t), &displayv1.DeleteDisplayRequest{SessionId: "dies"}); err != nil {
		t.Fatal(err)
	}
	num := d.server.Display
	if exists(xserver.SocketPath(num)) || exists(xserver.LockPath(num)) || exists(d.dir) {
		t.Error("files left after deleting a dead display")
	}
}
