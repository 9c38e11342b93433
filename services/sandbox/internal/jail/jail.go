// Package jail runs a command inside a sandbox with bubblewrap (Debian
// package bubblewrap): fresh user, pid, ipc, uts and network namespaces (no
// network, or user-mode outbound network on request: Network), no
// capabilities, no-new-privs, a read-only view of the host's programs and
// libraries, and the session's overlay as the only writable home. Killing
// bwrap kills the namespace's init and with it every process of the command.
package jail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
)

// Home is where the session's writable layer appears inside the sandbox.
const Home = "/home/user"

// UID and GID are the sandbox user's ids inside its user namespace.
const (
	UID = 1000
	GID = 1000
)

// DefaultEtc is what of the host's /etc a sandboxed program sees: what the
// dynamic linker, TLS, locales, fonts and Debian's alternatives need, and
// none of the host's accounts or secrets.
var DefaultEtc = []string{
	"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
	"timezone", "nsswitch.conf", "hosts", "resolv.conf", "gai.conf", "protocols",
	"services", "ssl", "ca-certificates", "ca-certificates.conf", "fonts",
	"mime.types", "mailcap", "magic", "os-release", "debian_version", "profile",
	"profile.d", "bash.bashrc", "inputrc", "terminfo", "locale.alias", "xdg",
	"X11", "gtk-3.0", "chromium", "chromium.d", "vim",
}

// Bind makes a host path visible at Dest.
type Bind struct {
	Src, Dest string
	Writable  bool
}

// Spec is one command to run.
type Spec struct {
	// Bwrap is the bubblewrap executable; empty means "bwrap" on PATH.
	Bwrap string
	// HomeDir is the host directory bound read-write at Home.
	HomeDir string
	Argv    []string
	// Env is "KEY=value" pairs added to (and overriding) the defaults.
	Env []string
	// Cwd is an absolute path inside the sandbox; empty means Home.
	Cwd string
	// Etc lists entries of the host's /etc to bind read-only; nil means DefaultEtc.
	Etc []string
	// Binds are extra mounts, applied last (after /tmp exists).
	Binds []Bind
	// Hostname inside the sandbox.
	Hostname string
	Stdin    []byte
	// Place, when set, starts bwrap inside the session's control group: it
	// wraps cmd and returns the start function to use instead of cmd.Start,
	// and done, called once the command has been waited for.
	Place func(cmd *exec.Cmd) (start func() error, done func())
	// Seccomp, when set, is a compiled filter (SeccompFilter) bwrap installs
	// before running the program.
	Seccomp []byte
	// Network, when set, gives the command outbound network through
	// user-mode networking instead of none.
	Network *Network
	// pidFile is where runc writes the pid of a Container's command, and
	// logFile its log.
	pidFile, logFile string
	// Container, when set, runs the command with `runc exec` in a session's
	// running container instead of a bwrap of its own: HomeDir, Etc, Binds,
	// Hostname, Place, Seccomp and Network are the container's, set when it
	// was made, and are ignored here.
	Container *Container
}

// Container names a running container and who runs in it.
type Container struct {
	Runtime container.Runtime
	ID      string
	// User is "uid:gid" inside the container.
	User string
}

// Stream tells stdout from stderr.
type Stream int

const (
	Stdout Stream = 1
	Stderr Stream = 2
)

// Exit is how a command ended.
type Exit struct {
	Code     int
	Signal   string
	TimedOut bool
}

// ErrNoBwrap means bubblewrap could not be started at all.
var ErrNoBwrap = errors.New("cannot start bubblewrap")

// ErrTimeout is the cause of a run's context when its timeout expired.
var ErrTimeout = errors.New("command timed out")

// ValidateEnv checks "KEY=value" pairs.
func ValidateEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("env %q is not KEY=value", kv)
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("env %q contains a NUL byte", k)
		}
		for i, r := range k {
			if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
				return fmt.Errorf("env name %q must be letters, digits and underscores, not starting with a digit", k)
			}
		}
	}
	return nil
}

