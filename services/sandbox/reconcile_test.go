package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

func cgroupLimits() cgroup.Limits { return cgroup.Limits{Pids: 8} }

// A crashed node agent leaves mounts and running commands; Reconcile in the
// next process kills the commands and removes the rest, for either driver.
func TestReconcileKillsLeftoverProcesses(t *testing.T) {
	for _, driver := range []string{DriverKernel, DriverFUSE} {
		t.Run(driver, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Driver = driver
			ctx := context.Background()
			scrubOnCleanup(t, cfg.Root)
			crashed, err := New(ctx, cfg, Deps{Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			b, err := crashed.createSandbox(ctx, "orphan", "")
			if err != nil {
				t.Fatal(err)
			}
			// A command whose caller is gone: only the leftover bwrap remains.
			started := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := jail.Run(context.Background(), jail.Spec{HomeDir: b.merged(), Argv: []string{"sh", "-c", "echo up; exec sleep 1618"}}, 0x7fffffff, 0, func(jail.Stream, []byte) error {
					close(started)
					return nil
				})
				done <- err
			}()
			<-started
			testkit.Eventually(t, 10*time.Second, func() bool { return len(hostProcessesWith("sleep\x001618")) > 0 }, "command to run")

			h := newHarness(t, cfg, Deps{})
			removed, err := h.svc.Reconcile(ctx, nil)
			if err != nil || len(removed) != 1 || removed[0] != "orphan" {
				t.Fatalf("Reconcile = %v, %v", removed, err)
			}
			if err := <-done; err != nil {
				t.Logf("leftover command ended: %v", err)
			}
			testkit.Eventually(t, 10*time.Second, func() bool { return len(hostProcessesWith("sleep\x001618")) == 0 }, "leftover command to die")
			assertNothingLeft(t, h.cfg.Root)
		})
	}
}

func TestConcurrentCreateOneWins(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	var wg sync.WaitGroup
	codesSeen := make(chan codes.Code, 8)
	for range 8 {
		wg.Go(func() {
			_, err := h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: "race"})
			codesSeen <- statusCode(err)
		})
	}
	wg.Wait()
	close(codesSeen)
	counts := map[codes.Code]int{}
	for c := range codesSeen {
		counts[c]++
	}
	if counts[codes.OK] != 1 || counts[codes.AlreadyExists] != 7 {
		t.Fatalf("codes %v", counts)
	}
}

func TestConcurrentDeleteAndUse(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "busy", "")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 20 {
				_, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "busy", Path: filepath.Join("w", string(rune('a'+i))), Content: []byte("x")})
				if c := statusCode(err); c != codes.OK && c != codes.NotFound {
					t.Errorf("WriteFile during delete: %v", err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 3 {
			if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "busy"}); err != nil {
				t.Errorf("DeleteSandbox: %v", err)
			}
		}
	})
	wg.Wait()
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "busy"}); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, h.cfg.Root)
}

func TestExecCancelledByClientKillsCommand(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "cancel", "")
	ctx, cancel := context.WithCancel(context.Background())
	st, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SessionId: "cancel", Argv: []string{"sh", "-c", "echo up; sleep 1414"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	testkit.Eventually(t, 10*time.Second, func() bool { return len(hostProcessesWith("sleep\x001414")) == 0 }, "command to die")
}

func TestExecDisplayMissingSocket(t *testing.T) {
	cfg := testConfig(t)
	cfg.X11SocketDir = t.TempDir()
	h := newHarness(t, cfg, Deps{DisplayLookup: func(string) (string, string, bool) { return ":7", "", true }})
	h.create(t, "nodisplay", "")
	_, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "nodisplay", Argv: []string{"true"}})
	wantCode(t, err, codes.FailedPrecondition)
}

