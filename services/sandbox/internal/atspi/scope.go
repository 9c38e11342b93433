package atspi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
)

// ErrNoWindow is a window the display shows that no accessible of the
// bus's applications stands for: its program offers no accessibility, or
// has not registered it yet.
var ErrNoWindow = errors.New("no accessible stands for the window")

// ProcessOf is the process id of the application that owns a bus name,
// as the bus daemon sees it: in the session's own process namespace.
func ProcessOf(ctx context.Context, conn *dbus.Conn, bus string) (uint32, error) {
	var pid uint32
	err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, bus).Store(&pid)
	return pid, err
}

// Processes are a session's processes as its accessibility bus sees them:
// by the process ids of the bus daemon's own namespace, each with its
// parent.
type Processes struct {
	parent map[uint32]uint32
}

// ReadProcesses reads the processes hostPids (a session's, as the node
// sees them) from /proc, keeping those in the process namespace of the
// bus daemon busPID: the ids the session's programs see and the bus
// reports.
func ReadProcesses(hostPids []int, busPID int) (*Processes, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", busPID))
	if err != nil {
		return nil, fmt.Errorf("the bus daemon's process namespace: %w", err)
	}
	type proc struct{ inner, hostParent int }
	byHost := map[int]proc{}
	for _, pid := range hostPids {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || l != ns {
			continue
		}
		inner, parent, ok := innerPid(pid)
		if ok {
			byHost[pid] = proc{inner, parent}
		}
	}
	p := &Processes{parent: map[uint32]uint32{}}
	for _, pr := range byHost {
		var parent uint32
		if up, ok := byHost[pr.hostParent]; ok {
			parent = uint32(up.inner)
		}
		p.parent[uint32(pr.inner)] = parent
	}
	return p, nil
}

// innerPid is a process's id in its own namespace (the last of NSpid)
// and its parent's id on the node.
func innerPid(pid int) (inner, parent int, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	var gotInner, gotParent bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		switch k {
		case "PPid":
			parent, err = strconv.Atoi(fs[0])
			gotParent = err == nil
		case "NSpid":
			inner, err = strconv.Atoi(fs[len(fs)-1])
			gotInner = err == nil
		}
	}
	return inner, parent, gotInner && gotParent
}

// Family is pid and every process it started, and they started, that
// still runs; ok is false when no process of the session has pid.
func (p *Processes) Family(pid uint32) (map[uint32]bool, bool) {
	if _, ok := p.parent[pid]; !ok || pid == 0 {
		return nil, false
	}
	out := map[uint32]bool{pid: true}
	for changed := true; changed; {
		changed = false
		for c, parent := range p.parent {
			if !out[c] && out[parent] {
				out[c], changed = true, true
			}
		}
	}
	return out, true
}

// Window is a top-level window as the display lists it, to find among
// the accessibles.
type Window struct {
	// ID is the X window id, for messages.
	ID uint32
	// PID is the process its program reports (_NET_WM_PID, the session's
	// own id); 0 when it reports none.
	PID   uint32
	Title string
	// X, Y, Width and Height are its client area on the screen.
	X, Y, Width, Height int32
	Focused             bool
}

// FindWindow returns the id of the top-level accessible (a frame, dialog
// or window: a child of an application) that stands for w: among the
// applications of w's process, the one whose name is w's title and whose
// extents are its client area, or its frame around it. ErrNoWindow when
// none does.
func FindWindow(ctx context.Context, conn *dbus.Conn, w Window) (string, error) {
	var apps []ref
	if err := conn.Object(registryName, rootPath).CallWithContext(ctx, ifAccessible+".GetChildren", 0).Store(&apps); err != nil {
		return "", fmt.Errorf("list the applications on the accessibility bus: %w", err)
	}
	wk := &walker{conn: conn, lim: Limits{MaxDepth: 1, MaxNodes: a11yScanNodes}, tree: &Tree{}}
	var best *Node
	bestScore, candidates := -1, 0
	for _, a := range apps {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if w.PID != 0 {
			if pid, err := ProcessOf(ctx, conn, a.Bus); err != nil || pid != w.PID {
				continue
			}
		}
		var kids []ref
		if err := conn.Object(a.Bus, a.Path).CallWithContext(ctx, ifAccessible+".GetChildren", 0).Store(&kids); err != nil {
			continue
		}
		for _, k := range kids {
			if k.Path == nullPath {
				continue
			}
			n, err := wk.node(ctx, k, 1)
			if err != nil || slices.Contains(n.States, "defunct") {
				continue
			}
			candidates++
			if s := windowScore(n, w); s > bestScore {
				best, bestScore = n, s
			}
		}
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	// A process that has one top-level accessible: that one, whatever its
	// name and place say (a program may title its X window otherwise).
	if best != nil && (bestScore >= 3 || w.PID != 0 && candidates == 1) {
		return best.ID, nil
	}
	return "", fmt.Errorf("window %d (%q, process %d): %w", w.ID, w.Title, w.PID, ErrNoWindow)
}

// a11yScanNodes bounds the nodes FindWindow reads: top-level ones only.
const a11yScanNodes = 1 << 20

// windowScore says how well a top-level accessible matches w: its name
// against the title (4 the same, 2 one holding the other), its extents
// against the client area (4 the same, 3 a frame around it, 1 mostly
// overlapping), and 1 for being active while w has the focus.
func windowScore(n *Node, w Window) int {
	s := 0
	switch {
	case n.Name == "" || w.Title == "":
	case n.Name == w.Title:
		s += 4
	case strings.Contains(n.Name, w.Title) || strings.Contains(w.Title, n.Name):
		s += 2
	}
	if b := n.Bounds; b != nil && b.Width > 0 && b.Height > 0 && w.Width > 0 && w.Height > 0 {
		// The window manager's frame: a title bar and borders, not more.
		const frame = 100
		switch {
		case *b == Rect{X: w.X, Y: w.Y, Width: w.Width, Height: w.Height}:
			s += 4
		case b.X <= w.X && b.Y <= w.Y && b.X+b.Width >= w.X+w.Width && b.Y+b.Height >= w.Y+w.Height &&
			b.Width-w.Width <= frame && b.Height-w.Height <= frame:
			s += 3
		default:
			ix := min(b.X+b.Width, w.X+w.Width) - max(b.X, w.X)
			iy := min(b.Y+b.Height, w.Y+w.Height) - max(b.Y, w.Y)
			if ix > 0 && iy > 0 && 2*int64(ix)*int64(iy) >= min(int64(b.Width)*int64(b.Height), int64(w.Width)*int64(w.Height)) {
				s++
			}
		}
	}
	if w.Focused && slices.Contains(n.States, "active") {
		s++
	}
	return s
}
