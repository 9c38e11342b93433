package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEndToEndCLICommands drives every client command group against `deskgrid up`.
func TestEndToEndCLICommands(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	run := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(deskgridBinary(t), args...)
		cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if err != nil {
			code = cliExit(err)
		}
		return out.String(), errb.String(), code
	}
	must := func(args ...string) string {
		t.Helper()
		out, errs, code := run("", args...)
		if code != 0 {
			t.Fatalf("deskgrid %v: exit %d\n%s%s", args, code, out, errs)
		}
		return out
	}
	s := p.createSession(640, 480)

	// exec streams output and passes the exit code on.
	out, errs, code := run("", "exec", s.ID, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if code != 7 || out != "out\n" || !strings.Contains(errs, "err") {
		t.Fatalf("exec: code %d out %q err %q", code, out, errs)
	}
	// -timeout bounds the call: the command is still running when it ends.
	if out, errs, code := run("", "exec", "-timeout", "1s", s.ID, "--", "sleep", "30"); code == 0 || !strings.Contains(errs, "deadline") {
		t.Fatalf("exec -timeout 1s of a 30 s sleep: code %d out %q err %q", code, out, errs)
	}
	// -root asks for root of the session's own user namespace, which a
	// session from no image does not have: the node says so.
	if out, errs, code := run("", "exec", "-root", s.ID, "--", "id", "-u"); code == 0 || !strings.Contains(errs, "user namespace") {
		t.Fatalf("exec -root without an image: code %d out %q err %q", code, out, errs)
	}
	// So does shell -root, the session's root shell; it does not go with
	// -restart.
	if out, errs, code := run("", "shell", "-root", s.ID, "id -u"); code == 0 || !strings.Contains(errs, "image") {
		t.Fatalf("shell -root without an image: code %d out %q err %q", code, out, errs)
	}
	if out, errs, code := run("", "shell", "-root", "-restart", s.ID); code != 2 || !strings.Contains(errs, "-restart") {
		t.Fatalf("shell -root -restart: code %d out %q err %q", code, out, errs)
	}
	// The persistent shell keeps state between calls.
	must("shell", s.ID, "cd /tmp && export GREETING=hi")
	if out := must("shell", s.ID, "echo $GREETING $PWD"); out != "hi /tmp\n" {
		t.Fatalf("shell kept no state: %q", out)
	}
	// Input.
	if out := must("act", s.ID, "move", "30", "40"); !strings.Contains(out, "30,40") {
		t.Fatalf("act move: %q", out)
	}
	if out := must("act", s.ID, "type", "héllo", "you"); out != "typed 9 characters\n" {
		t.Fatalf("act type: %q", out)
	}
	if out := must("act", s.ID, "key", "ctrl+a"); out != "pressed ctrl+a\n" {
		t.Fatalf("act key: %q", out)
	}
	if _, _, code := run("", "act", s.ID, "click", "9999", "1"); code == 0 {
		t.Fatal("a click off the screen succeeded")
	}
	// Files, both ways.
	local := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(local, []byte("payload\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must("files", s.ID, "mkdir", "docs")
	must("files", s.ID, "put", local, "docs/in.txt")
	if out := must("files", s.ID, "cat", "docs/in.txt"); out != "payload\n" {
		t.Fatalf("files cat: %q", out)
	}
	if out := must("files", s.ID, "ls", "docs"); !strings.Contains(out, "in.txt") {
		t.Fatalf("files ls: %q", out)
	}
	back := filepath.Join(t.TempDir(), "back.txt")
	must("files", s.ID, "get", "docs/in.txt", back)
	if b, err := os.ReadFile(back); err != nil || string(b) != "payload\n" {
		t.Fatalf("files get: %v %q", err, b)
	}
	// Changes show what the session did.
	if out := must("changes", s.ID); !strings.Contains(out, "docs/in.txt") {
		t.Fatalf("changes: %q", out)
	}
	if out := must("changes", s.ID, "diff", "docs/in.txt"); !strings.Contains(out, "+payload") {
		t.Fatalf("changes diff: %q", out)
	}
	// Snapshots.
	out = must("snapshots", s.ID, "create")
	if !strings.Contains(out, s.ID) {
		t.Fatalf("snapshots create: %q", out)
	}
	if out := must("snapshots", s.ID, "list"); strings.Count(out, s.ID) != 1 {
		t.Fatalf("snapshots list: %q", out)
	}
	// History lists and exports the session's life.
	deadline := time.Now().Add(20 * time.Second)
	for {
		// NotFound until the first event is stored.
		out, _, _ := run("", "history", "list", s.ID)
		if strings.Contains(out, "session.state_changed.v1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history list: %q", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := must("history", "export", s.ID); !strings.Contains(out, s.ID) || !strings.HasSuffix(out, "\n") {
		t.Fatalf("history export: %q", out)
	}
	// The one node of deskgrid up, drained and undrained as a cluster's.
	if out := must("nodes", "list"); !strings.Contains(out, "local") || !strings.Contains(out, "ready") {
		t.Fatalf("nodes list: %q", out)
	}
	if out := must("nodes", "drain", "local"); !strings.Contains(out, "draining") {
		t.Fatalf("nodes drain: %q", out)
	}
	if out := must("nodes", "undrain", "local"); !strings.Contains(out, "ready") {
		t.Fatalf("nodes undrain: %q", out)
	}
	if _, errs, code := run("", "nodes", "get", "elsewhere"); code == 0 || !strings.Contains(errs, "not found") {
		t.Fatalf("nodes get of an unknown node: exit %d, %q", code, errs)
	}
	// Completion scripts name the commands.
	if out := must("completion", "bash"); !strings.Contains(out, "complete -F _deskgrid deskgrid") || !strings.Contains(out, "snapshots") {
		t.Fatalf("completion: %q", out)
	}
	if _, _, code := run("", "files", s.ID, "frobnicate"); code != 2 {
		t.Fatalf("bad subcommand exit code %d, want 2", code)
	}
}

// A table's AGE or MODIFIED column is a duration while it is short, and a
// date once it is days old (a package's file, an image's epoch-dated one).
func TestAgoAt(t *testing.T) {
	now := time.Date(2026, 11, 28, 15, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{now.Add(-1500 * time.Millisecond), "2s"},
		{now.Add(-6*time.Minute - 59*time.Second), "6m59s"},
		{now.Add(-47 * time.Hour), "47h0m0s"},
		{now.Add(-48 * time.Hour), "2026-11-26"},
		{time.Date(2024, 5, 6, 23, 30, 0, 0, time.FixedZone("x", -2*3600)), "2024-05-07"},
		{time.Unix(0, 0), "1970-01-01"},
	} {
		if got := agoAt(now, tc.t); got != tc.want {
			t.Errorf("agoAt(%v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}
