package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
)

func TestFilesRoundTrip(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "f", "")
	ctx := context.Background()
	if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "f", Path: "notes/today.md", Content: []byte("# hi")}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "f", Path: "run.sh", Content: []byte("#!/bin/sh\necho ran\n"), Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	got, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "f", Path: "notes/today.md"})
	if err != nil || string(got.GetContent()) != "# hi" || got.GetMode() != 0o644 {
		t.Fatalf("ReadFile: %v %v", got, err)
	}
	// The sandboxed user owns and can run what the file API wrote.
	if res := h.mustExec(t, "f", "sh", "-c", "./run.sh && stat -c %U notes/today.md && echo more >> notes/today.md"); res.stdout != "ran\nuser\n" {
		t.Fatalf("exec: %+v", res)
	}
	list, err := h.client.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: "f"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fi := range list.GetFiles() {
		names = append(names, fi.GetName())
		if fi.GetName() == "notes" && !fi.GetIsDir() {
			t.Error("notes is not a dir")
		}
		if fi.GetName() == "run.sh" && (fi.GetMode() != 0o755 || fi.GetSize() != 19 || fi.GetModifyTime() == nil) {
			t.Errorf("run.sh: %v", fi)
		}
	}
	if got := strings.Join(names, ","); got != ".cache,.config,.local,Desktop,notes,run.sh" {
		t.Fatalf("ListFiles: %s", got)
	}
	// Reading a directory as a file says so by its reason, which callers
	// decide on (never the wording).
	if _, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "f", Path: "notes"}); status.Code(err) != codes.InvalidArgument || errinfo.Reason(err) != errinfo.NotRegularFile {
		t.Fatalf("ReadFile of a directory: %v (reason %q), want InvalidArgument with reason %s", err, errinfo.Reason(err), errinfo.NotRegularFile)
	}
	if _, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "f", Path: "notes/missing"}); errinfo.Reason(err) != "" {
		t.Fatalf("ReadFile of a missing file has reason %q", errinfo.Reason(err))
	}
}

func TestFilesRefuseEscapes(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxFileBytes = 1024
	h := newHarness(t, cfg, Deps{})
	sb := h.create(t, "esc", "")
	ctx := context.Background()
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	if err := os.WriteFile(canary, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Planted from inside, as an agent would.
	h.mustExec(t, "esc", "sh", "-c", strings.Join([]string{
		"ln -s /etc/passwd passwd",
		"ln -s ../../ up",
		"ln -s " + outside + " out",
		"ln -s " + canary + " canary",
		"ln -s /proc/self/root procroot",
		"mkfifo fifo",
		"head -c 2000 /dev/zero > big",
	}, " && "))
	if err := os.Symlink(sb.GetRootDir(), filepath.Join(sb.GetRootDir(), "self")); err != nil {
		t.Fatal(err)
	}

	read := func(p string) error {
		_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "esc", Path: p})
		return err
	}
	write := func(p string) error {
		_, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "esc", Path: p, Content: []byte("pwned")})
		return err
	}
	list := func(p string) error {
		_, err := h.client.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: "esc", Path: p})
		return err
	}
	for _, tc := range []struct {
		name string
		op   func(string) error
		path string
		code codes.Code
	}{
		{"read passwd link", read, "passwd", codes.PermissionDenied},
		{"read up link", read, "up/upper/big", codes.PermissionDenied},
		{"read out link", read, "out/canary", codes.PermissionDenied},
		{"read magic link", read, "procroot/etc/hostname", codes.PermissionDenied},
		{"read host path link", read, "self/big", codes.PermissionDenied},
		{"read dotdot", read, "../upper/big", codes.InvalidArgument},
		{"read absolute", read, "/etc/passwd", codes.InvalidArgument},
		{"read empty", read, "", codes.InvalidArgument},
		{"read missing", read, "nope.txt", codes.NotFound},
		{"read fifo", read, "fifo", codes.InvalidArgument},
		{"read dir", read, "Desktop", codes.InvalidArgument},
		{"read too big", read, "big", codes.ResourceExhausted},
		{"write through dir link", write, "out/new", codes.PermissionDenied},
		{"write through up link", write, "up/x", codes.PermissionDenied},
		{"write dotdot", write, "a/../../x", codes.InvalidArgument},
		{"write absolute", write, "/tmp/x", codes.InvalidArgument},
		{"write dir", write, "Desktop", codes.InvalidArgument},
		{"list up link", list, "up", codes.PermissionDenied},
		{"list dotdot", list, "..", codes.InvalidArgument},
		{"list file", list, "big", codes.InvalidArgument},
		{"list missing", list, "nope", codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.op(tc.path), tc.code)
		})
	}
	_, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "esc", Path: "huge", Content: make([]byte, 2000)})
	wantCode(t, err, codes.ResourceExhausted)
	_, err = h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "esc", Path: "suid", Mode: 0o4755})
	wantCode(t, err, codes.InvalidArgument)

	// Writing to a symlink replaces the link; its target is untouched.
	if err := write("canary"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(canary); string(got) != "untouched" {
		t.Fatalf("canary: %q", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("outside dir has %d entries", len(entries))
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(sb.GetRootDir(), "canary"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Fatalf("canary link not replaced: %v", err)
	}
}

// A workspace that belongs to an ordinary host user is editable from inside
// the sandbox and through the file API, and what they write belongs to that
// user on the host.
func TestWorkspaceOfOrdinaryUser(t *testing.T) {
	const uid, gid = 1000, 1000
	roots := t.TempDir()
	ws := filepath.Join(roots, "alice")
	if err := os.MkdirAll(filepath.Join(ws, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "src", "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, filepath.Join(ws, "src"), filepath.Join(ws, "src", "main.go")} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	cfg.WorkspaceRoots = []string{roots}
	h := newHarness(t, cfg, Deps{})
	sb := h.create(t, "alice", ws)
	if sb.GetDriver() != "fuse-overlayfs" {
		t.Errorf("driver %q, want fuse-overlayfs (kernel overlayfs cannot remap owners)", sb.GetDriver())
	}
	res := h.mustExec(t, "alice", "sh", "-c", "echo '// edited' >> src/main.go && touch new.txt && mkdir out && stat -c %U src/main.go")
	if res.exit.GetExitCode() != 0 || res.stdout != "user\n" {
		t.Fatalf("exec: %+v", res)
	}
	if _, err := h.client.WriteFile(context.Background(), &sandboxv1.WriteFileRequest{SessionId: "alice", Path: "out/api.txt", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	upper := filepath.Join(filepath.Dir(sb.GetRootDir()), "upper")
	for _, p := range []string{"src/main.go", "new.txt", "out", "out/api.txt"} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(upper, p), &st); err != nil || st.Uid != uid || st.Gid != gid {
			t.Errorf("%s in upper: uid %d gid %d, %v; want %d", p, st.Uid, st.Gid, err, uid)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "src", "main.go")); string(got) != "package main\n" {
		t.Fatalf("workspace changed: %q", got)
	}

	// With only the kernel driver the node says why it cannot serve this.
	cfg2 := testConfig(t)
	cfg2.WorkspaceRoots = []string{roots}
	cfg2.Driver = DriverKernel
	h2 := newHarness(t, cfg2, Deps{})
	_, err := h2.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: "alice", Workspace: ws})
	wantCode(t, err, codes.FailedPrecondition)
}
