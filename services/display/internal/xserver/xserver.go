// Package xserver starts and stops private X servers (Xvfb, or Xtigervnc,
// which is the same kind of virtual server with VNC built in) and cleans up what a
// server leaves behind: its socket in /tmp/.X11-unix and its lock file.
//
// Display numbers are claimed with the X lock-file protocol before the server
// starts (Xvfb's own -displayfd search unlinks a busy socket, so concurrent
// starts can all end up on the same number); -displayfd is still used to
// learn, without polling, when the server accepts connections.
package xserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// SocketDir holds the X servers' unix sockets; X clients look nowhere else.
	SocketDir = "/tmp/.X11-unix"
	// lockDir holds the /tmp/.X<n>-lock files of the X lock protocol.
	lockDir = "/tmp"
)

// SocketPath is the unix socket of display num.
func SocketPath(num int) string { return filepath.Join(SocketDir, "X"+strconv.Itoa(num)) }

// LockPath is the lock file of display num.
func LockPath(num int) string { return filepath.Join(lockDir, ".X"+strconv.Itoa(num)+"-lock") }

// ErrNoFreeDisplay means every display number in the configured range is taken.
var ErrNoFreeDisplay = errors.New("no free X display number")

// Options describe a server to start.
type Options struct {
	// Binary is the Xvfb executable.
	Binary string
	Width  int
	Height int
	Depth  int
	// DPI is passed with -dpi when positive.
	DPI int
	// GLX keeps the server's OpenGL extension. Off, the server does not load
	// the software GL stack (about 11 MB of private memory per display);
	// browsers and most desktop programs render without it.
	GLX bool
	// AuthFile is the Xauthority file the server trusts.
	AuthFile string
	// LogFile receives the server's stdout and stderr.
	LogFile string
	// FirstDisplay and Displays bound the display numbers tried.
	FirstDisplay int
	Displays     int
	// StopTimeout bounds the wait after SIGTERM before SIGKILL.
	StopTimeout time.Duration
	// VNCSocket is the unix socket a VNC server (Xtigervnc) listens on for
	// RFB; it is created with mode 0600. Ignored by Xvfb.
	VNCSocket string
	// DesktopName is what VNC viewers are told the desktop is called.
	DesktopName string
}

// IsVNC reports whether binary is an X server with a built-in VNC server
// (TigerVNC's Xtigervnc or Xvnc), judged by its name.
func IsVNC(binary string) bool {
	switch filepath.Base(binary) {
	case "Xtigervnc", "Xvnc":
		return true
	}
	return false
}

var errExitedEarly = errors.New("X server exited before it was ready")

// Server is a running X server started by this process.
type Server struct {
	Display int
	PID     int

	cmd         *exec.Cmd
	exited      chan struct{}
	stopTimeout time.Duration
	stopOnce    sync.Once
	stopErr     error
}

// allocMu serialises lock-file claims within the process, so a stale lock
// removed by one claimer is never a fresh lock of another.
var allocMu sync.Mutex

// Start claims a free display number, starts Xvfb on it and returns once the
// server accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Displays <= 0 {
		opts.Displays = 1
	}
	if err := os.MkdirAll(SocketDir, 0o1777); err != nil {
		return nil, fmt.Errorf("create %s: %w", SocketDir, err)
	}
	num, err := claim(opts.FirstDisplay, opts.Displays)
	if err != nil {
		return nil, err
	}
	srv, err := launch(ctx, num, opts)
	if err != nil {
		_ = os.Remove(LockPath(num))
		return nil, err
	}
	// The lock now names the server itself, so another X server (or a later
	// deskgrid) sees the number as taken for as long as the server lives.
	if err := writeLock(num, srv.PID, true); err != nil {
		_ = srv.Stop(context.Background())
		return nil, err
	}
	return srv, nil
}

