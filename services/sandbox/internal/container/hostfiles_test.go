package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deskgrid/deskgrid/services/sandbox/internal/idmap"
)

// TestMountPointsCoverTheSpec: every mount of a container's spec is at one
// of MountPoints or beneath one, so that what runc makes for it in a
// session's writable layer is never taken for the session's change.
func TestMountPointsCoverTheSpec(t *testing.T) {
	spec, err := Spec(Config{ID: "x", Bundle: "/b", Rootfs: "/r", Init: "/init", Range: idmap.Range{Base: 2_000_000, Size: 65536}})
	if err != nil {
		t.Fatal(err)
	}
	dests := []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/tmp/.X11-unix"}
	for _, m := range spec.Mounts {
		dests = append(dests, m.Destination)
	}
	for _, d := range dests {
		rel := strings.TrimPrefix(d, "/")
		covered := false
		for _, m := range MountPoints {
			if rel == m || strings.HasPrefix(rel, m+"/") {
				covered = true
			}
		}
		if !covered {
			t.Errorf("mount %s is not in MountPoints", d)
		}
	}
}

// TestBoundOver: the runtime's host files go over a file, a missing one or
// a link into the runtime's /run or /tmp, never over a directory or a link
// elsewhere (out of the root included).
func TestBoundOver(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "etc", "dir"), 0o755))
	must(os.WriteFile(filepath.Join(root, "etc", "file"), nil, 0o644))
	links := map[string]string{
		"rel-run":  "../run/resolvconf/resolv.conf",
		"abs-run":  "/run/systemd/resolve/stub-resolv.conf",
		"tmp":      "/tmp/hosts",
		"usr":      "/usr/share/hostname",
		"escape":   "../../../../etc/shadow",
		"run-back": "/run/../etc/passwd",
		"run-dir":  "/run",
	}
	for n, target := range links {
		must(os.Symlink(target, filepath.Join(root, "etc", n)))
	}
	want := map[string]bool{
		"file": true, "missing": true, "dir": false,
		"rel-run": true, "abs-run": true, "tmp": true,
		"usr": false, "escape": false, "run-back": false, "run-dir": false,
	}
	for n, w := range want {
		if got := boundOver(root, "/etc/"+n); got != w {
			t.Errorf("boundOver(/etc/%s) = %v, want %v", n, got, w)
		}
	}
}

// TestIsMountPoint: only an empty entry at a mount point, where the image
// has nothing, is the runtime's.
func TestIsMountPoint(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	for _, d := range []string{"proc", "dev", "etc", "run"} {
		if err := os.MkdirAll(filepath.Join(upper, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.MkdirAll(filepath.Join(lower, "etc"), 0o755)
	_ = os.MkdirAll(filepath.Join(lower, "run"), 0o755)
	_ = os.WriteFile(filepath.Join(upper, "dev", "null"), nil, 0o644)
	_ = os.WriteFile(filepath.Join(upper, "etc", "hosts"), nil, 0o644)
	_ = os.WriteFile(filepath.Join(upper, "etc", "resolv.conf"), []byte("nameserver 1.1.1.1\n"), 0o644)
	_ = os.WriteFile(filepath.Join(upper, "etc", "hostname"), nil, 0o644)
	_ = os.WriteFile(filepath.Join(lower, "etc", "hostname"), []byte("image\n"), 0o644)
	for rel, want := range map[string]bool{
		"proc":            true,  // empty, not in the image
		"dev":             false, // holds something
		"etc/hosts":       true,  // empty file, not in the image
		"etc/resolv.conf": false, // the session's content
		"etc/hostname":    false, // the image has one: a session's emptied copy
		"run":             false, // the image has it
		"etc":             false, // not a mount point
	} {
		if got := IsMountPoint(upper, lower, rel); got != want {
			t.Errorf("IsMountPoint(%s) = %v, want %v", rel, got, want)
		}
	}
}

// An image whose /etc is a link to the node's /etc: whether the image has
// etc/hosts is asked beneath the image, not answered by the node's file.
func TestIsMountPointDoesNotFollowTheImagesLinks(t *testing.T) {
	upper, lower, node := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(node, "hosts"), []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(node, filepath.Join(lower, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(upper, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(upper, "etc", "hosts"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !IsMountPoint(upper, lower, "etc/hosts") {
		t.Error("an empty etc/hosts over an image whose /etc links to the node's was taken for the node's file")
	}
}
