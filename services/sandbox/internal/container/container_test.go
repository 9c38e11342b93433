package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/sandbox/internal/idmap"
)

// busyboxRoot makes a root filesystem of the host's static busybox, owned
// by the range's root as an unpacked image would appear through idmap.
func busyboxRoot(t *testing.T, dir string, r idmap.Range) {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox is required (Debian package busybox-static)")
	}
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "run", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// runc gives a tmpfs its mount point's mode, as an image has it.
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sh", "id", "cat", "touch", "sleep", "ps", "stat", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", n)); err != nil {
			t.Fatal(err)
		}
	}
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		return os.Lchown(p, int(r.Base), int(r.Base))
	})
}

func catatonit(t *testing.T) string {
	p, err := exec.LookPath("catatonit")
	if err != nil {
		t.Fatal("catatonit is required (Debian package catatonit)")
	}
	return p
}

func TestContainerRunsInItsOwnRange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bundles, err := os.MkdirTemp("/run", "deskgrid-container-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bundles)
	if err := os.Chmod(bundles, 0o711); err != nil {
		t.Fatal(err)
	}
	r := idmap.Range{Base: 2_000_000, Size: 65536}
	rootfs := filepath.Join(dir, "rootfs")
	busyboxRoot(t, rootfs, r)
	rt := Runtime{Root: filepath.Join(dir, "runc")}
	id := fmt.Sprintf("dg-test-%d", os.Getpid())
	c := Config{ID: id, Bundle: filepath.Join(bundles, "b"), Rootfs: rootfs, Range: r, Init: catatonit(t), Env: []string{"PATH=/bin"}}
	if err := rt.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	defer rt.Delete(context.Background(), id)
	st, err := rt.State(ctx, id)
	if err != nil || st.Status != "running" || st.Pid <= 0 {
		t.Fatalf("state: %+v %v", st, err)
	}
	run := func(user string, argv ...string) string {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, rt.Bin(), rt.ExecArgs(Exec{ID: id, Argv: argv, User: user, Cwd: "/"})...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("exec %v: %v: %s", argv, err, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	if got := run("0:0", "id", "-u"); got != "0" {
		t.Errorf("id -u as root: %q", got)
	}
	if got := run("1000:1000", "id", "-u"); got != "1000" {
		t.Errorf("id -u as the user: %q", got)
	}
	run("0:0", "touch", "/root/made")
	run("1000:1000", "touch", "/tmp/x")
	var fst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(rootfs, "root", "made"), &fst); err != nil {
		t.Fatal(err)
	}
	if fst.Uid != r.Host(0) {
		t.Errorf("a file root made in the container is host uid %d, want %d", fst.Uid, r.Host(0))
	}
	if got := run("0:0", "cat", "/proc/1/cmdline"); !strings.Contains(got, InitPath) {
		t.Errorf("pid 1 is %q, want the init", got)
	}
	list, err := rt.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Errorf("list: %+v %v", list, err)
	}
	if err := rt.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.State(ctx, id); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state after delete: %v", err)
	}
	if !gone(st.Pid) {
		t.Errorf("init %d survived delete", st.Pid)
	}
	if err := Cleanup(c.Bundle); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "root", "made")); err != nil {
		t.Errorf("Cleanup lost the root filesystem's files: %v", err)
	}
}

// gone waits until pid is dead (a zombie counts: it is reaped by whoever
// adopted it).
func gone(pid int) bool {
	for i := 0; i < 500; i++ {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if f := strings.Fields(string(data)); len(f) > 2 && f[2] == "Z" {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}
