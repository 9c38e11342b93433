// Package cgroup gives each session a control group with memory, CPU and
// pids limits and a freezer, on cgroup v1 or v2 (github.com/containerd/cgroups
// detects which and drives v1; v2 is a handful of plain files, written
// directly because containerd's cgroup2 package links eBPF device filters
// deskgrid does not use). Every group lives under one parent named "deskgrid" and is
// named for its session, so a restarted node can find and remove leftovers.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// DefaultParent is the group every session's group lives in.
const DefaultParent = "deskgrid"

// cpuPeriod is the CFS period the CPU quota is expressed in (100 ms).
const cpuPeriod = 100_000

// Limits bound one session. Zero leaves a resource unlimited.
type Limits struct {
	MemoryBytes int64
	// CPUMillis is CPU time per second of wall time: 1000 is one core.
	CPUMillis int64
	Pids      int64
}

// Usage is what a group has used.
type Usage struct {
	CPUNanos    uint64 // total CPU time of every process that ran in it
	MemoryBytes uint64
	Pids        uint64
	OOMKills    uint64 // processes the kernel killed for going over memory
	// PidsLimitHits counts forks refused because the group was at its pids
	// limit.
	PidsLimitHits uint64
}

// Events counts the limits a group ran into since it was made.
type Events struct {
	OOMKills      uint64
	PidsLimitHits uint64
}

// Add returns e + o.
func (e Events) Add(o Events) Events {
	return Events{e.OOMKills + o.OOMKills, e.PidsLimitHits + o.PidsLimitHits}
}

// Events reads the limit events of the group named id: only the two small
// files that count them, so a node can read every group at each scrape.
// A group that is gone reads as zero.
func (h Hierarchy) Events(id string) Events {
	if h.V2 {
		dir := filepath.Join(h.Mountpoint, h.Parent, id)
		return Events{
			OOMKills:      readKV(filepath.Join(dir, "memory.events"), "oom_kill"),
			PidsLimitHits: readKV(filepath.Join(dir, "pids.events"), "max"),
		}
	}
	return Events{
		// memory.oom_control counts the kills ("oom_kill N") on kernels >= 4.13,
		// pids.events the refused forks ("max N") on kernels >= 4.11.
		OOMKills:      readKV(filepath.Join(h.Mountpoint, string(cgroup1.Memory), h.Parent, id, "memory.oom_control"), "oom_kill"),
		PidsLimitHits: readKV(filepath.Join(h.Mountpoint, string(cgroup1.Pids), h.Parent, id, "pids.events"), "max"),
	}
}

// Hierarchy is the cgroup filesystem deskgrid works on.
type Hierarchy struct {
	// Mountpoint is the cgroup root, normally /sys/fs/cgroup.
	Mountpoint string
	// V2 is true on the unified hierarchy.
	V2 bool
	// Parent is the path, below the root, of the group holding the
	// sessions' groups: "deskgrid", or deeper to keep apart several nodes
	// sharing one kernel (tests do).
	Parent string
}

// ErrUnavailable means the node offers no usable cgroup hierarchy.
var ErrUnavailable = errors.New("no usable cgroup hierarchy")

// v1Controllers are the only v1 controllers deskgrid uses; leaving the
// others alone keeps creation fast and avoids controllers a host may lack.
var v1Controllers = []cgroup1.Name{cgroup1.Memory, cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Pids, cgroup1.Freezer}

// Detect returns the node's hierarchy, with the sessions' groups under
// parent (DefaultParent when empty).
func Detect(parent string) (Hierarchy, error) {
	if parent == "" {
		parent = DefaultParent
	}
	parent = strings.Trim(filepath.Clean("/"+parent), "/")
	if parent == "" {
		return Hierarchy{}, errors.New("cgroup parent must not be the root")
	}
	h := Hierarchy{Mountpoint: "/sys/fs/cgroup", Parent: parent}
	switch cgroups.Mode() {
	case cgroups.Unified:
		h.V2 = true
		return h, nil
	case cgroups.Legacy, cgroups.Hybrid:
		for _, c := range []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Freezer} {
			if _, err := os.Stat(filepath.Join(h.Mountpoint, string(c))); err != nil {
				return h, fmt.Errorf("%w: cgroup v1 controller %s is not mounted", ErrUnavailable, c)
			}
		}
		return h, nil
	}
	return h, ErrUnavailable
}

// Name returns "v1" or "v2".
func (h Hierarchy) Name() string {
	if h.V2 {
		return "v2"
	}
	return "v1"
}

