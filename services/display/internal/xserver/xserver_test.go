package xserver

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/display/internal/xauthority"
)

// A range no other test uses, far above the service's default.
const testFirst = 4200

func startOpts(t *testing.T, first, n int) Options {
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
	return Options{Binary: "Xvfb", Width: 100, Height: 100, Depth: 24, AuthFile: auth,
		LogFile: filepath.Join(dir, "log"), FirstDisplay: first, Displays: n, StopTimeout: time.Second}
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return srv
}

func TestLockNamesServerAndStopCleans(t *testing.T) {
	srv := start(t, startOpts(t, testFirst, 10))
	if pid, ok := readLock(srv.Display); !ok || pid != srv.PID {
		t.Errorf("lock names %d, want the server %d", pid, srv.PID)
	}
	if !IsServerFor(srv.PID, srv.Display) {
		t.Error("IsServerFor = false for the running server")
	}
	if IsServerFor(srv.PID, srv.Display+1) {
		t.Error("IsServerFor = true for another display number")
	}
	if IsServerFor(os.Getpid(), srv.Display) {
		t.Error("IsServerFor = true for a process that is no X server")
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(SocketPath(srv.Display)); !errors.Is(err, os.ErrNotExist) {
		t.Error("socket left after stop")
	}
	if _, err := os.Stat(LockPath(srv.Display)); !errors.Is(err, os.ErrNotExist) {
		t.Error("lock left after stop")
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestClaimSkipsTakenNumbers(t *testing.T) {
	first := testFirst + 20
	// first: locked by a live process (this one).
	if err := writeLock(first, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(LockPath(first)) })
	// first+1: a listener that ignores the lock protocol.
	if err := os.MkdirAll(SocketDir, 0o1777); err != nil {
		t.Fatal(err)
	}
	os.Remove(SocketPath(first + 1))
	l, err := net.Listen("unix", SocketPath(first+1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	// first+2: a stale lock of a dead process, free to take over.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := writeLock(first+2, dead.Process.Pid, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(LockPath(first + 2)) })

	srv := start(t, startOpts(t, first, 5))
	if srv.Display != first+2 {
		t.Fatalf("server on :%d, want :%d", srv.Display, first+2)
	}
}

func TestNoFreeDisplay(t *testing.T) {
	first := testFirst + 40
	if err := writeLock(first, os.Getpid(), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(LockPath(first)) })
	_, err := Start(context.Background(), startOpts(t, first, 1))
	if !errors.Is(err, ErrNoFreeDisplay) {
		t.Fatalf("err = %v, want ErrNoFreeDisplay", err)
	}
}

func TestStartFailureReportsServerLog(t *testing.T) {
	opts := startOpts(t, testFirst+60, 5)
	opts.Depth = 7 // Xvfb refuses this depth
	_, err := Start(context.Background(), opts)
	if err == nil {
		t.Fatal("want an error")
	}
	if _, serr := os.Stat(LockPath(testFirst + 60)); !errors.Is(serr, os.ErrNotExist) {
		t.Error("lock left after a failed start")
	}
	if !strings.Contains(err.Error(), "Couldn't add screen") {
		t.Errorf("error %q does not carry the server's own message", err)
	}
}

func TestKillLeftover(t *testing.T) {
	srv := start(t, startOpts(t, testFirst+80, 10))
	if err := Kill(context.Background(), srv.PID, srv.Display, time.Second); err != nil {
		t.Fatal(err)
	}
	<-srv.Exited()
	RemoveLeftoversOf(srv.Display, srv.PID)
	if _, err := os.Stat(LockPath(srv.Display)); !errors.Is(err, os.ErrNotExist) {
		t.Error("lock left")
	}
	// A pid that is no X server for the number is left alone.
	if err := Kill(context.Background(), os.Getpid(), srv.Display, time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestXtigervncListensOnlyOnItsSocket(t *testing.T) {
	opts := startOpts(t, testFirst+40, 10)
	opts.Binary = "Xtigervnc"
	opts.VNCSocket = filepath.Join(filepath.Dir(opts.AuthFile), "vnc.sock")
	srv := start(t, opts)
	fi, err := os.Stat(opts.VNCSocket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("VNC socket mode %v, want a 0600 socket", fi.Mode())
	}
	c, err := net.Dial("unix", opts.VNCSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	greeting := make([]byte, 12)
	if _, err := io.ReadFull(c, greeting); err != nil || !strings.HasPrefix(string(greeting), "RFB 003.") {
		t.Fatalf("greeting %q, %v", greeting, err)
	}
	// No TCP listener of its own: the server's sockets are all unix ones.
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	inodes := socketInodes(t, srv.PID)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && inodes[f[9]] {
			t.Fatalf("X server %d listens on TCP: %s", srv.PID, line)
		}
	}
}

// socketInodes lists the socket inodes pid holds open.
func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	return out
}
