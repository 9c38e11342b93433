package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// The copy driver: a sandbox over a workspace where no overlay mounts.
func TestCopyDriver(t *testing.T) {
	ctx := context.Background()
	h, ws, sb := workspaceHarness(t, DriverCopy, map[string]string{"keep.txt": "same\n", "edit.txt": "old\n", "gone.txt": "bye\n", "sub/deep.txt": "deep\n"})
	if sb.GetDriver() != "copy" {
		t.Fatalf("driver %q, want copy", sb.GetDriver())
	}
	root := sb.GetRootDir()
	if ok, _ := overlay.IsMounted(root); ok {
		t.Fatal("a copy is mounted")
	}
	if got, err := os.ReadFile(filepath.Join(root, "sub", "deep.txt")); err != nil || string(got) != "deep\n" {
		t.Fatalf("copy has %q %v", got, err)
	}

	res := h.mustExec(t, "ws", "sh", "-c", "echo new > edit.txt && rm gone.txt && echo hi > made.txt && cat keep.txt")
	if res.exit.GetExitCode() != 0 || res.stdout != "same\n" {
		t.Fatalf("exec: %+v", res)
	}
	// Writes land in the copy; the workspace is untouched.
	for p, want := range map[string]string{"edit.txt": "old\n", "gone.txt": "bye\n"} {
		if got, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(got) != want {
			t.Fatalf("workspace %s = %q %v", p, got, err)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "made.txt")); !os.IsNotExist(err) {
		t.Fatalf("workspace gained made.txt: %v", err)
	}
	list, err := h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(list.GetChanges()), []string{"MODIFIED edit.txt", "DELETED gone.txt", "ADDED made.txt"}; !slices.Equal(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}

	// A copy has no layer to snapshot.
	_, err = h.client.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: "ws"})
	wantCode(t, err, codes.FailedPrecondition)

	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "ws"}); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, h.cfg.Root)
	if got, err := os.ReadFile(filepath.Join(ws, "edit.txt")); err != nil || string(got) != "old\n" {
		t.Fatalf("workspace after delete: %q %v", got, err)
	}
}

// What FUSE would fail at, a copy still does; the driver is reported.
func TestFallsBackToCopyWhenNoOverlayMounts(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{Drivers: []overlay.Driver{refusing{}, overlay.FUSE{Binary: "/nonexistent/fuse-overlayfs"}, overlay.Copy{}}})
	sb := h.create(t, "copied", "")
	if sb.GetDriver() != "copy" {
		t.Fatalf("driver %q", sb.GetDriver())
	}
	if _, err := os.Stat(filepath.Join(sb.GetRootDir(), "Desktop")); err != nil {
		t.Fatalf("base layout not copied: %v", err)
	}
}

func TestCopyKeepsModesLinksOwnersAndTimes(t *testing.T) {
	ctx := context.Background()
	src, dst := t.TempDir(), t.TempDir()
	old := time.Date(2020, 1, 2, 3, 4, 5, 678901234, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(src, "private"), 0o700))
	must(os.WriteFile(filepath.Join(src, "private", "key"), []byte("k"), 0o600))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(src, "run.sh"), 0o755|os.ModeSetgid))
	must(os.Symlink("run.sh", filepath.Join(src, "link")))
	must(os.Symlink("/etc/passwd", filepath.Join(src, "outside")))
	must(os.WriteFile(filepath.Join(src, "theirs"), []byte("t"), 0o644))
	must(os.Lchown(filepath.Join(src, "theirs"), 1234, 4321))
	must(os.WriteFile(filepath.Join(src, "mine"), []byte("m"), 0o644))
	must(os.Lchown(filepath.Join(src, "mine"), 1000, 1000))
	must(os.Chtimes(filepath.Join(src, "run.sh"), old, old))

	l := overlay.Layers{Lower: src, Upper: filepath.Join(dst, "upper"), Work: filepath.Join(dst, "work"), Merged: filepath.Join(dst, "merged"), Owner: &overlay.Owner{UID: 1000, GID: 1000}}
	for _, d := range []string{l.Upper, l.Work, l.Merged} {
		must(os.Mkdir(d, 0o755))
	}
	must(overlay.Copy{}.Mount(ctx, l))

	check := func(rel string, mode os.FileMode, uid, gid uint32) {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(l.Merged, rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != mode || st.Uid != uid || st.Gid != gid {
			t.Errorf("%s: mode %v owner %d:%d, want %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid, mode, uid, gid)
		}
	}
	check("private", os.ModeDir|0o700, 0, 0)
	check("private/key", 0o600, 0, 0)
	check("run.sh", 0o755|os.ModeSetgid, 0, 0)
	check("theirs", 0o644, 1234, 4321)
	check("mine", 0o644, 0, 0) // the owner's files are root's in the sandbox
	if fi, err := os.Stat(filepath.Join(l.Merged, "run.sh")); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("mtime %v %v, want %v", fi.ModTime(), err, old)
	}
	for link, want := range map[string]string{"link": "run.sh", "outside": "/etc/passwd"} {
		if got, err := os.Readlink(filepath.Join(l.Merged, link)); err != nil || got != want {
			t.Errorf("%s -> %q %v", link, got, err)
		}
	}

	// Mounting again (an adopted sandbox) keeps what the copy holds.
	must(os.WriteFile(filepath.Join(l.Merged, "work.txt"), []byte("keep"), 0o644))
	must(overlay.Copy{}.Mount(ctx, l))
	if _, err := os.Stat(filepath.Join(l.Merged, "work.txt")); err != nil {
		t.Fatalf("remount lost the sandbox's work: %v", err)
	}
}

func TestReconcileAdoptsCopy(t *testing.T) {
	cfg := testConfig(t)
	cfg.Driver = DriverCopy
	ctx := context.Background()
	crashed, err := New(ctx, cfg, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := crashed.createSandbox(ctx, "kept", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.createSandbox(ctx, "dropped", ""); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.merged(), "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The default chain must not mount an overlay over an adopted copy.
	cfg.Driver = DriverAuto
	h := newHarness(t, cfg, Deps{})
	if removed, err := h.svc.Reconcile(ctx, func(id string) bool { return id == "kept" }); err != nil || !slices.Equal(removed, []string{"dropped"}) {
		t.Fatalf("Reconcile: %v %v", removed, err)
	}
	got, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "kept", Path: "f"})
	if err != nil || string(got.GetContent()) != "x" {
		t.Fatalf("adopted copy: %q %v", got.GetContent(), err)
	}
	if ok, _ := overlay.IsMounted(b.merged()); ok {
		t.Fatal("adopted copy got mounted over")
	}
	sb, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: "kept"})
	if err != nil || sb.GetSandbox().GetDriver() != "copy" {
		t.Fatalf("GetSandbox: %v %v", sb, err)
	}
}
