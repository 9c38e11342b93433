// Package container runs a session as one OCI container under runc (Debian
// package runc): the session's merged root filesystem as the container's
// root, a user namespace mapping the session's own host uid/gid range,
// catatonit as pid 1, and every command a `runc exec` into it.
package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/deskgrid/deskgrid/services/sandbox/internal/idmap"
)

// InitPath is where the host's catatonit appears inside every container.
const InitPath = "/run/deskgrid/init"

// Runtime is runc and the state directory it keeps its containers in.
type Runtime struct {
	// Runc is the runc executable; empty means "runc" on PATH.
	Runc string
	// Root is runc's --root: its state of this node's containers.
	Root string
}

func (r Runtime) bin() string {
	if r.Runc == "" {
		return "runc"
	}
	return r.Runc
}

// Args is runc's command line for a subcommand.
func (r Runtime) Args(sub ...string) []string {
	return append([]string{"--root", r.Root}, sub...)
}

// Command is runc with its state root and a subcommand.
func (r Runtime) Command(ctx context.Context, sub ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.bin(), r.Args(sub...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// Bin is the runc executable.
func (r Runtime) Bin() string { return r.bin() }

// Config is one session's container.
type Config struct {
	ID string
	// Bundle is the directory config.json is written to and the root
	// filesystem is bound at. runc reaches the root filesystem from inside
	// the session's user namespace: every directory above Bundle must be
	// searchable by others (0711); Bundle itself belongs to the range's root
	// and is closed to everyone else.
	Bundle string
	// Rootfs is the container's root filesystem (the session's merged tree).
	// It is bound at <Bundle>/rootfs with suid programs allowed (sudo inside
	// works; the files are owned by the range, not by host root), nodev.
	Rootfs string
	Range  idmap.Range
	// Init is the host's catatonit (or another init that reaps and waits).
	Init     string
	Hostname string
	// Env is the image's environment; every exec adds its own on top.
	Env []string
	// CgroupsPath is the session's control group ("/deskgrid/<id>"); empty:
	// runc's default.
	CgroupsPath string
	Seccomp     *specs.LinuxSeccomp
	// Network says the session has a network (its /etc/resolv.conf names
	// the network's DNS server).
	Network bool
	// Mounts are added after the defaults (the X socket and cookie, say).
	Mounts []specs.Mount
}

func (c Config) hostname() string {
	if c.Hostname == "" {
		return "sandbox"
	}
	return c.Hostname
}

// defaultCaps are runc's defaults (`runc spec`) plus what package managers
// and sudo need as root of the session's own user namespace.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// Spec is the runtime spec of c.
func Spec(c Config) (*specs.Spec, error) {
	if err := c.Range.Valid(); err != nil {
		return nil, err
	}
	if c.ID == "" || c.Rootfs == "" || c.Init == "" {
		return nil, errors.New("container: ID, Rootfs and Init are required")
	}
	hostname := c.hostname()
	caps := append([]string(nil), defaultCaps...)
	ro := func(dst, src string) specs.Mount {
		return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid", "nodev"}}
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=268435456"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		// sysfs cannot be mounted from a user namespace without its own
		// network namespace's ownership; a read-only bind serves what
		// programs read there.
		{Destination: "/sys", Type: "none", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
		ro(InitPath, c.Init),
	}
	mounts = append(mounts, c.Mounts...)
	spec := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: RootfsOf(c.Bundle)},
		Hostname: hostname,
		Process: &specs.Process{
			Args: []string{InitPath, "-P"},
			Env:  c.Env,
			Cwd:  "/",
			User: specs.User{UID: 0, GID: 0},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: c.Range.Base, Size: c.Range.Size}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: c.Range.Base, Size: c.Range.Size}},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.UserNamespace}, {Type: specs.MountNamespace}, {Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace},
			},
			CgroupsPath: c.CgroupsPath,
			Seccomp:     c.Seccomp,
			// runc's defaults (`runc spec`).
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
		},
	}
	return spec, nil
}