// Args builds bwrap's (or, for a Container, runc's) command line.
func Args(spec Spec) ([]string, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("argv is empty")
	}
	if c := spec.Container; c != nil {
		if err := ValidateEnv(spec.Env); err != nil {
			return nil, err
		}
		return c.Runtime.ExecArgs(container.Exec{ID: c.ID, Argv: spec.Argv, Env: spec.Env, Cwd: spec.Cwd, User: c.User, PidFile: spec.pidFile, LogFile: spec.logFile}), nil
	}
	if spec.HomeDir == "" {
		return nil, errors.New("no home directory")
	}
	if err := ValidateEnv(spec.Env); err != nil {
		return nil, err
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = "sandbox"
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = Home
	}
	a := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
		"--unshare-net", "--unshare-cgroup-try",
		"--uid", fmt.Sprint(UID), "--gid", fmt.Sprint(GID),
		"--hostname", hostname,
		"--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
		"--ro-bind", "/usr", "/usr",
	}
	// Merged-/usr systems link these into /usr; older ones have real dirs.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		st, err := os.Lstat(d)
		switch {
		case err != nil:
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err == nil {
				a = append(a, "--symlink", target, d)
			}
		case st.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	etc := spec.Etc
	if etc == nil {
		etc = DefaultEtc
	}
	a = append(a, "--dir", "/etc")
	seen := map[string]bool{}
	for _, e := range etc {
		if seen[e] || e == "" || strings.Contains(e, "/") {
			continue
		}
		seen[e] = true
		a = append(a, "--ro-bind-try", "/etc/"+e, "/etc/"+e)
	}
	a = append(a,
		"--symlink", "/proc/self/mounts", "/etc/mtab",
		"--proc", "/proc", "--dev", "/dev",
		"--tmpfs", "/tmp", "--tmpfs", "/run", "--dir", "/var/tmp",
		"--bind", spec.HomeDir, Home,
	)
	for _, b := range spec.Binds {
		if b.Writable {
			a = append(a, "--bind", b.Src, b.Dest)
		} else {
			a = append(a, "--ro-bind", b.Src, b.Dest)
		}
	}
	env := map[string]string{
		"PATH":    "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
		"HOME":    Home,
		"USER":    "user",
		"LOGNAME": "user",
		"SHELL":   "/bin/sh",
		"LANG":    "C.UTF-8",
		"TERM":    "dumb",
	}
	order := []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM"}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, k := range order {
		a = append(a, "--setenv", k, env[k])
	}
	fd := 3 // the first of ExtraFiles, in the order command opens them
	if len(spec.Seccomp) > 0 {
		a = append(a, "--seccomp", fmt.Sprint(fd))
		fd++
	}
	if spec.Network != nil {
		// bwrap reports the namespace's pid, then waits for slirp4netns to
		// configure its interface before it runs the program.
		a = append(a, "--info-fd", fmt.Sprint(fd), "--block-fd", fmt.Sprint(fd+1))
	}
	a = append(a, "--chdir", cwd, "--")
	return append(a, spec.Argv...), nil
}

type chunk struct {
	stream Stream
	data   []byte
}

