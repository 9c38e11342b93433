package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

type execResult struct {
	stdout, stderr string
	chunks         int
	exit           *sandboxv1.ExecExit
}

func (h *harness) exec(t testing.TB, req *sandboxv1.ExecRequest) (execResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := h.client.Exec(ctx, req)
	if err != nil {
		return execResult{}, err
	}
	var res execResult
	var out, errb bytes.Buffer
	for {
		msg, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
		res.chunks++
		switch o := msg.GetOutput().(type) {
		case *sandboxv1.ExecResponse_Stdout:
			out.Write(o.Stdout)
		case *sandboxv1.ExecResponse_Stderr:
			errb.Write(o.Stderr)
		case *sandboxv1.ExecResponse_Exit:
			res.exit = o.Exit
		}
	}
	res.stdout, res.stderr = out.String(), errb.String()
	if res.exit == nil {
		t.Fatalf("no exit message; stdout %q stderr %q", res.stdout, res.stderr)
	}
	return res, nil
}

func (h *harness) mustExec(t testing.TB, id string, argv ...string) execResult {
	t.Helper()
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: id, Argv: argv})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return res
}

func TestExecBasics(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "ex", "")
	for _, tc := range []struct {
		name           string
		req            *sandboxv1.ExecRequest
		stdout, stderr string
		code           int32
	}{
		{name: "echo", req: &sandboxv1.ExecRequest{Argv: []string{"echo", "hello", "world"}}, stdout: "hello world\n"},
		{name: "exit code", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "exit 7"}}, code: 7},
		{name: "stderr", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "echo oops >&2; exit 1"}}, stderr: "oops\n", code: 1},
		{name: "stdin", req: &sandboxv1.ExecRequest{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("shout")}, stdout: "SHOUT"},
		{name: "home and cwd", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "echo $HOME $(pwd) $(id -un) $(id -u)"}}, stdout: "/home/user /home/user user 1000\n"},
		{name: "cwd relative", req: &sandboxv1.ExecRequest{Argv: []string{"pwd"}, Cwd: "Desktop"}, stdout: "/home/user/Desktop\n"},
		{name: "cwd absolute", req: &sandboxv1.ExecRequest{Argv: []string{"pwd"}, Cwd: "/home/user/.config"}, stdout: "/home/user/.config\n"},
		{name: "env", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "echo $GREETING $LANG"}, Env: []string{"GREETING=hi there"}}, stdout: "hi there C.UTF-8\n"},
		{name: "clean env", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "env | cut -d= -f1 | sort | tr '\\n' ' '"}}, stdout: "HOME LANG LOGNAME PATH PWD SHELL TERM USER "},
		{name: "no shadow", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "test -e /etc/shadow && echo visible; test -e /root && echo root; exit 0"}}},
		{name: "read-only usr", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "touch /usr/x 2>/dev/null || echo refused"}}, stdout: "refused\n"},
		{name: "signal inside", req: &sandboxv1.ExecRequest{Argv: []string{"sh", "-c", "kill -9 $$"}}, code: 137},
		{name: "missing program", req: &sandboxv1.ExecRequest{Argv: []string{"no-such-program"}}, code: 1, stderr: "bwrap: execvp no-such-program: No such file or directory\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.SessionId = "ex"
			res, err := h.exec(t, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.stdout != tc.stdout || res.stderr != tc.stderr || res.exit.GetExitCode() != tc.code || res.exit.GetTimedOut() {
				t.Fatalf("got stdout %q stderr %q exit %v; want %q %q %d", res.stdout, res.stderr, res.exit, tc.stdout, tc.stderr, tc.code)
			}
		})
	}
}

