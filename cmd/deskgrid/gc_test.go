package main

import (
	"os/exec"
	"strings"
	"testing"
)

// What a killed deskgrid left behind is listed and collected by `deskgrid
// gc`, which refuses to touch a data dir a running deskgrid holds.
func TestEndToEndGC(t *testing.T) {
	dataDir, runDir := t.TempDir(), t.TempDir()
	p := startUp(t, dataDir, runDir)
	p.createSession(320, 240)
	gc := func(args ...string) (string, error) {
		cmd := exec.Command(deskgridBinary(t), append([]string{"gc", "-data-dir", dataDir, "-runtime-dir", runDir}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := gc("-dry-run"); err == nil || !strings.Contains(out, "another deskgrid is running") {
		t.Fatalf("gc next to a running deskgrid: %v\n%s", err, out)
	}
	p.kill9()

	out, err := gc("-dry-run")
	if err != nil {
		t.Fatalf("gc -dry-run: %v\n%s", err, out)
	}
	for _, want := range []string{"display ", "sandbox ", "mount ", "cgroup "} {
		if !strings.Contains(out, want) {
			t.Errorf("gc -dry-run lists no %q leftover:\n%s", strings.TrimSpace(want), out)
		}
	}
	if m := overlayMountsUnder(t, dataDir); len(m) == 0 {
		t.Fatal("the dry run removed the mounts")
	}
	if out, err = gc(); err != nil {
		t.Fatalf("gc: %v\n%s", err, out)
	}
	if out, err = gc("-dry-run"); err != nil || !strings.Contains(out, "nothing left behind") {
		t.Fatalf("after gc: %v\n%s", err, out)
	}
	if m := overlayMountsUnder(t, dataDir); len(m) != 0 {
		t.Fatalf("mounts left after gc: %v", m)
	}
	if x := xServersUsing(t, runDir); len(x) != 0 {
		t.Fatalf("X servers left after gc: %v", x)
	}
}
