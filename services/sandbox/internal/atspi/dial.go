// Package atspi reads the accessibility tree (AT-SPI2) of a session's
// desktop from the accessibility bus that runs inside the session's
// container, with a Go D-Bus client: no helper program runs, on the host or
// in the session.
//
// The bus is found among the container's processes (the dbus-daemon that
// at-spi-bus-launcher started with accessibility.conf), and reached through
// that process's own view: its listening socket is a path under
// /proc/PID/root, or an abstract name in its network namespace. The bus
// admits only its own user, so the socket is connected from a thread that
// takes, for that one call, the host uid and gid the daemon runs as: to the
// daemon the caller is the session's user. Nothing else on the node (no
// other session's bus, no bus of the node's own) is ever reached.
package atspi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// ErrNoBus is returned when no process of the session runs an
// accessibility bus.
var ErrNoBus = errors.New("no accessibility bus runs in the session")

// Bus is a session's accessibility bus as found among its processes.
type Bus struct {
	// PID is the bus daemon's process id, as the host sees it.
	PID int
	// Path is its listening socket, as the daemon sees it (a path beneath
	// its root, or "@name" for an abstract socket).
	Path string
	// UID and GID are the host ids the daemon runs as; InnerUID is the uid
	// its own user namespace gives it.
	UID, GID, InnerUID uint32
}

// Find looks among pids (host process ids of one session) for the
// accessibility bus.
func Find(pids []int) (*Bus, error) { return find(pids, isA11yDaemon) }

// FindSessionBus looks among pids for the session's own D-Bus (the one
// dbus-daemon --session serves), where org.a11y.Bus says, and starts on
// demand, the accessibility bus.
func FindSessionBus(pids []int) (*Bus, error) {
	return find(pids, func(pid int) bool {
		args := cmdline(pid)
		return len(args) > 0 && filepath.Base(args[0]) == "dbus-daemon" && slices.Contains(args[1:], "--session")
	})
}

func find(pids []int, match func(pid int) bool) (*Bus, error) {
	for _, pid := range pids {
		if !match(pid) {
			continue
		}
		b := &Bus{PID: pid}
		var err error
		if b.UID, b.GID, err = hostIDs(pid); err != nil {
			continue
		}
		if b.UID == 0 || b.GID == 0 {
			// A session's processes run in its own id range, never as the
			// node's root.
			continue
		}
		if b.InnerUID, err = innerUID(pid, b.UID); err != nil {
			continue
		}
		if b.Path, err = listening(pid); err != nil {
			return nil, fmt.Errorf("bus daemon (pid %d): %w", pid, err)
		}
		return b, nil
	}
	return nil, ErrNoBus
}

func cmdline(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(raw) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
}

func isA11yDaemon(pid int) bool {
	args := cmdline(pid)
	if len(args) == 0 || filepath.Base(args[0]) != "dbus-daemon" {
		return false
	}
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "--config-file=") && strings.HasSuffix(a, "/accessibility.conf") {
			return true
		}
	}
	return false
}

// hostIDs are a process's effective uid and gid.
func hostIDs(pid int) (uid, gid uint32, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var gotU, gotG bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) < 2 {
			continue
		}
		n, perr := strconv.ParseUint(fs[1], 10, 32)
		if perr != nil {
			continue
		}
		switch k {
		case "Uid":
			uid, gotU = uint32(n), true
		case "Gid":
			gid, gotG = uint32(n), true
		}
	}
	if !gotU || !gotG {
		return 0, 0, fmt.Errorf("process %d: no ids in its status", pid)
	}
	return uid, gid, nil
}

// innerUID is what host uid is inside a process's user namespace.
func innerUID(pid int, host uint32) (uint32, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		fs := strings.Fields(line)
		if len(fs) != 3 {
			continue
		}
		in, e1 := strconv.ParseUint(fs[0], 10, 32)
		out, e2 := strconv.ParseUint(fs[1], 10, 32)
		n, e3 := strconv.ParseUint(fs[2], 10, 32)
		if e1 != nil || e2 != nil || e3 != nil {
			continue
		}
		if uint64(host) >= out && uint64(host) < out+n {
			return uint32(in + uint64(host) - out), nil
		}
	}
	return 0, fmt.Errorf("process %d: uid %d is not mapped in its namespace", pid, host)
}