func launch(ctx context.Context, num int, opts Options) (*Server, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start X server: %w", err)
	}
	defer r.Close()
	args := []string{
		":" + strconv.Itoa(num),
		"-displayfd", "3",
		// The number is claimed by our lock file; Xvfb must not fight over it.
		"-nolock",
		// Only the filesystem socket: no TCP and no abstract socket, so access
		// needs both the bind-mounted socket and the cookie.
		"-nolisten", "tcp", "-nolisten", "local",
		"-auth", opts.AuthFile,
		// Keep state when the last client disconnects.
		"-noreset",
		// A black root instead of the stipple: what a desktop shows before
		// anything draws, and it compresses to almost nothing.
		"-br",
		// No screen saver: a session left alone for ten minutes (an agent
		// waiting on a model or a long command) keeps showing its screen;
		// a program that asks for the pattern saver instead of blanking
		// would otherwise cover it in black.
		"-s", "0",
	}
	if IsVNC(opts.Binary) {
		args = append(args,
			"-geometry", fmt.Sprintf("%dx%d", opts.Width, opts.Height),
			"-depth", strconv.Itoa(opts.Depth),
			// RFB only on a unix socket only its owner may open; no TCP port.
			"-rfbport", "-1",
			"-rfbunixmode", "0600",
			// Clients reach the socket only through the display service,
			// which authorises each viewer and enforces view-only itself.
			"-SecurityTypes", "None",
			"-AlwaysShared",
			// The display's size is changed through the API, which knows it.
			"-AcceptSetDesktopSize=0",
		)
		if opts.VNCSocket != "" {
			// Relative to the server's working directory: a unix socket path
			// is limited to 107 bytes, which a deep runtime directory and a
			// long session id could pass.
			args = append(args, "-rfbunixpath", filepath.Base(opts.VNCSocket))
		}
		if opts.DesktopName != "" {
			args = append(args, "-desktop", opts.DesktopName)
		}
	} else {
		args = append(args, "-screen", "0", fmt.Sprintf("%dx%dx%d", opts.Width, opts.Height, opts.Depth))
	}
	if opts.DPI > 0 {
		args = append(args, "-dpi", strconv.Itoa(opts.DPI))
	}
	if !opts.GLX {
		args = append(args, "-extension", "GLX")
	}
	cmd := exec.Command(opts.Binary, args...)
	if IsVNC(opts.Binary) && opts.VNCSocket != "" {
		cmd.Dir = filepath.Dir(opts.VNCSocket)
	}
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own group, so a terminal's signals do not reach it and a kill
		// of the group takes anything it spawned.
		Setpgid: true,
		// If this process dies the kernel kills the server: nothing keeps
		// running that no one can reach.
		Pdeathsig: syscall.SIGKILL,
	}
	var logf *os.File
	if opts.LogFile != "" {
		logf, err = os.OpenFile(opts.LogFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("start X server: %w", err)
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("start X server %s: %w", opts.Binary, err)
	}
	w.Close()
	srv := &Server{
		Display:     num,
		PID:         cmd.Process.Pid,
		cmd:         cmd,
		exited:      make(chan struct{}),
		stopTimeout: opts.StopTimeout,
	}
	go func() {
		_ = cmd.Wait()
		close(srv.exited)
	}()

	// -displayfd: the server writes its number and a newline once it accepts
	// connections, and the pipe reaches EOF if it dies first.
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		if err != nil {
			ready <- errExitedEarly
			return
		}
		if got, _ := strconv.Atoi(strings.TrimSpace(line)); got != num {
			ready <- fmt.Errorf("X server reported display %q, want %d", strings.TrimSpace(line), num)
			return
		}
		ready <- nil
	}()
	select {
	case err := <-ready:
		if err != nil {
			// Stop waits for the exit, so the log is complete.
			_ = srv.Stop(context.Background())
			if errors.Is(err, errExitedEarly) {
				err = fmt.Errorf("%w%s", err, logTail(opts.LogFile))
			}
			return nil, err
		}
		return srv, nil
	case <-ctx.Done():
		// Killing the server closes the pipe, which ends the reader.
		_ = srv.Stop(context.Background())
		return nil, fmt.Errorf("X server not ready: %w", ctx.Err())
	}
}

// Exited is closed when the server process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Stop terminates the server (SIGTERM, then SIGKILL after the stop timeout or
// when ctx ends), waits for it and removes its socket and lock file. Calling
// it again returns the first result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.stopErr = stopProcess(ctx, s.cmd.Process.Pid, s.exited, s.stopTimeout)
		RemoveLeftovers(s.Display)
	})
	return s.stopErr
}

func stopProcess(ctx context.Context, pid int, exited <-chan struct{}, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	// Signal the group: the server and anything it started.
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	// SIGKILL cannot be ignored; the wait is short but still bounded.
	t2 := time.NewTimer(5 * time.Second)
	defer t2.Stop()
	select {
	case <-exited:
		return nil
	case <-t2.C:
		return fmt.Errorf("X server %d did not exit after SIGKILL", pid)
	}
}

// RemoveLeftovers removes display num's socket and lock file if a server left
// them behind.
func RemoveLeftovers(num int) {
	_ = os.Remove(SocketPath(num))
	_ = os.Remove(LockPath(num))
}

