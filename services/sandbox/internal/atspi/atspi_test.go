package atspi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is the user the test's bus and browser run as: not the test's.
const nobody = 65534

// TestTreeOfChromiumOnItsOwnBus runs an accessibility bus and Chromium as
// another user, on a private X server, finds the bus among the processes,
// connects as that user and reads the tree: the page's button is there
// with its role, name, action and bounds.
func TestTreeOfChromiumOnItsOwnBus(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("connecting as another user needs root, as the node's service runs")
	}
	for _, p := range []string{"Xvfb", "dbus-daemon", "chromium"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s is not installed: run scripts/setup", p)
		}
	}
	home := nobodyHome(t, "atspi-test-")
	as := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, Setpgid: true}

	// X server.
	r, w, _ := os.Pipe()
	x := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "1024x768x24", "-nolisten", "tcp")
	x.ExtraFiles = []*os.File{w}
	x.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = x.Process.Kill(); _ = x.Wait() })
	n, err := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if err != nil {
		t.Fatalf("Xvfb: %v", err)
	}
	display := ":" + strings.TrimSpace(n)

	// Accessibility bus, as at-spi-bus-launcher starts it.
	r, w, _ = os.Pipe()
	busDir := filepath.Join(home, "at-spi")
	bus := exec.Command("dbus-daemon", "--config-file=/usr/share/defaults/at-spi2/accessibility.conf", "--nofork", "--print-address=3", "--address=unix:path="+filepath.Join(busDir, "bus"))
	bus.ExtraFiles = []*os.File{w}
	bus.SysProcAttr = as
	if err := os.Mkdir(busDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(busDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "DISPLAY=" + display, "PATH=/usr/bin:/bin", "AT_SPI_BUS_ADDRESS=unix:path=" + filepath.Join(busDir, "bus"),
		"NO_AT_BRIDGE=0", "GNOME_ACCESSIBILITY=1", "ACCESSIBILITY_ENABLED=1"}
	bus.Env = env
	var busErr strings.Builder
	bus.Stderr = &busErr
	if err := bus.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = syscall.Kill(-bus.Process.Pid, syscall.SIGKILL); _ = bus.Wait() })
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		_ = bus.Wait()
		t.Fatalf("the bus gave no address: %v: %s", err, busErr.String())
	}
	r.Close()

	page := "data:text/html," + url.PathEscape(`<title>Form</title><button>Press me</button><input aria-label="Email" value="a@b.c">`)
	cr := exec.Command("chromium", "--no-sandbox", "--user-data-dir="+filepath.Join(home, "profile"), "--no-first-run", "--disable-gpu",
		"--force-renderer-accessibility", "--window-position=0,0", "--window-size=800,600", page)
	cr.Env = env
	cr.SysProcAttr = as
	if err := cr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cr.Process.Pid, syscall.SIGKILL); _ = cr.Wait() })

	b, err := Find([]int{x.Process.Pid, cr.Process.Pid, bus.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if b.PID != bus.Process.Pid || b.UID != nobody || b.InnerUID != nobody || b.Path != filepath.Join(busDir, "bus") {
		t.Fatalf("found %+v", b)
	}
	conn, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if os.Geteuid() != 0 {
		t.Fatal("the service lost its identity")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var button *Node
	var last *Tree
	for button == nil {
		tree, err := Walk(ctx, conn, Limits{MaxDepth: 30, MaxNodes: 5000, OnlyVisible: true})
		if err != nil {
			t.Fatalf("walk: %v (last tree %s)", err, dump(last))
		}
		last = tree
		button = findNode(tree, "push button", "Press me")
		if button == nil {
			if ctx.Err() != nil {
				t.Fatalf("no button in the tree:\n%s", dump(tree))
			}
			time.Sleep(500 * time.Millisecond) // polled: Chromium starts and loads the page
		}
	}
	if button.Bounds == nil || button.Bounds.Width <= 0 || button.Bounds.X < 0 || button.Bounds.X+button.Bounds.Width > 1024 || button.Bounds.Y+button.Bounds.Height > 768 {
		t.Errorf("button bounds %+v", button.Bounds)
	}
	if !contains(button.Actions, "press") && !contains(button.Actions, "click") {
		t.Errorf("the button has no actions: %+v", button)
	}
	if e := findNode(last, "entry", "Email"); e == nil || e.Text != "a@b.c" || !contains(e.States, "editable") {
		t.Errorf("entry: %+v", e)
	}
	start := time.Now()
	full, err := Walk(ctx, conn, Limits{MaxDepth: 64, MaxNodes: 20000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("whole tree: %d nodes in %v; visible:\n%s", full.Nodes, time.Since(start), dump(last))

	// Bounds.
	tree, err := Walk(ctx, conn, Limits{MaxDepth: 1, MaxNodes: 5000})
	if err != nil || !tree.Truncated || len(tree.Applications) == 0 {
		t.Fatalf("depth 1: %v %+v", err, tree)
	}
	tree, err = Walk(ctx, conn, Limits{MaxDepth: 30, MaxNodes: 2})
	if err != nil || !tree.Truncated || tree.Nodes != 2 {
		t.Fatalf("2 nodes: %v %+v", err, tree)
	}
	tree, err = Walk(ctx, conn, Limits{MaxDepth: 30, MaxNodes: 100, Application: "no such program"})
	if err != nil || len(tree.Applications) != 0 || tree.Nodes != 0 {
		t.Fatalf("another application's name: %v %+v", err, tree)
	}

	// Chromium's process: its application, and none of another's.
	tree, err = Walk(ctx, conn, Limits{MaxDepth: 30, MaxNodes: 5000, PIDs: map[uint32]bool{uint32(cr.Process.Pid): true}})
	if err != nil || len(tree.Applications) != 1 || findNode(tree, "push button", "Press me") == nil {
		t.Errorf("Chromium's process's tree: %v\n%s", err, dump(tree))
	}
	tree, err = Walk(ctx, conn, Limits{MaxDepth: 30, MaxNodes: 5000, PIDs: map[uint32]bool{uint32(x.Process.Pid): true}})
	if err != nil || len(tree.Applications) != 0 {
		t.Errorf("the X server's process's tree: %v\n%s", err, dump(tree))
	}
	// Its X window (800x600 at 0,0, titled by the page): its frame.
	id, err := FindWindow(ctx, conn, Window{ID: 1, PID: uint32(cr.Process.Pid), Title: "Form - Chromium", Width: 800, Height: 600})
	if err != nil {
		t.Fatalf("Chromium's window: %v", err)
	}
	if tree, err = Walk(ctx, conn, Limits{MaxDepth: 30, MaxNodes: 5000, Root: id}); err != nil || tree.Applications[0].Role != "frame" || findNode(tree, "push button", "Press me") == nil {
		t.Errorf("the window's subtree (%s): %v\n%s", id, err, dump(tree))
	}
	if _, err := FindWindow(ctx, conn, Window{ID: 2, PID: uint32(x.Process.Pid), Title: "Form - Chromium"}); !errors.Is(err, ErrNoWindow) {
		t.Errorf("a window of a process without accessibles: %v", err)
	}
	// Exported as OSWorld's XML, with what the export reads beyond the tree.
	tree, err = Walk(ctx, conn, Limits{MaxDepth: 30, MaxNodes: 5000, OnlyVisible: true, Export: true, Root: id})
	if err != nil {
		t.Fatal(err)
	}
	export := OSWorldXML(tree)
	for _, want := range []string{`<push-button name="Press me" `, `st:showing="true"`, `cp:screencoord="(`, `act:`, `attr:`, `a@b.c`} {
		if !strings.Contains(export, want) {
			t.Errorf("the export lacks %s: %.3000s", want, export)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func findNode(t *Tree, role, name string) *Node {
	if t == nil {
		return nil
	}
	var walk func(n *Node) *Node
	walk = func(n *Node) *Node {
		if n.Role == role && strings.Contains(n.Name, name) {
			return n
		}
		for _, c := range n.Children {
			if f := walk(c); f != nil {
				return f
			}
		}
		return nil
	}
	for _, a := range t.Applications {
		if f := walk(a); f != nil {
			return f
		}
	}
	return nil
}

func dump(t *Tree) string {
	if t == nil {
		return "(none)"
	}
	var b strings.Builder
	var line func(n *Node, d int)
	line = func(n *Node, d int) {
		fmt.Fprintf(&b, "%s%s %q %v %v %v\n", strings.Repeat("  ", d), n.Role, n.Name, n.States, n.Bounds, n.Actions)
		for _, c := range n.Children {
			line(c, d+1)
		}
	}
	for _, a := range t.Applications {
		line(a, 0)
	}
	return b.String()
}

// A bus that is not a session's own is never dialled: an abstract socket
// in the node's network namespace, a path that is no socket.
func TestDialRefusesWhatIsNotTheSessions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the node's service runs")
	}
	_, err := (&Bus{PID: os.Getpid(), Path: "@/tmp/dbus-node", UID: nobody, GID: nobody, InnerUID: nobody}).Dial()
	if err == nil || !strings.Contains(err.Error(), "node's own network namespace") {
		t.Errorf("abstract socket of the node: %v", err)
	}
	f := filepath.Join(t.TempDir(), "bus")
	if err := os.WriteFile(f, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = (&Bus{PID: os.Getpid(), Path: f, UID: nobody, GID: nobody, InnerUID: nobody}).Dial()
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a file for a socket: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the service lost its identity")
	}
	if _, err := Find([]int{os.Getpid(), 1}); err != ErrNoBus {
		t.Errorf("Find among processes running no bus: %v", err)
	}
}

// descendants are pid and every process below it.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var p, pp int
		if _, err := fmt.Sscan(e.Name(), &p); err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(raw[strings.LastIndexByte(string(raw), ')')+1:])
		if _, err := fmt.Sscan(rest, new(string), &pp); err == nil {
			parent[p] = pp
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		for p, pp := range parent {
			if pp == out[i] {
				out = append(out, p)
			}
		}
	}
	return out
}

// A launcher that starts the accessibility bus only when asked: the
// session bus is found, asked for org.a11y.Bus (which it activates), and
// the accessibility bus then runs and answers.
func TestWakeTheBusThroughTheSessionBus(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("connecting as another user needs root, as the node's service runs")
	}
	home := nobodyHome(t, "atspi-wake-")
	r, w, _ := os.Pipe()
	sess := exec.Command("dbus-daemon", "--session", "--nofork", "--print-address=3", "--address=unix:path="+filepath.Join(home, "bus"))
	sess.ExtraFiles = []*os.File{w}
	sess.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "XDG_RUNTIME_DIR=" + home}
	sess.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}, Setpgid: true}
	if err := sess.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		// What the session bus started runs as the user, with
		// XDG_RUNTIME_DIR this test's.
		for _, p := range processesOf(nobody) {
			if env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p)); p == sess.Process.Pid || strings.Contains(string(env), "XDG_RUNTIME_DIR="+home) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		_ = sess.Wait()
	})
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatalf("the session bus gave no address: %v", err)
	}
	r.Close()

	if _, err := Find(descendants(sess.Process.Pid)); err != ErrNoBus {
		t.Fatalf("an accessibility bus before one was asked for: %v", err)
	}
	sb, err := FindSessionBus(descendants(sess.Process.Pid))
	if err != nil || sb.PID != sess.Process.Pid {
		t.Fatalf("session bus: %+v %v", sb, err)
	}
	conn, err := sb.Dial()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := WakeA11yBus(ctx, conn); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	var b *Bus
	for b == nil {
		// Activated programs leave the daemon's process tree; a session's
		// cgroup holds them all, here they are the user's processes.
		b, err = Find(processesOf(nobody))
		if err != nil && err != ErrNoBus {
			t.Fatal(err)
		}
		if b == nil {
			if ctx.Err() != nil {
				var procs []string
				for _, p := range processesOf(nobody) {
					procs = append(procs, strings.Join(cmdline(p), " "))
				}
				t.Fatalf("the accessibility bus never appeared; processes: %q", procs)
			}
			time.Sleep(100 * time.Millisecond) // polled: the launcher starts it
		}
	}
	a11y, err := b.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer a11y.Close()
	if _, err := Walk(ctx, a11y, Limits{MaxDepth: 2, MaxNodes: 10}); err != nil {
		t.Fatalf("walk an empty desktop: %v", err)
	}
}

// processesOf are the processes running as uid.
func processesOf(uid uint32) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var p int
		if _, err := fmt.Sscan(e.Name(), &p); err != nil {
			continue
		}
		if u, _, err := hostIDs(p); err == nil && u == uid {
			out = append(out, p)
		}
	}
	return out
}

// nobodyHome is a home folder of the user nobody, in a folder of its own
// that nobody can reach (not t.TempDir: its parent is the test's alone,
// closed to the user).
func nobodyHome(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return home
}
