package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// harness is a Service behind a real gRPC server.
type harness struct {
	svc    *Service
	client sandboxv1.SandboxServiceClient
	cfg    Config
}

var testGroups atomic.Int64

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Root = filepath.Join(t.TempDir(), "sandbox")
	// A parent per test: Reconcile in one test must not see another's groups.
	cfg.CgroupParent = fmt.Sprintf("deskgrid/test-%d-%d", os.Getpid(), testGroups.Add(1))
	cfg.Cgroups = CgroupsRequired
	return cfg
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHarness(t testing.TB, cfg Config, deps Deps) *harness {
	t.Helper()
	ctx := context.Background()
	if deps.Logger == nil {
		deps.Logger = quietLogger()
	}
	svc, err := New(ctx, cfg, deps)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// The service closes after the server stops and the client is gone
	// (cleanups run last-in first-out).
	t.Cleanup(func() {
		if err := svc.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNothingLeft(t, svc.cfg.Root)
		if svc.cgroups != nil {
			if ids, err := svc.cgroups.List(); err != nil || len(ids) > 0 {
				t.Errorf("cgroups left: %v %v", ids, err)
			}
			for _, c := range []string{"memory", "pids", "freezer"} {
				if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, svc.cgroups.Parent)); err == nil {
					t.Errorf("cgroup parent %s left in %s", svc.cgroups.Parent, c)
				}
			}
		}
	})
	conn := grpcservertest.Serve(t, svc.Register, grpcservertest.Options{Bufconn: true})
	return &harness{svc: svc, client: sandboxv1.NewSandboxServiceClient(conn), cfg: svc.cfg}
}

// assertNothingLeft checks that no mount and no sandbox dir remain.
func assertNothingLeft(t testing.TB, root string) {
	t.Helper()
	ms, err := overlay.Mounts(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) > 0 {
		t.Errorf("mounts left under %s: %v", root, ms)
	}
	entries, err := os.ReadDir(filepath.Join(root, "sandboxes"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		t.Errorf("sandbox dirs left: %d (first %s)", len(entries), entries[0].Name())
	}
}

// scrubOnCleanup removes, whatever a test did, the mounts and processes it
// left under root, so a failing test cannot leak them into the next.
func scrubOnCleanup(t testing.TB, root string) {
	t.Cleanup(func() {
		killTagged(root)
		ms, _ := overlay.Mounts(root)
		for _, m := range ms {
			_ = unix.Unmount(m.Point, unix.MNT_DETACH)
		}
	})
}

func (h *harness) create(t testing.TB, id, workspace string) *sandboxv1.Sandbox {
	t.Helper()
	resp, err := h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: id, Workspace: workspace})
	if err != nil {
		t.Fatalf("CreateSandbox(%s): %v", id, err)
	}
	return resp.GetSandbox()
}

func wantCode(t testing.TB, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v (%v), want code %v", status.Code(err), err, code)
	}
}

