package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

func testHierarchy(t *testing.T) Hierarchy {
	t.Helper()
	h, err := Detect(fmt.Sprintf("deskgrid/test-cgroup-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.RemoveParent)
	return h
}

func TestGroupLifecycle(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.Create("life", Limits{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Delete() })

	cmd := exec.Command("sleep", "1000")
	start, done := g.Command(cmd)
	if err := start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("pid %d not in group: %v", cmd.Process.Pid, pids)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
		return exe != "" && exe != "/usr/bin/dash" && exe != "/bin/sh"
	}, "sleep to exec")
	if ids, err := h.List(); err != nil || !slices.Contains(ids, "life") {
		t.Fatalf("List = %v, %v", ids, err)
	}
	if err := g.Freeze(); err != nil {
		t.Fatal(err)
	}
	if !g.Frozen() {
		t.Fatal("not frozen after Freeze")
	}
	if err := g.Thaw(); err != nil {
		t.Fatal(err)
	}
	u, err := g.Usage()
	if err != nil || u.Pids != 1 {
		t.Fatalf("Usage = %+v, %v", u, err)
	}
	if err := g.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err == nil {
		t.Fatal("sleep exited cleanly; want killed")
	}
	for _, d := range h.dirs("life") {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", d, err)
		}
	}
	if _, err := h.Load("life"); !os.IsNotExist(err) && err == nil {
		t.Fatal("Load after Delete succeeded")
	}
}
