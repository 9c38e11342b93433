package image

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// TestCommitUpperDirBecomesALayer commits an overlayfs upper directory (a
// new file, a deleted file as a 0/0 character device, an opaque directory)
// on top of an image, then mounts the new image's layers and sees the
// session's changes.
func TestCommitUpperDirBecomesALayer(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	baseImg := makeImage(t, runtime.GOARCH, layerTar(t,
		entry{name: "etc/", typ: tar.TypeDir}, entry{name: "etc/motd", body: "base"}, entry{name: "etc/old", body: "old"},
		entry{name: "cache/", typ: tar.TypeDir}, entry{name: "cache/stale", body: "stale"}))
	if _, err := s.ImportPath(ctx, "acme", writeLayout(t, baseImg, "base:v1"), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	base, err := s.Resolve(ctx, "acme", "base:v1")
	if err != nil {
		t.Fatal(err)
	}

	upper := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(upper, "usr/bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(upper, "usr/bin/jq"), []byte("#!/bin/sh\necho jq\n"), 0o755))
	must(t, os.MkdirAll(filepath.Join(upper, "etc"), 0o755))
	must(t, unix.Mknod(filepath.Join(upper, "etc/old"), unix.S_IFCHR, 0))
	must(t, os.WriteFile(filepath.Join(upper, "etc/motd"), []byte("changed"), 0o644))
	must(t, os.MkdirAll(filepath.Join(upper, "cache"), 0o755))
	must(t, unix.Setxattr(filepath.Join(upper, "cache"), "trusted.overlay.opaque", []byte("y"), 0))
	must(t, os.WriteFile(filepath.Join(upper, "cache/fresh"), []byte("fresh"), 0o644))

	got, err := s.Commit(ctx, "acme", base, Upper{Dir: upper}, "my-team/qa-desktop:v3")
	if err != nil {
		t.Fatal(err)
	}
	if got.Ref != "docker.io/my-team/qa-desktop:v3" || len(got.Layers) != 2 || got.Layers[0] != base.Layers[0] {
		t.Fatalf("committed %+v", got)
	}
	if got.Config.Labels["made-by"] != "test" {
		t.Fatalf("base config lost: %+v", got.Config)
	}
	again, err := s.Resolve(ctx, "acme", "my-team/qa-desktop:v3")
	if err != nil || again.Digest != got.Digest {
		t.Fatalf("resolve: %+v %v", again, err)
	}
	_, err = s.Resolve(ctx, "other", "my-team/qa-desktop:v3")
	wantCode(t, err, codes.NotFound)

	merged := mountLowers(t, got.Layers)
	mustRead(t, filepath.Join(merged, "usr/bin/jq"), "#!/bin/sh\necho jq\n")
	mustRead(t, filepath.Join(merged, "etc/motd"), "changed")
	mustRead(t, filepath.Join(merged, "cache/fresh"), "fresh")
	for _, n := range []string{"etc/old", "cache/stale"} {
		if _, err := os.Lstat(filepath.Join(merged, n)); !os.IsNotExist(err) {
			t.Fatalf("%s survived the commit: %v", n, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(merged, "usr/bin/jq")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode: %v %v", fi, err)
	}

	// A commit of a commit stacks another layer.
	upper2 := t.TempDir()
	must(t, os.WriteFile(filepath.Join(upper2, "second"), []byte("2"), 0o644))
	v4, err := s.Commit(ctx, "acme", got, Upper{Dir: upper2}, "my-team/qa-desktop:v4")
	if err != nil || len(v4.Layers) != 3 {
		t.Fatalf("second commit: %+v %v", v4, err)
	}

	_, err = s.Commit(ctx, "acme", base, Upper{Dir: upper}, "Bad Ref")
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.Commit(ctx, "acme", base, Upper{Dir: upper}, base.Digest)
	wantCode(t, err, codes.InvalidArgument)
	_, err = s.Commit(ctx, "acme", base, Upper{Dir: filepath.Join(upper, "missing")}, "team/x:y")
	wantCode(t, err, codes.FailedPrecondition)
	if tmp, _ := os.ReadDir(s.tmp); len(tmp) != 0 {
		t.Fatalf("work left: %v", tmp)
	}
}

// TestCommitOwnersAsTheSessionSawThem: a session's files belong to its host
// id range; the committed layer holds them as the ids inside the session
// (its user 1000, its root 0), and an id outside the range as nobody.
func TestCommitOwnersAsTheSessionSawThem(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	const base = 200000
	upper := t.TempDir()
	must(t, os.Chown(upper, base, base))
	must(t, os.MkdirAll(filepath.Join(upper, "home/user/.cache"), 0o755))
	must(t, os.WriteFile(filepath.Join(upper, "home/user/.cache/font"), []byte("c"), 0o644))
	must(t, os.WriteFile(filepath.Join(upper, "home/user/stray"), []byte("s"), 0o644))
	must(t, os.WriteFile(filepath.Join(upper, "tool"), []byte("#!/bin/sh\n"), 0o755))
	for p, id := range map[string]int{"home": base, "home/user": base + 1000, "home/user/.cache": base + 1000,
		"home/user/.cache/font": base + 1000, "home/user/stray": 12345, "tool": base} {
		must(t, os.Lchown(filepath.Join(upper, p), id, id))
	}
	got, err := s.Commit(ctx, "acme", nil, Upper{Dir: upper, Shift: IDShift{Base: base, Size: 65536}}, "team/owners:v1")
	if err != nil {
		t.Fatal(err)
	}
	layer := got.Layers[len(got.Layers)-1]
	for p, want := range map[string]uint32{"home": 0, "home/user": 1000, "home/user/.cache": 1000,
		"home/user/.cache/font": 1000, "home/user/stray": 65534, "tool": 0} {
		fi, err := os.Lstat(filepath.Join(layer, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want || st.Gid != want {
			t.Errorf("%s: owner %d:%d in the image, want %d:%d", p, st.Uid, st.Gid, want, want)
		}
	}
}

// TestCommitKeepsSetuidBits: a setuid or setgid file, a setgid directory and
// a sticky one a session's root made keep those bits in the committed
// layer, owned by the ids the session saw.
func TestCommitKeepsSetuidBits(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	const base = 300000
	upper := t.TempDir()
	must(t, os.Chown(upper, base, base))
	must(t, os.MkdirAll(filepath.Join(upper, "usr/bin"), 0o755))
	must(t, os.MkdirAll(filepath.Join(upper, "srv/shared"), 0o755))
	must(t, os.MkdirAll(filepath.Join(upper, "srv/drop"), 0o755))
	must(t, os.WriteFile(filepath.Join(upper, "usr/bin/su-tool"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.WriteFile(filepath.Join(upper, "usr/bin/sg-tool"), []byte("#!/bin/sh\n"), 0o755))
	modes := map[string]os.FileMode{
		"usr/bin/su-tool": 0o755 | os.ModeSetuid,
		"usr/bin/sg-tool": 0o755 | os.ModeSetgid,
		"srv/shared":      0o775 | os.ModeSetgid | os.ModeDir,
		"srv/drop":        0o777 | os.ModeSticky | os.ModeDir,
	}
	for _, p := range []string{"usr", "usr/bin", "srv", "usr/bin/su-tool", "usr/bin/sg-tool", "srv/shared", "srv/drop"} {
		must(t, os.Lchown(filepath.Join(upper, p), base, base))
	}
	// chown clears setuid and setgid bits: set them last, as chmod in the
	// session does.
	for p, m := range modes {
		must(t, os.Chmod(filepath.Join(upper, p), m))
	}
	got, err := s.Commit(ctx, "acme", nil, Upper{Dir: upper, Shift: IDShift{Base: base, Size: 65536}}, "team/suid:v1")
	if err != nil {
		t.Fatal(err)
	}
	layer := got.Layers[len(got.Layers)-1]
	for p, want := range modes {
		fi, err := os.Lstat(filepath.Join(layer, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v in the image, want %v", p, fi.Mode(), want)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s: owner %d:%d in the image, want the session's root 0:0", p, st.Uid, st.Gid)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCommitOfATooDeepTreeSaysSo commits a layer whose directories nest
// deeper than the node can name a path (a session makes them one relative
// step at a time): the commit is refused with FailedPrecondition saying so,
// naming neither the node's paths nor failing as an internal error.
func TestCommitOfATooDeepTreeSaysSo(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	upper := t.TempDir()
	fd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	for range 2100 {
		must(t, unix.Mkdirat(fd, "dd", 0o755))
		next, err := unix.Openat(fd, "dd", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
	t.Cleanup(func() { _ = os.RemoveAll(upper) })
	_, err = s.Commit(ctx, "acme", nil, Upper{Dir: upper}, "deep:v1")
	wantCode(t, err, codes.FailedPrecondition)
	if strings.Contains(err.Error(), upper) || !strings.Contains(err.Error(), "deep") {
		t.Fatalf("error %q: want it to say the tree is too deep, without the node's path", err)
	}
}
