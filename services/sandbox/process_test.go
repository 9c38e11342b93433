package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// fakeDisplay makes an X socket for display :77 and returns the lookup a
// Service uses to find it.
func fakeDisplay(t *testing.T, cfg *Config) func(string) (string, string, bool) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "X77"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	cfg.X11SocketDir = dir
	return func(string) (string, string, bool) { return ":77", "", true }
}

func alive(pid int64) bool { return unix.Kill(int(pid), 0) == nil }

func TestStartedProcessesOutliveTheCallAndDieWithTheSandbox(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, Deps{DisplayLookup: fakeDisplay(t, &cfg)})
	h.svc.cfg.X11SocketDir = cfg.X11SocketDir
	sb := h.create(t, "auto", "")
	ctx := context.Background()

	start := func(script string) *sandboxv1.Process {
		t.Helper()
		resp, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "auto", Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetProcess()
	}
	a := start(`echo "$DISPLAY" > display.txt; test -S /tmp/.X11-unix/X77 && echo socket >> display.txt; exec sleep 1000`)
	b := start(`exec sleep 1001`)
	testkit.Eventually(t, 10*time.Second, func() bool {
		data, _ := os.ReadFile(filepath.Join(sb.GetRootDir(), "display.txt"))
		return string(data) == ":77\nsocket\n"
	}, "the program to write")
	list, err := h.client.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SessionId: "auto"})
	if err != nil || len(list.GetProcesses()) != 2 {
		t.Fatalf("ListProcesses = %v, %v", list, err)
	}
	for _, p := range list.GetProcesses() {
		if p.GetState() != sandboxv1.ProcessState_PROCESS_STATE_RUNNING || !alive(p.GetPid()) {
			t.Fatalf("process %v not running", p)
		}
	}
	stopped, err := h.client.StopProcess(ctx, &sandboxv1.StopProcessRequest{SessionId: "auto", ProcessId: a.GetProcessId()})
	if err != nil || stopped.GetProcess().GetState() != sandboxv1.ProcessState_PROCESS_STATE_EXITED {
		t.Fatalf("StopProcess = %v, %v", stopped, err)
	}
	_, err = h.client.StopProcess(ctx, &sandboxv1.StopProcessRequest{SessionId: "auto", ProcessId: "p99"})
	wantCode(t, err, codes.NotFound)
	if !alive(b.GetPid()) {
		t.Fatal("the other program died too")
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "auto"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(hostProcessesWith("sleep\x001001")) == 0 }, "programs to die with the sandbox")
	if ids, _ := h.svc.cgroups.List(); len(ids) != 0 {
		t.Fatalf("cgroups left after delete: %v", ids)
	}
}

func TestLimitsFromRequestAndDefaults(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	ctx := context.Background()
	resp, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "lim", MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetSandbox().GetLimits()
	if got.GetMemoryBytes() != 256<<20 || got.GetCpuMillis() != 1000 || got.GetPids() != 512 || resp.GetSandbox().GetCgroup() != "v1" && resp.GetSandbox().GetCgroup() != "v2" {
		t.Fatalf("sandbox %v", resp.GetSandbox())
	}
	limit, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", h.svc.cgroups.Parent, "lim", "memory.limit_in_bytes"))
	if err == nil && strings.TrimSpace(string(limit)) != "268435456" {
		t.Fatalf("memory.limit_in_bytes = %s", limit)
	}
	_, err = h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "big", Pids: 1 << 40})
	wantCode(t, err, codes.InvalidArgument)
	_, err = h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "neg", CpuMillis: -1})
	wantCode(t, err, codes.InvalidArgument)
}

func (h *harness) usage(t *testing.T, id string) *sandboxv1.SandboxUsage {
	t.Helper()
	resp, err := h.client.GetSandbox(context.Background(), &sandboxv1.GetSandboxRequest{SessionId: id})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetSandbox().GetUsage()
}

// bomb forks forever in every process, shrugging off failed forks, so it
// stays at its limit rather than collapsing.
const bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"

