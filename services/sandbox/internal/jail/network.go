package jail

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Network is outbound network for a command: slirp4netns (Debian package
// slirp4netns) connects the command's own network namespace to the host's
// in user mode, so the command never joins the host's namespace and sees
// neither its loopback nor its interfaces. Inside: tap0 with 10.0.2.100/24,
// gateway 10.0.2.2, DNS 10.0.2.3.
type Network struct {
	// Slirp is the slirp4netns executable; empty means "slirp4netns" on PATH.
	Slirp string
	// Hardened runs slirp4netns in its own mount namespace with a seccomp
	// filter (--enable-sandbox --enable-seccomp).
	Hardened bool
	// Deny are host addresses the command must not reach: slirp4netns
	// connects from the host, so the host's own addresses would otherwise
	// lead to every service listening on them. Routed as prohibited inside
	// the namespace, where the command (without capabilities) cannot change
	// its routes.
	Deny []netip.Addr
	// IP is the iproute2 executable that sets those routes; empty means "ip".
	IP string
}

// ErrNoSlirp means slirp4netns could not be started at all.
var ErrNoSlirp = errors.New("cannot start slirp4netns")

// setupTimeout bounds connecting a namespace: bwrap reports its pid and
// slirp4netns configures the interface in milliseconds.
const setupTimeout = 10 * time.Second

// HostAddrs lists the host's own IPv4 addresses but loopback (which
// slirp4netns --disable-host-loopback already refuses).
func HostAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("host addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		if ip.Is4() && !ip.IsLoopback() {
			out = append(out, ip)
		}
	}
	return out, nil
}

// slirp is a running slirp4netns serving one command.
type slirp struct {
	cmd   *exec.Cmd
	exit  *os.File // closing it tells slirp4netns to exit
	done  func()   // releases its placement
	ended chan struct{}
	out   *bytes.Buffer
}

// connect reads the namespace's pid from bwrap's info pipe, connects the
// namespace and closes nothing: the caller releases bwrap through block.
func (n *Network) connect(spec Spec, info *os.File, block *os.File) (*slirp, error) {
	_ = info.SetReadDeadline(time.Now().Add(setupTimeout))
	var ci struct {
		ChildPid int `json:"child-pid"`
	}
	// bwrap goes on after writing; a decoder needs no EOF.
	if err := json.NewDecoder(info).Decode(&ci); err != nil || ci.ChildPid <= 0 {
		return nil, fmt.Errorf("bwrap did not report its namespace: %v", err)
	}
	ns, err := openNetns(ci.ChildPid)
	if err != nil {
		return nil, err
	}
	if err := waitLoopback(ci.ChildPid); err != nil {
		ns.Close()
		return nil, err
	}
	defer ns.Close()
	sl, err := n.start(spec, ns)
	if err != nil {
		return nil, err
	}
	if err := n.deny(ns); err != nil {
		sl.stop()
		return nil, err
	}
	if _, err := block.Write([]byte{1}); err != nil {
		sl.stop()
		return nil, fmt.Errorf("release bwrap: %w", err)
	}
	return sl, nil
}

// openNetns opens pid's network namespace. While bwrap's child changes its
// credentials its namespace links briefly read as missing (it is not
// dumpable), so a missing link is retried; holding the namespace open
// then keeps it the same for slirp4netns and for the routes.
func openNetns(pid int) (*os.File, error) {
	p := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	deadline := time.Now().Add(setupTimeout)
	delay := 100 * time.Microsecond
	for {
		f, err := os.Open(p)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) || time.Now().After(deadline) {
			return nil, fmt.Errorf("open the sandbox's network namespace: %w", err)
		}
		time.Sleep(delay) // polling the kernel: there is nothing to wait on
		delay = min(2*delay, 10*time.Millisecond)
	}
}

// waitLoopback waits until bwrap has brought up the namespace's loopback:
// configuring tap0 at the same time makes bwrap's own netlink calls fail.
// The local route of 127.0.0.1 appears once lo is up, bwrap's last step.
func waitLoopback(pid int) error {
	p := "/proc/" + strconv.Itoa(pid) + "/net/fib_trie"
	deadline := time.Now().Add(setupTimeout)
	delay := 100 * time.Microsecond
	for {
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte("127.0.0.1")) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sandbox's loopback did not come up: %v", err)
		}
		time.Sleep(delay) // polling the kernel: there is nothing to wait on
		delay = min(2*delay, 10*time.Millisecond)
	}
}

func (n *Network) start(spec Spec, ns *os.File) (*slirp, error) {
	bin := n.Slirp
	if bin == "" {
		bin = "slirp4netns"
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	args := []string{"--configure", "--mtu=65520", "--disable-host-loopback", "--ready-fd=3", "--exit-fd=4"}
	if n.Hardened {
		args = append(args, "--enable-sandbox", "--enable-seccomp")
	}
	// The namespace by path, not by pid: given a pid, slirp4netns would also
	// join the pid's user namespace, which bwrap replaces by a nested one
	// (the sandbox's uid) that has no say over the network namespace.
	args = append(args, "--netns-type=path", "/proc/self/fd/5", "tap0")
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{readyW, exitR, ns}
	// Its exit pipe closes when the node agent dies, and so it exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	begin, placed := place(spec, cmd)
	err = begin()
	readyW.Close()
	exitR.Close()
	if err != nil {
		placed()
		exitW.Close()
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrNoSlirp, err)
		}
		return nil, fmt.Errorf("start slirp4netns: %w", err)
	}
	sl := &slirp{cmd: cmd, exit: exitW, done: placed, ended: make(chan struct{}), out: out}
	go func() {
		_ = cmd.Wait()
		close(sl.ended)
	}()
	// It writes "1" once tap0 is up and routed; EOF means it gave up.
	_ = readyR.SetReadDeadline(time.Now().Add(setupTimeout))
	buf := make([]byte, 1)
	if _, err := io.ReadFull(readyR, buf); err != nil {
		sl.stop()
		return nil, fmt.Errorf("slirp4netns did not configure the network: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return sl, nil
}

// deny routes the Deny addresses as prohibited in the namespace ns.
func (n *Network) deny(ns *os.File) error {
	if len(n.Deny) == 0 {
		return nil
	}
	ipBin := n.IP
	if ipBin == "" {
		ipBin = "ip"
	}
	var batch strings.Builder
	for _, a := range n.Deny {
		fmt.Fprintf(&batch, "route add prohibit %s/32\n", a)
	}
	cmd := exec.Command("nsenter", "--net=/proc/self/fd/3", ipBin, "-batch", "-")
	cmd.ExtraFiles = []*os.File{ns}
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("route the host's addresses away from the sandbox: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// stop ends slirp4netns and waits for it; nil is a no-op.
func (sl *slirp) stop() {
	if sl == nil {
		return
	}
	_ = sl.exit.Close()
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-sl.ended:
	case <-t.C:
		_ = sl.cmd.Process.Kill()
		<-sl.ended
	}
	sl.done()
}

// Slirp is a running slirp4netns serving a namespace; Stop ends it.
type Slirp = slirp

// Stop ends slirp4netns and waits for it; nil is a no-op.
func (sl *slirp) Stop() { sl.stop() }

// Attach gives the network namespace ns (an open /proc/<pid>/ns/net of a
// running container's init) outbound network until Stop, as Run does for
// one command's namespace.
func (n *Network) Attach(ns *os.File) (*Slirp, error) {
	sl, err := n.start(Spec{}, ns)
	if err != nil {
		return nil, err
	}
	if err := n.deny(ns); err != nil {
		sl.stop()
		return nil, err
	}
	return sl, nil
}