func TestWritesLandInUpperLowerUntouched(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	sb := h.create(t, "s1", "")
	if sb.GetDriver() != "overlayfs" {
		t.Errorf("driver %q, want overlayfs", sb.GetDriver())
	}
	if sb.GetLowerDir() != h.cfg.BaseDir {
		t.Errorf("lower %q, want %q", sb.GetLowerDir(), h.cfg.BaseDir)
	}
	if _, err := os.Stat(filepath.Join(sb.GetRootDir(), "Desktop")); err != nil {
		t.Errorf("base layout not visible: %v", err)
	}
	if err := os.WriteFile(filepath.Join(sb.GetRootDir(), "note.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(sb.GetRootDir())
	got, err := os.ReadFile(filepath.Join(dir, "upper", "note.txt"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("upper has %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.BaseDir, "note.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lower changed: %v", err)
	}
	m, err := readMeta(dir)
	if err != nil || m.SessionID != "s1" || m.Lower != h.cfg.BaseDir || m.Driver != "overlayfs" || m.Created.IsZero() {
		t.Fatalf("meta %+v, %v", m, err)
	}
	get, err := h.client.GetSandbox(context.Background(), &sandboxv1.GetSandboxRequest{SessionId: "s1"})
	if err != nil || get.GetSandbox().GetRootDir() != sb.GetRootDir() {
		t.Fatalf("GetSandbox: %v %v", get, err)
	}
	_, err = h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: "s1"})
	wantCode(t, err, codes.AlreadyExists)
}

func TestSessionsDoNotSeeEachOther(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	a := h.create(t, "a", "")
	b := h.create(t, "b", "")
	if err := os.WriteFile(filepath.Join(a.GetRootDir(), "secret"), []byte("a's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.GetRootDir(), "secret")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("b sees a's file: %v", err)
	}
	list, err := h.client.ListSandboxes(context.Background(), &sandboxv1.ListSandboxesRequest{})
	if err != nil || len(list.GetSandboxes()) != 2 || list.GetSandboxes()[0].GetSessionId() != "a" {
		t.Fatalf("ListSandboxes: %v %v", list, err)
	}
}

func TestWorkspace(t *testing.T) {
	tmp := t.TempDir()
	roots := filepath.Join(tmp, "workspaces")
	ws := filepath.Join(roots, "project")
	outside := filepath.Join(tmp, "outside")
	for _, d := range []string{ws, outside, filepath.Join(roots, "with,comma")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "main.go"), []byte("package main"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(roots, "sneaky")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.WorkspaceRoots = []string{roots}
	h := newHarness(t, cfg, Deps{})

	sb := h.create(t, "ws", ws)
	if sb.GetLowerDir() != ws {
		t.Errorf("lower %q, want %q", sb.GetLowerDir(), ws)
	}
	if err := os.WriteFile(filepath.Join(sb.GetRootDir(), "main.go"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "main.go")); string(got) != "package main" {
		t.Fatalf("workspace changed: %q", got)
	}

	for _, tc := range []struct {
		name, workspace string
		code            codes.Code
	}{
		{"outside roots", outside, codes.PermissionDenied},
		{"symlink leading out", filepath.Join(roots, "sneaky"), codes.PermissionDenied},
		{"dotdot out", roots + "/../outside", codes.PermissionDenied},
		{"missing", filepath.Join(roots, "nope"), codes.InvalidArgument},
		{"relative", "workspaces/project", codes.InvalidArgument},
		{"comma in path", filepath.Join(roots, "with,comma"), codes.InvalidArgument},
		{"host root", "/", codes.PermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: "refused", Workspace: tc.workspace})
			wantCode(t, err, tc.code)
		})
	}
}

func TestDeleteLeavesNothing(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	sb := h.create(t, "gone", "")
	if ok, err := overlay.IsMounted(sb.GetRootDir()); err != nil || !ok {
		t.Fatalf("not mounted: %v %v", ok, err)
	}
	ctx := context.Background()
	for range 2 { // idempotent
		if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "gone"}); err != nil {
			t.Fatalf("DeleteSandbox: %v", err)
		}
	}
	assertNothingLeft(t, h.cfg.Root)
	_, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: "gone"})
	wantCode(t, err, codes.NotFound)
	if _, err := os.Stat(filepath.Dir(sb.GetRootDir())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir left: %v", err)
	}
	// The id is free again.
	h.create(t, "gone", "")
}