func (h Hierarchy) group(id string) string { return "/" + h.Parent + "/" + id }

func (h Hierarchy) v1Hierarchy() cgroup1.Hierarchy {
	return func() ([]cgroup1.Subsystem, error) {
		all, err := cgroup1.Default()
		if err != nil {
			return nil, err
		}
		var out []cgroup1.Subsystem
		for _, s := range all {
			for _, n := range v1Controllers {
				if s.Name() == n {
					out = append(out, s)
				}
			}
		}
		return out, nil
	}
}

// Group is one session's control group.
type Group struct {
	h  Hierarchy
	id string
	v1 cgroup1.Cgroup
	v2 string // the group's directory on v2
}

// Create makes (or takes over) the group of session id with limits l.
func (h Hierarchy) Create(id string, l Limits) (*Group, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, fmt.Errorf("cgroup name %q is not a plain name", id)
	}
	g := &Group{h: h, id: id}
	if h.V2 {
		dir, err := h.createV2(id, l)
		if err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", h.group(id), err)
		}
		g.v2 = dir
		return g, g.thawTakenOver()
	}
	res := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &m}
	}
	if l.CPUMillis > 0 {
		q, p := l.CPUMillis*cpuPeriod/1000, uint64(cpuPeriod)
		res.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	if l.Pids > 0 {
		n := l.Pids
		res.Pids = &specs.LinuxPids{Limit: &n}
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(h.group(id)), res, cgroup1.WithHierarchy(h.v1Hierarchy()))
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", h.group(id), err)
	}
	g.v1 = cg
	return g, g.thawTakenOver()
}

// thawTakenOver thaws a group Create took over frozen (left by a runtime
// killed while it froze the group): runc refuses to start a container in a
// frozen group.
func (g *Group) thawTakenOver() error {
	if !g.Frozen() {
		return nil
	}
	if err := g.Thaw(); err != nil {
		return fmt.Errorf("create cgroup %s: %w", g.h.group(g.id), err)
	}
	return nil
}

// Load opens an existing group, or reports fs.ErrNotExist. A group left
// only in hierarchies an OCI runtime made it in (a crash between removing
// it from deskgrid's controllers and from the others) is found too; it
// holds nothing deskgrid limits and can only be deleted.
func (h Hierarchy) Load(id string) (*Group, error) {
	found := false
	for _, d := range h.dirs(id) {
		if _, err := os.Stat(d); err == nil {
			found = true
		}
	}
	if !found {
		for _, d := range h.foreignDirs(id) {
			if _, err := os.Stat(d); err == nil {
				return &Group{h: h, id: id}, nil
			}
		}
		return nil, fmt.Errorf("cgroup %s: %w", h.group(id), fs.ErrNotExist)
	}
	g := &Group{h: h, id: id}
	if h.V2 {
		g.v2 = filepath.Join(h.Mountpoint, h.Parent, id)
		return g, nil
	}
	// Load skips the controllers in which the group is missing.
	cg, err := cgroup1.Load(cgroup1.StaticPath(h.group(id)), cgroup1.WithHierarchy(h.v1Hierarchy()))
	if err != nil {
		return nil, fmt.Errorf("load cgroup %s: %w", h.group(id), err)
	}
	g.v1 = cg
	return g, nil
}

// dirs are the group's directories: one per v1 controller, or one on v2.
func (h Hierarchy) dirs(id string) []string {
	if h.V2 {
		return []string{filepath.Join(h.Mountpoint, h.Parent, id)}
	}
	out := make([]string, 0, len(v1Controllers))
	for _, c := range v1Controllers {
		out = append(out, filepath.Join(h.Mountpoint, string(c), h.Parent, id))
	}
	return out
}

// foreignDirs are the group's directories in the v1 hierarchies deskgrid
// does not use, where an OCI runtime placing a container in the group made
// it too (cpuset, devices, blkio, the named systemd one...).
func (h Hierarchy) foreignDirs(id string) []string {
	if h.V2 {
		return nil
	}
	own := map[string]bool{}
	for _, c := range v1Controllers {
		own[filepath.Join(h.Mountpoint, string(c), h.Parent)] = true
	}
	var out []string
	for _, p := range h.parents() {
		if !own[p] {
			out = append(out, filepath.Join(p, id))
		}
	}
	return out
}