// Create writes c's bundle and starts its container, detached: pid 1 runs
// until Delete. On error nothing of the container is left.
func (r Runtime) Create(ctx context.Context, c Config) error {
	if _, err := Spec(c); err != nil {
		return err
	}
	if err := runtimeDirs(c.Rootfs); err != nil {
		return err
	}
	if err := r.bind(c); err != nil {
		_ = Cleanup(c.Bundle)
		return err
	}
	etc, err := hostFiles(c, c.Rootfs, c.hostname())
	if err != nil {
		_ = Cleanup(c.Bundle)
		return err
	}
	c.Mounts = append(slices.Clip(c.Mounts), etc...)
	spec, err := Spec(c)
	if err == nil {
		var data []byte
		if data, err = json.MarshalIndent(spec, "", "  "); err == nil {
			err = os.WriteFile(filepath.Join(c.Bundle, "config.json"), data, 0o600)
		}
	}
	if err != nil {
		_ = Cleanup(c.Bundle)
		return fmt.Errorf("container bundle: %w", err)
	}
	// The detached init keeps its stdio: a file, not a pipe Run would wait on.
	logPath := filepath.Join(c.Bundle, "init.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		_ = Cleanup(c.Bundle)
		return fmt.Errorf("container bundle: %w", err)
	}
	cmd := r.Command(ctx, "run", "--detach", "--bundle", c.Bundle, "--pid-file", filepath.Join(c.Bundle, "init.pid"), c.ID)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = log, log
	err = cmd.Run()
	log.Close()
	if err != nil {
		out, _ := os.ReadFile(logPath)
		_ = r.Delete(context.WithoutCancel(ctx), c.ID)
		_ = Cleanup(c.Bundle)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrNoRunc, err)
		}
		return fmt.Errorf("runc run %s: %w: %s", c.ID, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RootfsOf is where a bundle's root filesystem is bound.
func RootfsOf(bundle string) string { return filepath.Join(bundle, "rootfs") }

// bind makes c's bundle dir and binds the root filesystem in it.
func (r Runtime) bind(c Config) error {
	if err := os.Mkdir(c.Bundle, 0o700); err != nil {
		return fmt.Errorf("container bundle: %w", err)
	}
	if err := os.Chown(c.Bundle, int(c.Range.Base), int(c.Range.Base)); err != nil {
		return fmt.Errorf("container bundle: %w", err)
	}
	rootfs := RootfsOf(c.Bundle)
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return fmt.Errorf("container bundle: %w", err)
	}
	if err := syscall.Mount(c.Rootfs, rootfs, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind the root filesystem: %w", err)
	}
	// A bind keeps the source's nosuid; the host's root may clear it.
	if err := syscall.Mount("", rootfs, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_NODEV, ""); err != nil {
		return fmt.Errorf("bind the root filesystem: %w", err)
	}
	return nil
}

// Cleanup unmounts a bundle's root filesystem and removes the bundle; a
// missing bundle is no error.
func Cleanup(bundle string) error {
	rootfs := RootfsOf(bundle)
	for _, m := range []string{rootfs, hostFilesDir(bundle)} {
		for syscall.Unmount(m, syscall.MNT_DETACH) == nil {
		}
	}
	// Remove only what holds no mount: a still-mounted rootfs fails here
	// instead of losing the session's files.
	if err := os.Remove(rootfs); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove container bundle: %w", err)
	}
	if err := os.RemoveAll(bundle); err != nil {
		return fmt.Errorf("remove container bundle: %w", err)
	}
	return nil
}

// ErrUnusableImage means the image cannot be a container's root: it has
// something other than a directory where the runtime mounts one.
var ErrUnusableImage = errors.New("the image cannot run as a container")

// runtimeDirs checks that where the runtime mounts its filesystems (/dev,
// /proc, /sys, /tmp, /run) rootfs has a directory, a link (runc follows it
// within the root) or nothing, so that an image with a file there is
// refused with a reason before anything is made, not by runc's mount error.
func runtimeDirs(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("container root filesystem: %w", err)
	}
	defer root.Close()
	for _, d := range MountPoints {
		if strings.Contains(d, "/") {
			continue // the host files: bound over a file
		}
		fi, err := root.Lstat(d)
		if err != nil || fi.IsDir() || fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		return fmt.Errorf("%w: its /%s is a %s, where the runtime mounts a directory", ErrUnusableImage, d, kindOf(fi.Mode()))
	}
	return nil
}

// kindOf names the kind of file a mode is.
func kindOf(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// ErrNoRunc means runc could not be started at all.
var ErrNoRunc = errors.New("cannot start runc")

// State is what runc reports of a container.
type State struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

// noState reports whether the state root does not exist: then runc knows
// no container, and asking it would make the root (every runc subcommand
// creates --root), leaving an empty directory behind.
func (r Runtime) noState() bool {
	_, err := os.Stat(r.Root)
	return errors.Is(err, os.ErrNotExist)
}

// State reports the container id; an unknown one is os.ErrNotExist.
func (r Runtime) State(ctx context.Context, id string) (State, error) {
	var st State
	if r.noState() {
		return st, fmt.Errorf("container %s: %w", id, os.ErrNotExist)
	}
	var out, errOut bytes.Buffer
	cmd := r.Command(ctx, "state", id)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		if strings.Contains(errOut.String(), "does not exist") {
			return st, fmt.Errorf("container %s: %w", id, os.ErrNotExist)
		}
		return st, fmt.Errorf("runc state %s: %w: %s", id, err, strings.TrimSpace(errOut.String()))
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		return st, fmt.Errorf("runc state %s: %w", id, err)
	}
	return st, nil
}