// Run starts the command and calls out with its output as it comes, at most
// chunkSize bytes at a time, from a single goroutine. It returns when the
// command and everything it started have ended. The command is killed when
// the timeout expires (Exit.TimedOut), when ctx ends, or when out fails.
func Run(ctx context.Context, spec Spec, timeout time.Duration, chunkSize int, out func(Stream, []byte) error) (Exit, error) {
	cleanup, err := withPidFile(&spec)
	if err != nil {
		return Exit{}, err
	}
	defer cleanup()
	args, err := Args(spec)
	if err != nil {
		return Exit{}, err
	}
	if chunkSize <= 0 {
		chunkSize = 32 << 10
	}
	l, err := command(spec, args)
	if err != nil {
		return Exit{}, err
	}
	defer l.release()
	cmd := l.cmd
	if len(spec.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(spec.Stdin)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Exit{}, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return Exit{}, err
	}
	start, done := place(spec, cmd)
	defer done()
	if err := start(); err != nil {
		return Exit{}, startError(err)
	}
	net, err := l.started(spec)
	if err != nil {
		return Exit{}, err
	}
	defer net.stop() // after the command has been waited for
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, ErrTimeout)
	defer cancel()
	// Killing bwrap is enough: --die-with-parent kills the namespace's init,
	// and with it every process of the namespace. os.Process signals through
	// a pidfd, so a late kill cannot hit a reused pid.
	stopKill := context.AfterFunc(runCtx, func() { kill(spec, cmd) })

	chunks := make(chan chunk, 4) // bounded: a slow reader stalls the command, not memory
	var readers sync.WaitGroup
	read := func(s Stream, r io.Reader) {
		defer readers.Done()
		buf := make([]byte, chunkSize)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				chunks <- chunk{s, bytes.Clone(buf[:n])}
			}
			if err != nil {
				return
			}
		}
	}
	readers.Add(2)
	go read(Stdout, stdout)
	go read(Stderr, stderr)
	go func() { readers.Wait(); close(chunks) }()

	var outErr error
	for c := range chunks {
		if outErr != nil {
			continue // drain so the readers finish
		}
		if err := out(c.stream, c.data); err != nil {
			outErr = err
			cancel()
		}
	}
	waitErr := cmd.Wait()
	killed := !stopKill() // the kill already ran
	cause := context.Cause(runCtx)

	exit, err := exitOf(waitErr)
	if err != nil {
		return exit, err
	}
	exit = startFailure(spec, exit)
	if killed && errors.Is(cause, ErrTimeout) {
		exit.TimedOut = true
	}
	if outErr != nil {
		return exit, outErr
	}
	if killed && !exit.TimedOut {
		return exit, fmt.Errorf("command stopped: %w", cause)
	}
	return exit, nil
}

// withPidFile gives a Container's command a file for its pid, so that it
// can be killed with its descendants (killing runc exec alone would leave
// them running in the container), and one for runc's log.
func withPidFile(spec *Spec) (cleanup func(), err error) {
	if spec.Container == nil {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "deskgrid-exec-")
	if err != nil {
		return nil, err
	}
	spec.pidFile = filepath.Join(dir, "pid")
	spec.logFile = filepath.Join(dir, "runc.log")
	return func() { _ = os.RemoveAll(dir) }, nil
}

// kill ends a command and everything it started.
func kill(spec Spec, cmd *exec.Cmd) {
	if spec.Container != nil {
		if data, err := os.ReadFile(spec.pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
				container.KillTree(pid)
			}
		}
	}
	_ = cmd.Process.Kill()
}

// launch is bwrap's command and the pipes it shares with it.
type launch struct {
	cmd *exec.Cmd
	// child are bwrap's ends, closed here once it has started.
	child []*os.File
	// info and block are ours when the command has network: bwrap writes
	// its child's pid to info and waits until block is written.
	info, block *os.File
}

// closeChild closes bwrap's ends of the pipes; ours see EOF when it exits.
func (l *launch) closeChild() {
	for _, f := range l.child {
		_ = f.Close()
	}
	l.child = nil
}

// release closes every pipe still open.
func (l *launch) release() {
	l.closeChild()
	for _, f := range []*os.File{l.info, l.block} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// command builds bwrap's command and opens the pipes Args numbered.
func command(spec Spec, args []string) (*launch, error) {
	bin := spec.Bwrap
	if bin == "" {
		bin = "bwrap"
	}
	if spec.Container != nil {
		bin = spec.Container.Runtime.Bin()
		spec.Seccomp, spec.Network = nil, nil
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	// Its own process group: a terminal's signals to the node agent must not
	// reach the sandbox.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	l := &launch{cmd: cmd}
	if len(spec.Seccomp) > 0 {
		// A pipe holds the few hundred bytes of the filter; bwrap reads to EOF.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("seccomp pipe: %w", err)
		}
		_, err = w.Write(spec.Seccomp)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("seccomp pipe: %w", err)
		}
		l.child = append(l.child, r)
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	}
	if spec.Network != nil {
		infoR, infoW, err := os.Pipe()
		if err != nil {
			l.release()
			return nil, fmt.Errorf("info pipe: %w", err)
		}
		l.info = infoR
		l.child = append(l.child, infoW)
		blockR, blockW, err := os.Pipe()
		if err != nil {
			l.release()
			return nil, fmt.Errorf("block pipe: %w", err)
		}
		l.block = blockW
		l.child = append(l.child, blockR)
		cmd.ExtraFiles = append(cmd.ExtraFiles, infoW, blockR)
	}
	return l, nil
}