func TestForkBombStaysInsideItsPidsLimit(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	ctx := context.Background()
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "bomb", Pids: 64}); err != nil {
		t.Fatal(err)
	}
	h.create(t, "bystander", "")
	var wg sync.WaitGroup
	var res execResult
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err = h.exec(t, &sandboxv1.ExecRequest{SessionId: "bomb", Argv: []string{"python3", "-c", bomb}, Timeout: durationpb.New(3 * time.Second)})
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return h.usage(t, "bomb").GetPids() >= 60 }, "the bomb to hit its limit")
	// The node and the other sandbox keep working while it rages.
	if got := h.mustExec(t, "bystander", "echo", "fine"); got.stdout != "fine\n" {
		t.Fatalf("bystander exec: %+v", got)
	}
	if u := h.usage(t, "bomb"); u.GetPids() > 64 {
		t.Fatalf("bomb has %d pids, limit 64", u.GetPids())
	}
	wg.Wait()
	if err != nil || !res.exit.GetTimedOut() {
		t.Fatalf("bomb exec: %+v %v", res.exit, err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return h.usage(t, "bomb").GetPids() == 0 }, "the bomb to be gone")
	// Its refused forks are counted for the node, not the bystander's.
	hits := h.svc.LimitEvents().PidsLimitHits
	if hits < 1 {
		t.Fatalf("no pids limit hit counted")
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "bomb"}); err != nil {
		t.Fatal(err)
	}
	if got := h.svc.LimitEvents().PidsLimitHits; got != hits {
		t.Fatalf("pids limit hits after the delete = %d, want %d", got, hits)
	}
}

func TestMemoryHogIsKilledInsideItsCgroup(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	ctx := context.Background()
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "hog", MemoryBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "hog", Argv: []string{"python3", "-c", "a = []\nwhile True: a.append(bytearray(1 << 20))"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.exit.GetExitCode() != 137 && res.exit.GetSignal() != "killed" {
		t.Fatalf("hog exit %+v, want killed", res.exit)
	}
	u := h.usage(t, "hog")
	if u.GetOomKills() < 1 {
		t.Fatalf("usage %+v: no OOM kill recorded", u)
	}
	if got := h.mustExec(t, "hog", "echo", "still here"); got.stdout != "still here\n" {
		t.Fatalf("exec after OOM: %+v", got)
	}
	// The node's counter, summed over its sessions, holds the kill, and
	// keeps it once the session is gone.
	if ev := h.svc.LimitEvents(); ev.OOMKills != u.GetOomKills() {
		t.Fatalf("node OOM kills = %d, the session's = %d", ev.OOMKills, u.GetOomKills())
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "hog"}); err != nil {
		t.Fatal(err)
	}
	if ev := h.svc.LimitEvents(); ev.OOMKills != u.GetOomKills() {
		t.Fatalf("node OOM kills after the delete = %d, want %d", ev.OOMKills, u.GetOomKills())
	}
}

func TestBusyLoopIsHeldToItsCPUQuota(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	ctx := context.Background()
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "spin", CpuMillis: 200}); err != nil {
		t.Fatal(err)
	}
	before := h.usage(t, "spin").GetCpuNanos()
	t0 := time.Now()
	// Two spinning loops would use two cores unchecked.
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "spin", Argv: []string{"sh", "-c", "while :; do :; done & while :; do :; done"}, Timeout: durationpb.New(1500 * time.Millisecond)})
	elapsed := time.Since(t0)
	if err != nil || !res.exit.GetTimedOut() {
		t.Fatalf("spin: %+v %v", res.exit, err)
	}
	used := time.Duration(h.usage(t, "spin").GetCpuNanos() - before)
	// The quota is 0.2 of a core; allow for a period's overrun at each end.
	if share := used.Seconds() / elapsed.Seconds(); share > 0.4 {
		t.Fatalf("used %s of CPU in %s (%.2f cores); quota is 0.2", used, elapsed, share)
	}
	if used < 50*time.Millisecond {
		t.Fatalf("used only %s of CPU: the loop did not run", used)
	}
}