func TestNewRefusesBadConfig(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]Config{
		"unknown driver":    {Root: t.TempDir(), Driver: "zfs"},
		"comma in root":     {Root: filepath.Join(t.TempDir(), "a,b")},
		"missing workspace": {Root: t.TempDir(), WorkspaceRoots: []string{"/does/not/exist"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(ctx, cfg, Deps{Logger: quietLogger()}); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
	// The default base is made with an empty home layout.
	root := t.TempDir()
	svc, err := New(ctx, Config{Root: root}, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(root, "base", ".config")); err != nil || !st.IsDir() {
		t.Fatalf("base layout: %v", err)
	}
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func statusCode(err error) codes.Code { return status.Code(err) }

// A crashed node leaves started programs in their cgroups, and cgroups
// whose sandbox dir is already gone; Reconcile kills and removes both.
func TestReconcileRemovesLeftoverCgroups(t *testing.T) {
	cfg := testConfig(t)
	ctx := context.Background()
	scrubOnCleanup(t, cfg.Root)
	crashed, err := New(ctx, cfg, Deps{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.createSandbox(ctx, "orphan", ""); err != nil {
		t.Fatal(err)
	}
	p, err := crashed.startProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "orphan", Argv: []string{"sleep", "2718"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.cgroups.Create("dirless", cgroupLimits()); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, Deps{})
	removed, err := h.svc.Reconcile(ctx, nil)
	slices.Sort(removed)
	if err != nil || !slices.Equal(removed, []string{"dirless", "orphan"}) {
		t.Fatalf("Reconcile = %v, %v", removed, err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return !alive(p.GetPid()) }, "the started program to die")
	if ids, err := h.svc.cgroups.List(); err != nil || len(ids) != 0 {
		t.Fatalf("cgroups left: %v %v", ids, err)
	}
}

// runc killed mid-start (with the node agent that ran it) leaves the
// container's init in the session's cgroup, frozen when runc was freezing
// the group (it does while it kills what is in it), its state unwritten
// (runc knows no such container but refuses the id), the bundle with its
// root filesystem bound and the X socket dir. Reconcile thaws, kills and
// removes all of it, in every cgroup hierarchy runc made the group in
// (runc refuses to start in a frozen group: "container's cgroup
// unexpectedly frozen"), and the closed service leaves no directory under
// /run/deskgrid/containers; a session the next process keeps gets a
// container that starts.
func TestReconcileContainerKilledMidStart(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "removed", true: "kept"}[keep], func(t *testing.T) {
			ctx := context.Background()
			store, err := image.New(ctx, image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			importImage(t, store, busyboxImage(t, ""), "test/busybox:root")
			cfg := testConfig(t)
			scrubOnCleanup(t, cfg.Root)
			crashed, err := New(ctx, cfg, Deps{Logger: quietLogger(), Images: store})
			if err != nil {
				t.Fatal(err)
			}
			im, err := store.Resolve(ctx, "", "test/busybox:root")
			if err != nil {
				t.Fatal(err)
			}
			b, err := crashed.create(ctx, "midstart", "", Limits{}, "", false, im)
			if err != nil {
				t.Fatal(err)
			}
			// What runc killed mid-start leaves: its init frozen in the
			// group (runc freezes a group while it kills what is in it) and
			// its state never written, so that runc knows no such container.
			rt := crashed.runtime()
			if err := b.cg.Freeze(); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(rt.Root, b.cid, "state.json")); err != nil {
				t.Fatal(err)
			}
			if _, err := rt.State(ctx, b.cid); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("runc still knows the container: %v", err)
			}
			leftover, _ := b.cg.Pids()
			if !b.cg.Frozen() || len(leftover) == 0 {
				t.Fatalf("no frozen cgroup with the container's init: frozen %v, pids %v", b.cg.Frozen(), leftover)
			}
			cgPath := b.cg.Path()

			h := newHarness(t, cfg, Deps{Images: store})
			removed, err := h.svc.Reconcile(ctx, func(string) bool { return keep })
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			for _, pid := range leftover {
				if alive(int64(pid)) && !gone(pid) {
					t.Errorf("runc's init %d survived Reconcile", pid)
				}
			}
			if keep {
				if len(removed) != 0 {
					t.Fatalf("removed %v, want it kept", removed)
				}
				if got := h.sh(t, "midstart", "echo up; id -u"); got != "up\n0" {
					t.Fatalf("in the kept session: %q", got)
				}
				if h.svc.boxes["midstart"].cg.Frozen() {
					t.Fatal("the kept session's cgroup is still frozen")
				}
				if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "midstart"}); err != nil {
					t.Fatal(err)
				}
			} else if !slices.Equal(removed, []string{"midstart"}) {
				t.Fatalf("removed %v, want [midstart]", removed)
			}
			assertNoContainerMounts(t, h.svc.cfg.ContainerDir)
			if ents, _ := os.ReadDir(h.svc.runtime().Root); len(ents) > 0 {
				t.Errorf("runc state left: %v", ents)
			}
			ctrls, _ := os.ReadDir("/sys/fs/cgroup")
			for _, c := range ctrls {
				for _, p := range []string{filepath.Join("/sys/fs/cgroup", c.Name(), cgPath), filepath.Join("/sys/fs/cgroup", cgPath)} {
					if _, err := os.Stat(p); err == nil {
						t.Errorf("cgroup left: %s", p)
					}
				}
			}
			if err := h.svc.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(h.svc.cfg.ContainerDir); !errors.Is(err, fs.ErrNotExist) {
				ents, _ := os.ReadDir(h.svc.cfg.ContainerDir)
				t.Errorf("the service's container dir is left after Close: %v %v", err, ents)
			}
		})
	}
}

// gone waits until pid is dead or a zombie (reaped by whoever adopted it).
func gone(pid int) bool {
	ok := false
	deadline := time.Now().Add(5 * time.Second)
	for !ok && time.Now().Before(deadline) {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		f := strings.Fields(string(data))
		ok = err != nil || len(f) > 2 && f[2] == "Z"
		if !ok {
			time.Sleep(10 * time.Millisecond)
		}
	}
	return ok
}