func TestExecValidation(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "v", "")
	for _, tc := range []struct {
		name string
		req  *sandboxv1.ExecRequest
	}{
		{"no argv", &sandboxv1.ExecRequest{}},
		{"empty program", &sandboxv1.ExecRequest{Argv: []string{""}}},
		{"nul in arg", &sandboxv1.ExecRequest{Argv: []string{"echo", "a\x00b"}}},
		{"env without =", &sandboxv1.ExecRequest{Argv: []string{"true"}, Env: []string{"FOO"}}},
		{"env empty key", &sandboxv1.ExecRequest{Argv: []string{"true"}, Env: []string{"=x"}}},
		{"env bad key", &sandboxv1.ExecRequest{Argv: []string{"true"}, Env: []string{"A-B=x"}}},
		{"cwd outside home", &sandboxv1.ExecRequest{Argv: []string{"true"}, Cwd: "/etc"}},
		{"cwd dotdot", &sandboxv1.ExecRequest{Argv: []string{"true"}, Cwd: "../.."}},
		{"cwd abs dotdot", &sandboxv1.ExecRequest{Argv: []string{"true"}, Cwd: "/home/user/../../etc"}},
		{"cwd prefix trick", &sandboxv1.ExecRequest{Argv: []string{"true"}, Cwd: "/home/username"}},
		{"cwd missing", &sandboxv1.ExecRequest{Argv: []string{"true"}, Cwd: "nope"}},
		{"negative timeout", &sandboxv1.ExecRequest{Argv: []string{"true"}, Timeout: durationpb.New(-time.Second)}},
		{"timeout over max", &sandboxv1.ExecRequest{Argv: []string{"true"}, Timeout: durationpb.New(2 * time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.SessionId = "v"
			_, err := h.exec(t, tc.req)
			wantCode(t, err, codes.InvalidArgument)
		})
	}
}

// sandboxProcesses lists host processes whose command line holds marker.
func hostProcessesWith(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(cmd, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestExecTimeoutKillsTree(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "to", "")
	// Children in the background, one in its own session, all must die.
	script := "sleep 3141 & setsid sleep 3141 & echo started; wait"
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "to", Argv: []string{"sh", "-c", script}, Timeout: durationpb.New(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.exit.GetTimedOut() || res.exit.GetSignal() != "killed" {
		t.Fatalf("exit %v, want timed out and killed", res.exit)
	}
	if res.stdout != "started\n" {
		t.Errorf("stdout %q", res.stdout)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(hostProcessesWith("sleep\x003141")) == 0 }, "sleeps to die")
}

func TestExecTimeoutWithClosedOutput(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "quiet", "")
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "quiet", Argv: []string{"sh", "-c", "exec >&- 2>&-; sleep 1732"}, Timeout: durationpb.New(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.exit.GetTimedOut() {
		t.Fatalf("exit %v", res.exit)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(hostProcessesWith("sleep\x001732")) == 0 }, "sleep to die")
}

func TestDeleteKillsRunningCommands(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "busy", "")
	ctx := context.Background()
	st, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SessionId: "busy", Argv: []string{"sh", "-c", "echo up; sleep 2718"}})
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := st.Recv(); err != nil || string(msg.GetStdout()) != "up\n" {
		t.Fatalf("first message %v %v", msg, err)
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "busy"}); err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	wantCode(t, err, codes.Aborted)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(hostProcessesWith("sleep\x002718")) == 0 }, "sleep to die")
	assertNothingLeft(t, h.cfg.Root)
}