// listening is the path (or "@abstract" name) of the first unix socket a
// process listens on.
func listening(pid int) (string, error) {
	inodes := map[string]bool{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	if err != nil {
		return "", err
	}
	// Num RefCount Protocol Flags Type St Inode Path
	for line := range bytes.SplitSeq(raw, []byte("\n")) {
		fs := strings.Fields(string(line))
		if len(fs) < 8 || !inodes[fs[6]] {
			continue
		}
		flags, err := strconv.ParseUint(fs[3], 16, 32)
		if err != nil || flags&0x10000 == 0 { // __SO_ACCEPTCON: listening
			continue
		}
		return fs[7], nil
	}
	return "", errors.New("it listens on no unix socket")
}

// Dial connects to the bus as its own user and says hello.
func (b *Bus) Dial() (*dbus.Conn, error) {
	c, err := b.connect()
	if err != nil {
		return nil, fmt.Errorf("connect to the accessibility bus: %w", err)
	}
	conn, err := dbus.NewConn(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.FormatUint(uint64(b.InnerUID), 10))}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("authenticate on the accessibility bus: %w", err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("hello on the accessibility bus: %w", err)
	}
	return conn, nil
}

// connect opens the socket. A path is opened first (O_PATH, as the
// service), then connected through /proc/self/fd: the daemon's directories
// need not be searchable by its user's host id.
func (b *Bus) connect() (net.Conn, error) {
	var addr string
	netns := -1
	if strings.HasPrefix(b.Path, "@") {
		ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", b.PID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		defer unix.Close(ns)
		// An abstract name is only the session's own in a network
		// namespace of its own.
		var theirs, ours unix.Stat_t
		if err := unix.Fstat(ns, &theirs); err != nil {
			return nil, err
		}
		if err := unix.Stat("/proc/thread-self/ns/net", &ours); err != nil {
			return nil, err
		}
		if theirs.Ino == ours.Ino && theirs.Dev == ours.Dev {
			return nil, errors.New("the bus listens on an abstract socket in the node's own network namespace")
		}
		netns = ns
		addr = b.Path
	} else {
		// Resolved beneath the daemon's root, links included: a link the
		// session planted cannot lead to a socket of the node.
		root, err := unix.Open(fmt.Sprintf("/proc/%d/root", b.PID), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		defer unix.Close(root)
		fd, err := unix.Openat2(root, strings.TrimPrefix(b.Path, "/"), &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return nil, fmt.Errorf("the bus's socket %s: %w", b.Path, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, fmt.Errorf("the bus's socket %s is not a socket", b.Path)
		}
		addr = fmt.Sprintf("/proc/self/fd/%d", fd)
	}
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		fd, clean, err := connectAs(addr, netns, b.UID, b.GID)
		ch <- result{fd, err}
		if clean {
			runtime.UnlockOSThread()
		}
		// Else the thread keeps another identity: it ends with this
		// goroutine, locked.
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	f := os.NewFile(uintptr(r.fd), "a11y-bus")
	defer f.Close()
	return net.FileConn(f)
}

// connectAs runs on a locked thread: it creates the socket (in netns when
// it is open), takes uid and gid for the connect and restores itself.
// clean reports whether the thread is as it was.
func connectAs(addr string, netns int, uid, gid uint32) (fd int, clean bool, err error) {
	runtime.LockOSThread()
	euid, egid := uintptr(unix.Geteuid()), uintptr(unix.Getegid())
	if netns >= 0 {
		own, oerr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			return -1, true, oerr
		}
		defer unix.Close(own)
		if serr := unix.Setns(netns, unix.CLONE_NEWNET); serr != nil {
			return -1, true, fmt.Errorf("enter the session's network namespace: %w", serr)
		}
		fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if serr := unix.Setns(own, unix.CLONE_NEWNET); serr != nil {
			if err == nil {
				unix.Close(fd)
			}
			return -1, false, fmt.Errorf("leave the session's network namespace: %w", serr)
		}
	} else {
		fd, err = unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return -1, true, err
	}
	const keep = ^uintptr(0) // -1: leave the id as it is
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
		unix.Close(fd)
		return -1, true, fmt.Errorf("take gid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
		unix.Close(fd)
		_, _, e2 := unix.RawSyscall(unix.SYS_SETRESGID, keep, egid, keep)
		return -1, e2 == 0, fmt.Errorf("take uid %d: %w", uid, e)
	}
	cerr := unix.Connect(fd, &unix.SockaddrUnix{Name: addr})
	_, _, e1 := unix.RawSyscall(unix.SYS_SETRESUID, keep, euid, keep)
	_, _, e2 := unix.RawSyscall(unix.SYS_SETRESGID, keep, egid, keep)
	clean = e1 == 0 && e2 == 0
	if cerr != nil {
		unix.Close(fd)
		return -1, clean, cerr
	}
	return fd, clean, nil
}