// RemoveLeftoversOf removes display num's socket and lock file as left by
// the server pid, unless the number has since passed to another live server.
func RemoveLeftoversOf(num, pid int) {
	if owner, ok := readLock(num); ok && owner != pid && processAlive(owner) {
		return
	}
	if IsServerFor(pid, num) {
		return
	}
	RemoveLeftovers(num)
}

// claim takes the first free display number in [first, first+n) by creating
// its lock file exclusively, holding our pid until the server's replaces it.
func claim(first, n int) (int, error) {
	allocMu.Lock()
	defer allocMu.Unlock()
	// Several deskgrid processes may share a machine's /tmp (nodes side by
	// side, tests): the machine-wide lock makes each check-and-take atomic
	// among them, so two never take over the same stale lock.
	unlock, err := machineLock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	for num := first; num < first+n; num++ {
		if socketAnswers(num) {
			continue
		}
		err := writeLock(num, os.Getpid(), false)
		if err == nil {
			return num, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return 0, err
		}
		pid, ok := readLock(num)
		if ok && processAlive(pid) {
			continue
		}
		if !ok && lockIsFresh(num) {
			// Another X server is between creating its lock and writing
			// its pid into it.
			continue
		}
		// Stale lock of a server that died: take it over, as X servers do.
		_ = os.Remove(LockPath(num))
		if err := writeLock(num, os.Getpid(), false); err == nil {
			return num, nil
		}
	}
	return 0, fmt.Errorf("%w in :%d-:%d", ErrNoFreeDisplay, first, first+n-1)
}

// socketAnswers reports whether some server already listens on num's socket
// (one that does not follow the lock protocol).
func socketAnswers(num int) bool {
	c, err := net.DialTimeout("unix", SocketPath(num), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// writeLock writes the lock file in the X format (pid in 10 columns). With
// replace it atomically overwrites an existing lock, else it fails with
// os.ErrExist when the lock is taken.
func writeLock(num, pid int, replace bool) error {
	content := []byte(fmt.Sprintf("%10d\n", pid))
	// The lock appears whole or not at all: written aside, then linked (to
	// create, failing if it exists) or renamed (to replace) into place.
	tmp := fmt.Sprintf("%s.%d.tmp", LockPath(num), os.Getpid())
	if err := os.WriteFile(tmp, content, 0o444); err != nil {
		return fmt.Errorf("write X lock: %w", err)
	}
	defer os.Remove(tmp)
	if !replace {
		if err := os.Link(tmp, LockPath(num)); err != nil {
			if errors.Is(err, os.ErrExist) {
				return err
			}
			return fmt.Errorf("write X lock: %w", err)
		}
		return nil
	}
	if err := os.Rename(tmp, LockPath(num)); err != nil {
		return fmt.Errorf("write X lock: %w", err)
	}
	return nil
}

// lockIsFresh reports whether num's lock file was made a moment ago.
func lockIsFresh(num int) bool {
	fi, err := os.Stat(LockPath(num))
	return err == nil && time.Since(fi.ModTime()) < 2*time.Second
}

// machineLock takes an exclusive lock shared by every deskgrid process on
// this machine, and returns its release.
func machineLock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(lockDir, ".deskgrid-display-claim"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("display claim lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("display claim lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

func readLock(num int) (int, bool) {
	b, err := os.ReadFile(LockPath(num))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z'
}

// IsServerFor reports whether pid is a live X server for display num, judged
// by its command line: a recycled pid belongs to some other program.
func IsServerFor(pid, num int) bool {
	if !processAlive(pid) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) < 2 {
		return false
	}
	name := filepath.Base(args[0])
	if name != "Xvfb" && name != "Xtigervnc" && name != "Xvnc" && name != "Xorg" && name != "X" {
		return false
	}
	want := ":" + strconv.Itoa(num)
	for _, a := range args[1:] {
		if a == want {
			return true
		}
	}
	return false
}

// Kill stops an X server this process did not start (one left by an earlier
// process): SIGTERM, then SIGKILL after timeout, waiting until it is gone.
// It does nothing unless pid is still an X server for display num.
func Kill(ctx context.Context, pid, num int, timeout time.Duration) error {
	if !IsServerFor(pid, num) {
		return nil
	}
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	gone := func() bool { return !processAlive(pid) }
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitFor(ctx, timeout, gone) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitFor(context.Background(), 5*time.Second, gone) {
		return nil
	}
	return fmt.Errorf("X server %d for :%d did not exit after SIGKILL", pid, num)
}

// waitFor polls cond until it holds or the deadline passes. A process that is
// not our child gives no event to wait on, so polling is the only way.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return cond()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func logTail(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return ": " + strings.Join(strings.Fields(string(b)), " ")
}