func TestExecIsolation(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "iso", "")

	// Only the sandbox's own processes: bwrap's init, sh, ls and grep.
	res := h.mustExec(t, "iso", "sh", "-c", "ls /proc | grep -c '^[0-9]'")
	if n, _ := strconv.Atoi(strings.TrimSpace(res.stdout)); n == 0 || n > 4 {
		t.Fatalf("sandbox sees %q processes", res.stdout)
	}
	res = h.mustExec(t, "iso", "ps", "-e", "-o", "pid=,comm=")
	if got := strings.Join(strings.Fields(res.stdout), " "); got != "1 bwrap 2 ps" {
		t.Fatalf("ps shows %q", res.stdout)
	}

	// Network is off: a listener on the host's loopback is unreachable.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	port := lis.Addr().(*net.TCPAddr).Port
	res = h.mustExec(t, "iso", "bash", "-c", fmt.Sprintf("echo > /dev/tcp/127.0.0.1/%d && echo connected", port))
	if res.exit.GetExitCode() == 0 || strings.Contains(res.stdout, "connected") {
		t.Fatalf("network reachable: %+v", res)
	}

	// A file written by a command is seen by the file API and on the host.
	h.mustExec(t, "iso", "sh", "-c", "mkdir -p out && echo from-exec > out/result.txt")
	got, err := h.client.ReadFile(context.Background(), &sandboxv1.ReadFileRequest{SessionId: "iso", Path: "out/result.txt"})
	if err != nil || string(got.GetContent()) != "from-exec\n" {
		t.Fatalf("ReadFile: %v %v", got, err)
	}

	// Another session's files are not reachable from inside.
	other := h.create(t, "iso-other", "")
	if err := os.WriteFile(filepath.Join(other.GetRootDir(), "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	res = h.mustExec(t, "iso", "sh", "-c", "cat "+filepath.Join(other.GetRootDir(), "secret")+" 2>/dev/null || echo unreachable")
	if res.stdout != "unreachable\n" {
		t.Fatalf("other session's file: %q", res.stdout)
	}
}

func TestExecStreamsLargeOutputInBoundedChunks(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, Deps{})
	h.create(t, "big", "")
	res := h.mustExec(t, "big", "head", "-c", "1000000", "/dev/zero")
	if len(res.stdout) != 1000000 {
		t.Fatalf("got %d bytes", len(res.stdout))
	}
	if min := 1000000 / h.cfg.ExecChunkBytes; res.chunks < min {
		t.Fatalf("%d chunks, want at least %d", res.chunks, min)
	}
}

func TestExecDisplayBinding(t *testing.T) {
	cfg := testConfig(t)
	cfg.X11SocketDir = t.TempDir()
	sock := filepath.Join(cfg.X11SocketDir, "X42")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	cookie := filepath.Join(t.TempDir(), "xauth")
	if err := os.WriteFile(cookie, []byte("cookie"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, Deps{DisplayLookup: func(id string) (string, string, bool) {
		return ":42", cookie, id == "gui"
	}})
	h.create(t, "gui", "")
	h.create(t, "headless", "")
	res := h.mustExec(t, "gui", "sh", "-c", `echo $DISPLAY $XAUTHORITY; test -S /tmp/.X11-unix/X42 && echo socket; cat "$XAUTHORITY"`)
	if res.stdout != ":42 /tmp/.Xauthority\nsocket\ncookie" {
		t.Fatalf("gui sandbox: %q %q", res.stdout, res.stderr)
	}
	res = h.mustExec(t, "headless", "sh", "-c", `echo "[$DISPLAY]"; ls /tmp/.X11-unix 2>/dev/null | wc -l`)
	if res.stdout != "[]\n0\n" {
		t.Fatalf("headless sandbox: %q", res.stdout)
	}
}

func BenchmarkExecTrue(b *testing.B) {
	h := newHarness(b, testConfig(b), Deps{})
	h.create(b, "bench", "")
	for b.Loop() {
		res := h.mustExec(b, "bench", "true")
		if res.exit.GetExitCode() != 0 {
			b.Fatal(res)
		}
	}
}

func TestExecWithoutBubblewrap(t *testing.T) {
	cfg := testConfig(t)
	cfg.BwrapPath = "/nonexistent/bwrap"
	h := newHarness(t, cfg, Deps{})
	h.create(t, "nobwrap", "")
	_, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "nobwrap", Argv: []string{"true"}})
	wantCode(t, err, codes.Unavailable)
}