// started finishes a start: it closes bwrap's ends of the pipes and, for a
// command with network, connects its namespace and lets it run. On error
// bwrap has been killed and waited for.
func (l *launch) started(spec Spec) (*slirp, error) {
	l.closeChild()
	if spec.Network == nil || spec.Container != nil {
		return nil, nil
	}
	sl, err := spec.Network.connect(spec, l.info, l.block)
	_ = l.block.Close()
	l.block = nil
	if err != nil {
		_ = l.cmd.Process.Kill()
		_ = l.cmd.Wait()
		return nil, err
	}
	return sl, nil
}

func place(spec Spec, cmd *exec.Cmd) (start func() error, done func()) {
	if spec.Place == nil || spec.Container != nil {
		return cmd.Start, func() {}
	}
	return spec.Place(cmd)
}

// startError tells a missing bubblewrap from other failures to start it
// (placing it in its cgroup, say), so neither is reported as the other.
func startError(err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrNoBwrap, err)
	}
	return fmt.Errorf("start bwrap: %w", err)
}

// startFailure gives a Container's command that runc could not start the
// exit code a shell gives for it (127: not found, 126: not runnable) in
// place of runc's 255.
func startFailure(spec Spec, exit Exit) Exit {
	if spec.Container != nil && exit.Code == 255 && exit.Signal == "" {
		if code := container.StartFailure(spec.logFile); code != 0 {
			exit.Code = code
		}
	}
	return exit
}

func exitOf(waitErr error) (Exit, error) {
	exit := Exit{}
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			exit.Code = 128 + int(ws.Signal())
			exit.Signal = ws.Signal().String()
		} else {
			exit.Code = ws.ExitStatus()
		}
	default:
		return exit, fmt.Errorf("wait for bwrap: %w", waitErr)
	}
	return exit, nil
}

// Proc is a command started by Spawn that runs on its own.
type Proc struct {
	spec Spec
	// cleanup removes what withPidFile made, once the command has ended.
	cleanup func()
	cmd     *exec.Cmd
	done    chan struct{}
	exit    Exit
	err     error
}

// Spawn starts the command without waiting for it; it reads stdin and its
// output goes to out (nil: nothing to read, output discarded). It ends when
// killed, or when the caller's process ends (--die-with-parent).
func Spawn(spec Spec, stdin, out *os.File) (*Proc, error) {
	cleanup, err := withPidFile(&spec)
	if err != nil {
		return nil, err
	}
	args, err := Args(spec)
	if err != nil {
		cleanup()
		return nil, err
	}
	l, err := command(spec, args)
	if err != nil {
		cleanup()
		return nil, err
	}
	defer l.release() // bwrap has its own copy once started
	cmd := l.cmd
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	start, placed := place(spec, cmd)
	if err := start(); err != nil {
		placed()
		cleanup()
		return nil, startError(err)
	}
	net, err := l.started(spec)
	if err != nil {
		placed()
		cleanup()
		return nil, err
	}
	p := &Proc{spec: spec, cleanup: cleanup, cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer cleanup()
		defer placed()
		p.exit, p.err = exitOf(cmd.Wait())
		p.exit = startFailure(p.spec, p.exit)
		net.stop()
	}()
	return p, nil
}

// Pid is bwrap's process id on the host.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the command has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit is how the command ended; valid once Done is closed.
func (p *Proc) Exit() (Exit, error) {
	<-p.done
	return p.exit, p.err
}

// Kill kills the command and everything it started; it does not wait.
func (p *Proc) Kill() {
	// Through a pidfd: a late kill cannot hit a reused pid.
	select {
	case <-p.done:
		return
	default:
	}
	kill(p.spec, p.cmd)
}

// HostSocket returns the host's X socket for display ":N" or ":N.S".
func HostSocket(dir, display string) (socket, number string, err error) {
	n, ok := strings.CutPrefix(display, ":")
	if !ok {
		return "", "", fmt.Errorf("display %q is not of the form :N", display)
	}
	n, _, _ = strings.Cut(n, ".")
	if n == "" || strings.Trim(n, "0123456789") != "" {
		return "", "", fmt.Errorf("display %q is not of the form :N", display)
	}
	return filepath.Join(dir, "X"+n), n, nil
}