func TestReconcileAfterCrash(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	scrubOnCleanup(t, cfg.Root)
	crashed, err := New(ctx, cfg, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"dead", "alive", "no-meta"} {
		if _, err := crashed.createSandbox(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Mounted but never recorded, as a crash between mount and meta leaves.
	if err := os.Remove(filepath.Join(crashed.sandboxesDir(), "no-meta", "meta.json")); err != nil {
		t.Fatal(err)
	}
	// A half-made dir without a mount, as a crash during create leaves.
	if err := os.MkdirAll(filepath.Join(crashed.sandboxesDir(), "half", "upper"), 0o755); err != nil {
		t.Fatal(err)
	}
	alive := filepath.Join(crashed.sandboxesDir(), "alive", "merged")
	if err := os.WriteFile(filepath.Join(alive, "work.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	crashed = nil // dropped without Close, as a killed process would

	h := newHarness(t, cfg, Deps{})
	// Creating over a leftover is refused until it is reconciled.
	_, err = h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "dead"})
	wantCode(t, err, codes.AlreadyExists)

	removed, err := h.svc.Reconcile(ctx, func(id string) bool { return id == "alive" || id == "half" || id == "no-meta" })
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	slices.Sort(removed)
	if !slices.Equal(removed, []string{"dead", "half", "no-meta"}) {
		t.Fatalf("removed %v", removed)
	}
	if ok, _ := overlay.IsMounted(filepath.Join(h.svc.sandboxesDir(), "dead", "merged")); ok {
		t.Fatal("dead sandbox still mounted")
	}
	got, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "alive", Path: "work.txt"})
	if err != nil || string(got.GetContent()) != "keep me" {
		t.Fatalf("adopted sandbox: %v %v", got, err)
	}
	// Nothing left for a second pass.
	if removed, err := h.svc.Reconcile(ctx, nil); err != nil || len(removed) != 0 {
		t.Fatalf("second Reconcile: %v %v", removed, err)
	}
	h.create(t, "dead", "")
}

func TestReconcileRemountsAfterReboot(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	scrubOnCleanup(t, cfg.Root)
	first, err := New(ctx, cfg, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := first.createSandbox(ctx, "kept", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.merged(), "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := overlay.Unmount(ctx, b.merged()); err != nil { // as a reboot would
		t.Fatal(err)
	}
	h := newHarness(t, cfg, Deps{})
	if removed, err := h.svc.Reconcile(ctx, func(string) bool { return true }); err != nil || len(removed) != 0 {
		t.Fatalf("Reconcile: %v %v", removed, err)
	}
	if got, err := os.ReadFile(filepath.Join(b.merged(), "f")); err != nil || string(got) != "x" {
		t.Fatalf("after remount: %q %v", got, err)
	}
}

func TestValidation(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	ctx := context.Background()
	for _, tc := range []struct {
		id   string
		code codes.Code
	}{
		{"", codes.InvalidArgument},
		{"Upper", codes.InvalidArgument},
		{"under_score", codes.InvalidArgument},
		{"a/b", codes.InvalidArgument},
		{"../x", codes.InvalidArgument},
		{"..", codes.InvalidArgument},
		{"dot.ted", codes.InvalidArgument},
		{"space d", codes.InvalidArgument},
		{"ünï", codes.InvalidArgument},
		{strings.Repeat("a", 65), codes.InvalidArgument},
		{strings.Repeat("a", 64), codes.OK},
		{"ok-1", codes.OK},
	} {
		t.Run(tc.id, func(t *testing.T) {
			_, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: tc.id})
			wantCode(t, err, tc.code)
			_, err = h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: tc.id})
			if tc.code == codes.OK {
				wantCode(t, err, codes.OK)
			} else {
				wantCode(t, err, tc.code)
			}
		})
	}
	for _, op := range []func() error{
		func() error {
			_, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: "unknown"})
			return err
		},
		func() error {
			_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "unknown", Path: "x"})
			return err
		},
		func() error {
			_, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "unknown", Path: "x"})
			return err
		},
		func() error {
			_, err := h.client.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: "unknown"})
			return err
		},
		func() error {
			st, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SessionId: "unknown", Argv: []string{"true"}})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	} {
		wantCode(t, op(), codes.NotFound)
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "unknown"}); err != nil {
		t.Fatalf("DeleteSandbox of unknown: %v", err)
	}
	_, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "BAD"})
	wantCode(t, err, codes.InvalidArgument)
}

