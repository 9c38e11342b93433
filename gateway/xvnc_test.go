package gateway

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// startXtigervnc runs TigerVNC's X server as a node does (RFB on a private
// unix socket only, security type None, no TCP), with a white root window,
// and returns its RFB socket.
func startXtigervnc(t *testing.T, width, height int, name string) string {
	t.Helper()
	bin, err := exec.LookPath("Xtigervnc")
	if err != nil {
		t.Fatal("Xtigervnc is needed (Debian package tigervnc-standalone-server)")
	}
	sock := filepath.Join(t.TempDir(), "vnc.sock")
	// Numbers far from the ones the display service hands out; X's own lock
	// file settles a clash with anything else.
	first := 700 + os.Getpid()%200
	for num := first; num < first+20; num++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, ":"+strconv.Itoa(num), "-displayfd", "3",
			"-nolisten", "tcp", "-nolisten", "local", "-noreset", "-wr",
			"-geometry", strconv.Itoa(width)+"x"+strconv.Itoa(height), "-depth", "24",
			"-rfbport", "-1", "-rfbunixpath", sock, "-rfbunixmode", "0600",
			"-SecurityTypes", "None", "-AlwaysShared", "-desktop", name, "-extension", "GLX")
		cmd.ExtraFiles = []*os.File{w}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		line := make(chan string, 1)
		go func() {
			s, _ := bufio.NewReader(r).ReadString('\n')
			line <- strings.TrimSpace(s)
		}()
		var got string
		select {
		case got = <-line:
		case <-time.After(30 * time.Second):
		}
		r.Close()
		if got == strconv.Itoa(num) {
			t.Cleanup(func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				_ = cmd.Wait()
			})
			return sock
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	t.Fatal("no free X display number for Xtigervnc")
	return ""
}

// Through the gateway to TigerVNC's own RFB server, as a node serves it.
func TestVNCWithTigerVNC(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	h.display.upstream["s-real"] = startXtigervnc(t, 320, 200, "real desktop")

	t.Run("RFB handshake", func(t *testing.T) {
		c, _, err := dialVNC(t, h, "/v1/sessions/s-real/vnc", nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w, hgt, name := rfbHandshake(t, websocket.NetConn(ctx, c, websocket.MessageBinary))
		if w != 320 || hgt != 200 || name != "real desktop" {
			t.Fatalf("ServerInit %dx%d %q", w, hgt, name)
		}
		must(t, c.Close(websocket.StatusNormalClosure, ""))
		waitEnded(t, h.display, "s-real")
	})

	t.Run("noVNC in Chromium shows the desktop", func(t *testing.T) {
		requireNoVNC(t, h)
		runConsoleSpec(t, h.srv.URL, "--scenario", "viewer", "--session", "s-real",
			"--expect-color", "255,255,255", "--expect-size", "320x200", "--expect-title", "real desktop · deskgrid")
	})
}