// StateDirs names every container with a directory in the state root,
// including those whose state runc cannot load (it was killed before it
// wrote it) and that List leaves out.
func (r Runtime) StateDirs() ([]string, error) {
	ents, err := os.ReadDir(r.Root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runc state: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// List names the containers runc knows in this state root.
func (r Runtime) List(ctx context.Context) ([]State, error) {
	if r.noState() {
		return nil, nil
	}
	var out, errOut bytes.Buffer
	cmd := r.Command(ctx, "list", "--format", "json")
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("runc list: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	var list []State
	if s := bytes.TrimSpace(out.Bytes()); len(s) > 0 && string(s) != "null" {
		if err := json.Unmarshal(s, &list); err != nil {
			return nil, fmt.Errorf("runc list: %w", err)
		}
	}
	return list, nil
}

// Delete kills every process of the container and removes it; an unknown
// container is no error.
func (r Runtime) Delete(ctx context.Context, id string) error {
	if r.noState() {
		return nil
	}
	var out bytes.Buffer
	cmd := r.Command(ctx, "delete", "--force", id)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil || strings.Contains(out.String(), "does not exist") {
		// runc killed before it wrote its state leaves a directory it
		// cannot load, and that refuses a new container of the same id.
		if rerr := os.RemoveAll(filepath.Join(r.Root, id)); rerr != nil {
			return fmt.Errorf("remove runc's state of %s: %w", id, rerr)
		}
		return nil
	}
	// runc refuses while the init is still dying; its state dir is the
	// proof the container is gone once the processes are.
	if _, serr := r.State(ctx, id); errors.Is(serr, os.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("runc delete %s: %w: %s", id, err, strings.TrimSpace(out.String()))
}

// Exec is one command run in a container.
type Exec struct {
	ID   string
	Argv []string
	Env  []string
	Cwd  string
	// User is "uid:gid" inside the container.
	User string
	// PidFile is where runc writes the command's host pid.
	PidFile string
	// LogFile, when set, takes runc's own log as JSON lines (StartFailure
	// reads it), so that its stderr holds only its error's message.
	LogFile string
}

// ExecArgs is `runc exec`'s command line for e.
func (r Runtime) ExecArgs(e Exec) []string {
	a := r.Args()
	if e.LogFile != "" {
		a = append(a, "--log", e.LogFile, "--log-format", "json")
	}
	a = append(a, "exec")
	if e.Cwd != "" {
		a = append(a, "--cwd", e.Cwd)
	}
	if e.User != "" {
		a = append(a, "--user", e.User)
	}
	if e.PidFile != "" {
		a = append(a, "--pid-file", e.PidFile)
	}
	for _, kv := range e.Env {
		a = append(a, "--env", kv)
	}
	a = append(a, e.ID)
	return append(a, e.Argv...)
}

// StartFailure reads the log of a `runc exec` that exited 255 and returns
// the exit code a shell gives for a command it could not start: 127 when
// the program was not found, 126 when it could not be run; 0 when runc
// logged no such failure (the command itself exited 255).
func StartFailure(logFile string) int {
	data, err := os.ReadFile(logFile)
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		var l struct{ Level, Msg string }
		if json.Unmarshal(line, &l) != nil || l.Level != "error" || !strings.Contains(l.Msg, "unable to start container process: exec:") {
			continue
		}
		switch {
		case strings.Contains(l.Msg, "executable file not found"), strings.Contains(l.Msg, "no such file or directory"):
			return 127
		default:
			return 126
		}
	}
	return 0
}

// KillTree kills pid and every process descending from it, reading the
// pid's children from /proc until none is left. It is how one exec ends
// inside a container that goes on running.
func KillTree(pid int) {
	for round := 0; round < 50; round++ {
		tree := descendants(pid)
		if len(tree) == 0 {
			return
		}
		// Stop first so that nothing forks while the tree is killed.
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGSTOP)
		}
		tree = descendants(pid)
		for _, p := range tree {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond) // the kernel reaps asynchronously; nothing to wait on
	}
}

// descendants is pid and its live descendants.
func descendants(pid int) []int {
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return nil
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(out[i]) + "/task")
		for _, t := range tasks {
			data, err := os.ReadFile("/proc/" + strconv.Itoa(out[i]) + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				if c, err := strconv.Atoi(f); err == nil {
					out = append(out, c)
				}
			}
		}
	}
	return out
}