// List returns the names of the groups under the deskgrid parent, in every
// hierarchy it is in.
func (h Hierarchy) List() ([]string, error) {
	parents := h.parents()
	seen := map[string]bool{}
	var out []string
	for _, p := range parents {
		entries, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list cgroups: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out, nil
}

// ID is the session the group belongs to.
func (g *Group) ID() string { return g.id }

// Command wraps cmd so that it starts inside the group, before the program
// it runs executes a single instruction: no fork it makes can escape the
// limits, and a fork bomb cannot race the placement.
//
// On v2 the kernel places the child at clone time (CLONE_INTO_CGROUP).
// v1 has no such call, so the program is started through /bin/sh, which
// first waits on a pipe: the parent writes the shell's pid to cgroup.procs
// and only then lets it exec the real program (which inherits the group).
// The returned start function replaces cmd.Start; done must be called after
// cmd.Wait (or when start failed) to release what start opened.
func (g *Group) Command(cmd *exec.Cmd) (start func() error, done func()) {
	if g.v2 != "" {
		dir, err := os.Open(g.v2)
		if err != nil {
			return func() error { return fmt.Errorf("open cgroup: %w", err) }, func() {}
		}
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(dir.Fd())
		return cmd.Start, func() { _ = dir.Close() }
	}
	// A missing program must fail here, as cmd.Start would, not as the
	// shell's exit status.
	err := cmd.Err
	if err == nil {
		_, err = exec.LookPath(cmd.Path)
	}
	if err != nil {
		return func() error { return err }, func() {}
	}
	fd := 3 + len(cmd.ExtraFiles)
	script := fmt.Sprintf(`read -r _ <&%d || exit 125; exec "$@" %d<&-`, fd, fd)
	cmd.Args = append([]string{"sh", "-c", script, "sh", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	cmd.Err = nil
	var r, w *os.File
	closeAll := func() {
		if r != nil {
			_ = r.Close()
		}
		if w != nil {
			_ = w.Close()
		}
	}
	start = func() error {
		var err error
		r, w, err = os.Pipe()
		if err != nil {
			return fmt.Errorf("cgroup start pipe: %w", err)
		}
		cmd.ExtraFiles = append(cmd.ExtraFiles, r)
		if err := cmd.Start(); err != nil {
			return err
		}
		_ = r.Close()
		r = nil
		if err := g.v1.AddProc(uint64(cmd.Process.Pid)); err != nil {
			_ = cmd.Process.Kill() // the shell never got to exec
			_ = w.Close()
			w = nil
			return fmt.Errorf("place process in cgroup %s: %w", g.h.group(g.id), err)
		}
		_, err = w.Write([]byte("go\n"))
		_ = w.Close()
		w = nil
		if err != nil {
			_ = cmd.Process.Kill()
			return fmt.Errorf("release process into cgroup: %w", err)
		}
		return nil
	}
	return start, closeAll
}

// foreignOnly says the group is left only in hierarchies deskgrid does not
// use (see Load).
func (g *Group) foreignOnly() bool { return g.v2 == "" && g.v1 == nil }

// Freeze stops every process of the group where it is; Thaw resumes them.
func (g *Group) Freeze() error {
	if g.foreignOnly() {
		return fmt.Errorf("freeze cgroup %s: %w", g.h.group(g.id), fs.ErrNotExist)
	}
	if g.v2 != "" {
		return g.freezeV2("1")
	}
	return g.freezeV1("FROZEN")
}

// Thaw resumes a frozen group.
func (g *Group) Thaw() error {
	if g.foreignOnly() {
		return nil
	}
	if g.v2 != "" {
		return g.freezeV2("0")
	}
	return g.freezeV1("THAWED")
}

// Frozen reports whether the group is frozen.
func (g *Group) Frozen() bool {
	if g.foreignOnly() {
		return false
	}
	if g.v2 != "" {
		data, err := os.ReadFile(filepath.Join(g.v2, "cgroup.freeze"))
		return err == nil && strings.TrimSpace(string(data)) == "1"
	}
	return g.v1.State() == cgroup1.Frozen
}

// Pids lists the processes in the group.
func (g *Group) Pids() ([]int, error) {
	var out []int
	if g.v2 != "" {
		return readPids(filepath.Join(g.v2, "cgroup.procs"))
	}
	if g.foreignOnly() {
		for _, d := range g.h.foreignDirs(g.id) {
			pids, err := readPids(filepath.Join(d, "cgroup.procs"))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
			out = append(out, pids...)
		}
		return out, nil
	}
	ps, err := g.v1.Processes(cgroup1.Freezer, true)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		out = append(out, p.Pid)
	}
	return out, nil
}

// Kill kills every process in the group and waits, up to timeout, until
// the group is empty. The group is frozen while it is swept so that no
// process can fork a new one between the listing and the kill.
func (g *Group) Kill(timeout time.Duration) error {
	if g.v2 != "" {
		if err := os.WriteFile(filepath.Join(g.v2, "cgroup.kill"), []byte("1"), 0); err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.h.group(g.id), err)
		}
	} else if g.v1 != nil {
		// Frozen already or not, the group ends thawed: a frozen group
		// (left by a runtime killed while it froze it to kill its
		// processes) would keep them, and refuse a new container.
		// A group that cannot freeze (a task caught in exec while it was
		// freezing stays in D state) is killed unfrozen, the loop below
		// catching what it forks meanwhile.
		_ = g.freezeV1("FROZEN")
		if pids, err := g.Pids(); err == nil {
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL) // delivered on thaw
			}
		}
		_ = g.freezeV1("THAWED")
	}
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		pids, err := g.Pids()
		if err != nil || len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has %d processes", g.h.group(g.id), len(pids))
		}
		if g.v2 == "" {
			// Stragglers forked between freeze and listing.
			for _, p := range pids {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
		time.Sleep(delay)
		if delay < 20*time.Millisecond {
			delay *= 2
		}
	}
}

