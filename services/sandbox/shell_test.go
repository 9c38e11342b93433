package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

func TestPersistentShell(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "sh", "")
	ctx := context.Background()
	run := func(cmd string, timeout time.Duration) *sandboxv1.RunShellResponse {
		t.Helper()
		req := &sandboxv1.RunShellRequest{SessionId: "sh", Command: cmd}
		if timeout > 0 {
			req.Timeout = durationpb.New(timeout)
		}
		resp, err := h.client.RunShell(ctx, req)
		if err != nil {
			t.Fatalf("RunShell(%q): %v", cmd, err)
		}
		return resp
	}
	for _, tc := range []struct {
		cmd, out string
		code     int32
	}{
		{"cd /tmp; X=5; f() { echo hi; }", "", 0},
		{"pwd; echo $X; f", "/tmp\n5\nhi\n", 0},
		{"echo out; echo err >&2; false", "out\nerr\n", 1},
		{"printf 'no newline'", "no newline", 0},
		{"echo 'unterminated", "", 2},
		{"echo still $X", "still 5\n", 0},
		{"cat", "", 0}, // stdin is not the shell's
		{"exit 7", "", 7},
		{"echo fresh ${X:-unset}; echo bye; exit 4", "fresh unset\nbye\n", 4}, // what came before the exit is kept
		{"echo fresh ${X:-unset}", "fresh unset\n", 0},
	} {
		got := run(tc.cmd, 0)
		if tc.cmd == "echo 'unterminated" {
			got.Output = nil // bash's message wording varies
		}
		if string(got.GetOutput()) != tc.out || got.GetExitCode() != tc.code || got.GetTimedOut() {
			t.Fatalf("%q: got %q exit %d timed out %v; want %q exit %d", tc.cmd, got.GetOutput(), got.GetExitCode(), got.GetTimedOut(), tc.out, tc.code)
		}
	}
	run("Y=1", 0)
	if got := run("echo before; sleep 100", 300*time.Millisecond); !got.GetTimedOut() || string(got.GetOutput()) != "before\n" {
		t.Fatalf("timeout: %v", got)
	}
	if got := run("echo ${Y:-restarted}", 0); string(got.GetOutput()) != "restarted\n" {
		t.Fatalf("after timeout: %q", got.GetOutput())
	}
	run("Z=1", 0)
	if _, err := h.client.RestartShell(ctx, &sandboxv1.RestartShellRequest{SessionId: "sh"}); err != nil {
		t.Fatal(err)
	}
	if got := run("echo ${Z:-restarted}", 0); string(got.GetOutput()) != "restarted\n" {
		t.Fatalf("after restart: %q", got.GetOutput())
	}
	if got := run("head -c 3000000 /dev/zero | tr '\\0' a; echo; echo done", 0); !got.GetTruncated() || len(got.GetOutput()) != maxShellOutput || got.GetExitCode() != 0 {
		t.Fatalf("big output: %d bytes, truncated %v, exit %d", len(got.GetOutput()), got.GetTruncated(), got.GetExitCode())
	}
}

// TestShellWithoutBash: a session from an image without bash (busybox,
// Alpine) gets its /bin/sh as the persistent shell, state carried over;
// one with bash gets bash.
func TestShellWithoutBash(t *testing.T) {
	h, _ := newImageHarness(t)
	ctx := context.Background()
	h.createFrom(t, "bb", "test/busybox:user")
	run := func(cmd string) *sandboxv1.RunShellResponse {
		t.Helper()
		resp, err := h.client.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: "bb", Command: cmd})
		if err != nil {
			t.Fatalf("RunShell(%q): %v", cmd, err)
		}
		return resp
	}
	if got := run("cd /tmp; X=5; echo $SHELL"); string(got.GetOutput()) != "/bin/sh\n" || got.GetExitCode() != 0 {
		t.Fatalf("first call: %q exit %d", got.GetOutput(), got.GetExitCode())
	}
	if got := run("echo $PWD $X; false"); string(got.GetOutput()) != "/tmp 5\n" || got.GetExitCode() != 1 {
		t.Fatalf("state: %q exit %d", got.GetOutput(), got.GetExitCode())
	}

	plain := newHarness(t, testConfig(t), Deps{})
	plain.create(t, "b", "")
	resp, err := plain.client.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: "b", Command: "echo $SHELL ${BASH_VERSION:+bash}"})
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(resp.GetOutput())), "bash bash") {
		t.Fatalf("a session with bash: %q %v", resp.GetOutput(), err)
	}
}

// The persistent shell alone does not keep a session's changes from being
// discarded or a snapshot from being restored: it ends with them (a session
// on an image restarts its container anyway), and the next call starts a
// fresh one. A started program still does.
func TestShellEndsWithDiscardAndRestore(t *testing.T) {
	h, store := newImageHarness(t)
	importImage(t, store, busyboxImage(t, "1000:1000"), "test/busybox:shell")
	h.create(t, "host", "")
	h.createFrom(t, "img", "test/busybox:shell")
	ctx := context.Background()
	for _, id := range []string{"host", "img"} {
		t.Run(id, func(t *testing.T) {
			shell := func(cmd string, root bool) string {
				t.Helper()
				r, err := h.client.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: id, Command: cmd, AsRoot: root && id == "img"})
				if err != nil {
					t.Fatalf("shell %q: %v", cmd, err)
				}
				return string(r.GetOutput())
			}
			shell("export X=1; echo one > one.txt", false)
			shell("export Y=1", true)
			dis, err := h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: id})
			if err != nil || len(dis.GetDiscarded()) == 0 {
				t.Fatalf("discard with the shell started: %v %v", dis, err)
			}
			if got := shell("echo x=$X; cat one.txt 2>/dev/null || echo gone", false); got != "x=\ngone\n" {
				t.Fatalf("after discard: %q", got)
			}
			shell("echo two > two.txt; sleep 1000 &", false)
			sn, err := h.client.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: id})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.RestoreSnapshot(ctx, &sandboxv1.RestoreSnapshotRequest{SessionId: id, SnapshotId: sn.GetSnapshot().GetSnapshotId()}); err != nil {
				t.Fatalf("restore with the shell and its job running: %v", err)
			}
			if got := shell("cat two.txt", false); got != "two\n" {
				t.Fatalf("after restore: %q", got)
			}
			started, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: id, Argv: []string{"sh", "-c", "echo $$ > /home/user/pid; exec sleep 1000"}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: id})
			if id == "host" {
				// Its programs live in namespaces of their own: refused.
				wantCode(t, err, codes.FailedPrecondition)
				return
			}
			// A session on an image restarts its container, and the
			// program with it, under its own id, on the discarded layer.
			if err != nil {
				t.Fatalf("discard with a started program: %v", err)
			}
			list, err := h.client.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SessionId: id})
			if err != nil {
				t.Fatal(err)
			}
			var again *sandboxv1.Process
			for _, p := range list.GetProcesses() {
				if p.GetProcessId() == started.GetProcess().GetProcessId() {
					again = p
				}
			}
			if again == nil || again.GetState() != sandboxv1.ProcessState_PROCESS_STATE_RUNNING || len(list.GetProcesses()) != 1 {
				t.Fatalf("the started program after the discard: %v", list.GetProcesses())
			}
			if got := shell("for i in 1 2 3 4 5 6 7 8 9 10; do [ -s pid ] && break; sleep 0.2; done; cat pid two.txt 2>&1", false); !strings.Contains(got, "No such file") || strings.HasPrefix(got, "cat:") {
				t.Fatalf("after the discard the program wrote its pid again, two.txt is gone: %q", got)
			}
		})
	}
}
