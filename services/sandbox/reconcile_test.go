package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
	"github.com/deskgrid/deskgrid/services/sandbox/jail"
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
			waitFor(t, "command to run", func() bool { return len(hostProcessesWith("sleep\x001618")) > 0 })

			h := newHarness(t, cfg, Deps{})
			removed, err := h.svc.Reconcile(ctx, nil)
			if err != nil || len(removed) != 1 || removed[0] != "orphan" {
				t.Fatalf("Reconcile = %v, %v", removed, err)
			}
			if err := <-done; err != nil {
				t.Logf("leftover command ended: %v", err)
			}
			waitFor(t, "leftover command to die", func() bool { return len(hostProcessesWith("sleep\x001618")) == 0 })
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
	waitFor(t, "command to die", func() bool { return len(hostProcessesWith("sleep\x001414")) == 0 })
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
	waitFor(t, "the started program to die", func() bool { return !alive(p.GetPid()) })
	if ids, err := h.svc.cgroups.List(); err != nil || len(ids) != 0 {
		t.Fatalf("cgroups left: %v %v", ids, err)
	}
}
