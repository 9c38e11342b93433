package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// v2Controllers are enabled for the children of the root and of the parent.
var v2Controllers = []string{"memory", "cpu", "pids"}

func (h Hierarchy) createV2(id string, l Limits) (string, error) {
	parent := filepath.Join(h.Mountpoint, h.Parent)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	dirs := []string{h.Mountpoint}
	for d := parent; d != h.Mountpoint; d = filepath.Dir(d) {
		dirs = append(dirs, d)
	}
	// Enable from the top down: a child can only enable what its parent has.
	slices.Reverse(dirs[1:])
	for _, dir := range dirs {
		for _, c := range v2Controllers {
			// Already enabled or not offered: the limit write below says which.
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
		}
	}
	dir := filepath.Join(parent, id)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return "", err
	}
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("set %s: %w", file, err)
		}
		return nil
	}
	var err error
	if l.MemoryBytes > 0 {
		err = write("memory.max", strconv.FormatInt(l.MemoryBytes, 10))
		if err == nil {
			// Swap would let a hog outlive its limit; absent without swap.
			_ = write("memory.swap.max", "0")
		}
	}
	if err == nil && l.CPUMillis > 0 {
		err = write("cpu.max", fmt.Sprintf("%d %d", l.CPUMillis*cpuPeriod/1000, cpuPeriod))
	}
	if err == nil && l.Pids > 0 {
		err = write("pids.max", strconv.FormatInt(l.Pids, 10))
	}
	if err != nil {
		_ = os.Remove(dir)
		return "", err
	}
	return dir, nil
}

func (g *Group) freezeV2(v string) error {
	if err := os.WriteFile(filepath.Join(g.v2, "cgroup.freeze"), []byte(v), 0); err != nil {
		return fmt.Errorf("freeze cgroup %s: %w", g.v2, err)
	}
	// cgroup.events says "frozen 1" once every process has stopped.
	want := "frozen " + v
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(filepath.Join(g.v2, "cgroup.events"))
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(want)) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("cgroup %s did not reach %q", g.v2, want)
}

// freezeV1 sets the v1 freezer's state and waits, for a bounded time, until
// the group is in it. containerd's v1 Freeze waits without bound, and a
// group whose task is stuck between freezing and exec (runc's init, when
// runc froze the group to kill it) never gets to FROZEN: it is left
// thawed then, so that killing it works.
func (g *Group) freezeV1(state string) error {
	file := filepath.Join(g.h.Mountpoint, "freezer", g.h.Parent, g.id, "freezer.state")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := os.WriteFile(file, []byte(state), 0); err != nil {
			return fmt.Errorf("freeze cgroup %s: %w", g.h.group(g.id), err)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("freeze cgroup %s: %w", g.h.group(g.id), err)
		}
		if strings.TrimSpace(string(data)) == state {
			return nil
		}
		if time.Now().After(deadline) {
			if state == "FROZEN" {
				_ = os.WriteFile(file, []byte("THAWED"), 0)
			}
			return fmt.Errorf("cgroup %s did not reach %s (%s)", g.h.group(g.id), state, strings.TrimSpace(string(data)))
		}
		time.Sleep(time.Millisecond)
	}
}

func readPids(file string) ([]int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", file, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func readKV(file, key string) uint64 {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+" "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func readUint(file string) uint64 {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

func (g *Group) usageV2() (Usage, error) {
	if _, err := os.Stat(g.v2); err != nil {
		return Usage{}, fmt.Errorf("cgroup stats: %w", err)
	}
	ev := g.h.Events(g.id)
	return Usage{
		CPUNanos:      readKV(filepath.Join(g.v2, "cpu.stat"), "usage_usec") * 1000,
		MemoryBytes:   readUint(filepath.Join(g.v2, "memory.current")),
		Pids:          readUint(filepath.Join(g.v2, "pids.current")),
		OOMKills:      ev.OOMKills,
		PidsLimitHits: ev.PidsLimitHits,
	}, nil
}