func TestFreezeStopsAndThawResumes(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	sb := h.create(t, "ice", "")
	ctx := context.Background()
	counter := filepath.Join(sb.GetRootDir(), "counter")
	read := func() string { data, _ := os.ReadFile(counter); return string(data) }
	if _, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "ice", Argv: []string{"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i > counter.tmp; mv counter.tmp counter; sleep 0.01; done"}}); err != nil {
		t.Fatal(err)
	}
	first := ""
	testkit.Eventually(t, 10*time.Second, func() bool {
		v := read()
		if first == "" {
			first = v
		}
		return v != "" && v != first
	}, "the counter to advance")
	if _, err := h.client.FreezeSandbox(ctx, &sandboxv1.FreezeSandboxRequest{SessionId: "ice"}); err != nil {
		t.Fatal(err)
	}
	got, _ := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SessionId: "ice"})
	if !got.GetSandbox().GetFrozen() {
		t.Fatal("GetSandbox does not say frozen")
	}
	frozenAt := read()
	// Over several of the loop's periods, nothing moves.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if v := read(); v != frozenAt {
			t.Fatalf("counter moved while frozen: %s -> %s", frozenAt, v)
		}
	}
	_, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "ice", Argv: []string{"true"}})
	wantCode(t, err, codes.FailedPrecondition)
	if _, err := h.client.ThawSandbox(ctx, &sandboxv1.ThawSandboxRequest{SessionId: "ice"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return read() != frozenAt }, "the counter to resume")
	// Deleting a frozen sandbox works too.
	if _, err := h.client.FreezeSandbox(ctx, &sandboxv1.FreezeSandboxRequest{SessionId: "ice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "ice"}); err != nil {
		t.Fatal(err)
	}
}

// startXvfb starts a real X server and returns its display, ":N". The
// number is derived from the test process's pid, away from the low
// numbers other X servers on the machine take.
func startXvfb(t *testing.T) string {
	t.Helper()
	n := fmt.Sprint(6000 + os.Getpid()%3000)
	cmd := exec.Command("Xvfb", ":"+n, "-nolisten", "tcp", "-screen", "0", "320x200x24")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// SIGTERM: Xvfb then removes its socket and lock for the next one.
	t.Cleanup(func() { _ = cmd.Process.Signal(unix.SIGTERM); _ = cmd.Wait() })
	testkit.Eventually(t, 10*time.Second, func() bool {
		c, err := net.Dial("unix", "/tmp/.X11-unix/X"+n)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "the X socket to answer")
	return ":" + n
}

func TestStartedProgramDrawsOnTheSessionsDisplay(t *testing.T) {
	disp := startXvfb(t)
	h := newHarness(t, testConfig(t), Deps{DisplayLookup: func(string) (string, string, bool) { return disp, "", true }})
	sb := h.create(t, "gui", "")
	if _, err := h.client.StartProcess(context.Background(), &sandboxv1.StartProcessRequest{SessionId: "gui", Argv: []string{"sh", "-c", "xdpyinfo > info.txt; exec sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		data, _ := os.ReadFile(filepath.Join(sb.GetRootDir(), "info.txt"))
		return strings.Contains(string(data), "dimensions:    320x200 pixels")
	}, "the X client to describe the display")
}

// A started program's record keeps the end of its output, so one that ends
// at once says why; a long output is cut at a line's start.
func TestStartedProcessKeepsTheEndOfItsOutput(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, Deps{DisplayLookup: fakeDisplay(t, &cfg)})
	h.svc.cfg.X11SocketDir = cfg.X11SocketDir
	h.create(t, "tail", "")
	ctx := context.Background()
	resp, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "tail", Argv: []string{"sh", "-c",
		`i=0; while [ $i -lt 500 ]; do echo "line $i of the output"; i=$((i+1)); done; echo "No usable sandbox!" >&2; exit 3`}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetProcess().GetProcessId()
	var p *sandboxv1.Process
	testkit.Eventually(t, 10*time.Second, func() bool {
		list, err := h.client.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SessionId: "tail"})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range list.GetProcesses() {
			if q.GetProcessId() == id && q.GetState() == sandboxv1.ProcessState_PROCESS_STATE_EXITED &&
				strings.HasSuffix(q.GetOutputTail(), "No usable sandbox!\n") {
				p = q
			}
		}
		return p != nil
	}, "the program to end")
	out := p.GetOutputTail()
	if p.GetExit().GetExitCode() != 3 || len(out) > 4096 || !strings.HasPrefix(out, "line ") || !strings.Contains(out, "line 499 of the output\n") {
		t.Fatalf("exit %v, output tail (%d bytes) %q", p.GetExit(), len(out), out)
	}
}