// Delete kills what is left in the group and removes it, from every
// hierarchy it is in: an OCI runtime placing a container in it made it in
// each one it found, and is not always there (killed, or its state lost)
// to remove it.
func (g *Group) Delete() error {
	if err := g.Kill(5 * time.Second); err != nil {
		return err
	}
	if g.v2 != "" {
		if err := unix.Rmdir(g.v2); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", g.h.group(g.id), err)
		}
		return nil
	}
	if g.v1 != nil {
		if err := g.v1.Delete(); err != nil && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
			return fmt.Errorf("remove cgroup %s: %w", g.h.group(g.id), err)
		}
	}
	for _, d := range g.h.foreignDirs(g.id) {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", d, err)
		}
	}
	return nil
}

// Usage reads the group's counters.
func (g *Group) Usage() (Usage, error) {
	var u Usage
	if g.v2 != "" {
		return g.usageV2()
	}
	st, err := g.v1.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return u, fmt.Errorf("cgroup stats: %w", err)
	}
	if st.CPU != nil && st.CPU.Usage != nil {
		u.CPUNanos = st.CPU.Usage.Total
	}
	if st.Memory != nil && st.Memory.Usage != nil {
		u.MemoryBytes = st.Memory.Usage.Usage
	}
	if st.Pids != nil {
		u.Pids = st.Pids.Current
	}
	ev := g.h.Events(g.id)
	u.OOMKills, u.PidsLimitHits = ev.OOMKills, ev.PidsLimitHits
	return u, nil
}

// Check makes sure groups can be made: the parent exists (it is created)
// and is writable.
func (h Hierarchy) Check() error {
	for _, p := range h.parents() {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return nil
}

func (h Hierarchy) parents() []string {
	if h.V2 {
		return []string{filepath.Join(h.Mountpoint, h.Parent)}
	}
	out := make([]string, 0, len(v1Controllers))
	seen := map[string]bool{}
	for _, c := range v1Controllers {
		out = append(out, filepath.Join(h.Mountpoint, string(c), h.Parent))
		seen[string(c)] = true
	}
	// An OCI runtime placing a container in a group makes it in every
	// controller it finds; those parents are ours to remove too.
	entries, _ := os.ReadDir(h.Mountpoint)
	for _, e := range entries {
		if !seen[e.Name()] && e.IsDir() {
			if _, err := os.Stat(filepath.Join(h.Mountpoint, e.Name(), h.Parent)); err == nil {
				out = append(out, filepath.Join(h.Mountpoint, e.Name(), h.Parent))
			}
		}
	}
	return out
}

// RemoveParent removes the parent group, and those above it up to the root,
// when they are empty.
func (h Hierarchy) RemoveParent() {
	for _, p := range h.parents() {
		root := strings.TrimSuffix(p, "/"+h.Parent)
		for d := p; d != root && len(d) > len(root); d = filepath.Dir(d) {
			if unix.Rmdir(d) != nil {
				break
			}
		}
	}
}

// Version is "v1" or "v2".
func (g *Group) Version() string { return g.h.Name() }

// Path is the group's path below the cgroup root ("/<parent>/<id>"), as an
// OCI runtime spec's cgroupsPath names it.
func (g *Group) Path() string { return g.h.group(g.id) }