func TestCreateDeleteManyLeavesNothing(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	ctx := context.Background()
	for i := range 50 {
		id := fmt.Sprintf("many-%d", i)
		sb := h.create(t, id, "")
		if err := os.WriteFile(filepath.Join(sb.GetRootDir(), "f"), []byte(id), 0o644); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 1; i < 50; i += 2 {
		if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: fmt.Sprintf("many-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	assertNothingLeft(t, h.cfg.Root)
}

func TestCloseDeletesEverything(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	svc, err := New(ctx, cfg, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := svc.createSandbox(ctx, fmt.Sprint("c", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, svc.cfg.Root)
	if _, err := svc.createSandbox(ctx, "late", ""); !isCode(err, codes.Unavailable) {
		t.Fatalf("create after Close: %v", err)
	}
}

func isCode(err error, c codes.Code) bool {
	got, ok := codeOf(err)
	return ok && got == c
}

func TestFUSEDriver(t *testing.T) {
	cfg := testConfig(t)
	cfg.Driver = DriverFUSE
	h := newHarness(t, cfg, Deps{})
	sb := h.create(t, "fuse", "")
	if sb.GetDriver() != "fuse-overlayfs" {
		t.Fatalf("driver %q", sb.GetDriver())
	}
	if err := os.WriteFile(filepath.Join(sb.GetRootDir(), "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(sb.GetRootDir()), "upper", "f")); err != nil {
		t.Fatalf("not in upper: %v", err)
	}
	if _, err := h.client.DeleteSandbox(context.Background(), &sandboxv1.DeleteSandboxRequest{SessionId: "fuse"}); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, h.cfg.Root)
}

// refusing is a kernel that will not mount overlays, as an unprivileged host.
type refusing struct{}

func (refusing) Name() string { return "overlayfs" }
func (refusing) Mount(context.Context, overlay.Layers) error {
	return fmt.Errorf("%w: operation not permitted", overlay.ErrRefused)
}
func (refusing) Unmount(ctx context.Context, merged string) error {
	return overlay.Unmount(ctx, merged)
}

// broken fails after mounting, so create must undo the mount.
type broken struct{ overlay.Kernel }

func (b broken) Mount(ctx context.Context, l overlay.Layers) error {
	if err := b.Kernel.Mount(ctx, l); err != nil {
		return err
	}
	_ = overlay.Unmount(ctx, l.Merged)
	return errors.New("disk on fire")
}

func TestFallsBackToFUSEWhenKernelRefuses(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{Drivers: []overlay.Driver{refusing{}, overlay.FUSE{}}})
	if sb := h.create(t, "fallback", ""); sb.GetDriver() != "fuse-overlayfs" {
		t.Fatalf("driver %q", sb.GetDriver())
	}
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{Drivers: []overlay.Driver{broken{}, overlay.FUSE{}}})
	_, err := h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: "doomed"})
	wantCode(t, err, codes.Internal)
	assertNothingLeft(t, h.cfg.Root)
	h2 := newHarness(t, testConfig(t), Deps{Drivers: []overlay.Driver{refusing{}}})
	_, err = h2.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: "doomed"})
	wantCode(t, err, codes.FailedPrecondition)
	assertNothingLeft(t, h2.cfg.Root)
}

func BenchmarkCreateDeleteSandbox(b *testing.B) {
	cfg := testConfig(b)
	ctx := context.Background()
	svc, err := New(ctx, cfg, Deps{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = svc.Close(ctx) })
	i := 0
	for b.Loop() {
		id := fmt.Sprint("bench-", i)
		i++
		if _, err := svc.createSandbox(ctx, id, ""); err != nil {
			b.Fatal(err)
		}
		if err := svc.deleteSandbox(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}
