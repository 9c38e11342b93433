package sandbox

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// The files API and an exec's working directory mean the same path in both
// kinds of sandbox: relative to the session user's home (/home/user), or
// absolute as the session's programs see it.
func TestPathsMeanTheSameInBothKinds(t *testing.T) {
	h, store := newImageHarness(t)
	// An image that names no working directory: its commands start in the
	// user's home.
	base := busyboxImage(t, "1000:1000")
	cf, err := base.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	cfg.WorkingDir = ""
	cfg.Env = []string{"PATH=/bin:/usr/bin"} // the home comes from /etc/passwd
	nowd, err := mutate.Config(base, cfg)
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, store, nowd, "test/busybox:nowd")
	h.create(t, "host", "")
	h.createFrom(t, "img", "test/busybox:user")
	h.createFrom(t, "img-nowd", "test/busybox:nowd")

	for _, id := range []string{"host", "img", "img-nowd"} {
		t.Run(id, func(t *testing.T) {
			ctx := context.Background()
			c := h.client
			if _, err := c.MakeDirectory(ctx, &sandboxv1.MakeDirectoryRequest{SessionId: id, Path: "notes"}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: id, Path: "notes/todo.txt", Content: []byte("buy milk\n")}); err != nil {
				t.Fatal(err)
			}
			// A command finds the file where the API put it.
			if got := h.mustExec(t, id, "sh", "-c", "pwd; cat notes/todo.txt; cat /home/user/notes/todo.txt"); got.stdout != "/home/user\nbuy milk\nbuy milk\n" {
				t.Fatalf("exec in the default directory: %q", got.stdout)
			}
			// Read back, relative and absolute.
			for _, p := range []string{"notes/todo.txt", "./notes/todo.txt", "/home/user/notes/todo.txt"} {
				got, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: id, Path: p})
				if err != nil || string(got.GetContent()) != "buy milk\n" {
					t.Fatalf("ReadFile(%q): %q %v", p, got.GetContent(), err)
				}
			}
			// The home lists the directory, by default and by name.
			for _, p := range []string{"", ".", "/home/user"} {
				l, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: id, Path: p})
				if err != nil {
					t.Fatalf("ListFiles(%q): %v", p, err)
				}
				found := false
				for _, f := range l.GetFiles() {
					found = found || f.GetName() == "notes"
				}
				if !found {
					t.Fatalf("ListFiles(%q) lacks notes: %v", p, l.GetFiles())
				}
			}
			for _, cwd := range []string{"notes", "/home/user/notes"} {
				r, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: id, Argv: []string{"sh", "-c", "pwd; cat todo.txt"}, Cwd: cwd})
				if err != nil || r.stdout != "/home/user/notes\nbuy milk\n" {
					t.Fatalf("exec in %q: %q %v", cwd, r.stdout, err)
				}
			}
			// And the API finds what a command made.
			h.mustExec(t, id, "sh", "-c", "echo from exec > made.txt")
			if got, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: id, Path: "made.txt"}); err != nil || string(got.GetContent()) != "from exec\n" {
				t.Fatalf("ReadFile(made.txt): %q %v", got.GetContent(), err)
			}
			if st, err := c.StatFile(ctx, &sandboxv1.StatFileRequest{SessionId: id, Path: "made.txt"}); err != nil || st.GetFile().GetSize() != 10 {
				t.Fatalf("StatFile(made.txt): %v %v", st, err)
			}
			if _, err := c.MoveFile(ctx, &sandboxv1.MoveFileRequest{SessionId: id, FromPath: "made.txt", ToPath: "notes/moved.txt"}); err != nil {
				t.Fatal(err)
			}
			if _, data, err := h.download(t, id, "/home/user/notes/moved.txt"); err != nil || string(data) != "from exec\n" {
				t.Fatalf("download: %q %v", data, err)
			}
			if _, err := h.upload(t, id, "notes/up.txt", []byte("uploaded"), 3); err != nil {
				t.Fatal(err)
			}
			if got := h.mustExec(t, id, "cat", "/home/user/notes/up.txt"); got.stdout != "uploaded" {
				t.Fatalf("uploaded file inside: %q", got.stdout)
			}
			if _, err := c.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SessionId: id, Path: "notes", Recursive: true}); err != nil {
				t.Fatal(err)
			}
			if got := h.mustExec(t, id, "sh", "-c", "test -e /home/user/notes && echo still there || echo gone"); got.stdout != "gone\n" {
				t.Fatalf("after DeleteFile: %q", got.stdout)
			}
			// Nothing names the root directory itself to change it.
			for _, p := range []string{"", ".", "/"} {
				_, err := c.DeleteFile(ctx, &sandboxv1.DeleteFileRequest{SessionId: id, Path: p, Recursive: true})
				wantCode(t, err, codes.InvalidArgument)
			}
			_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: id, Path: "/home/user/../../etc/passwd"})
			wantCode(t, err, codes.InvalidArgument)
		})
	}

	ctx := context.Background()
	// Outside the home: the whole root filesystem of an image session, and
	// nothing for a session on the node's programs, whose API shows only
	// its home.
	if got, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "img", Path: "/etc/group"}); err != nil || !strings.Contains(string(got.GetContent()), "user:x:1000") {
		t.Fatalf("ReadFile(/etc/group) in an image session: %q %v", got.GetContent(), err)
	}
	if r, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "img", Argv: []string{"sh", "-c", "pwd"}, Cwd: "/etc"}); err != nil || r.stdout != "/etc\n" {
		t.Fatalf("exec in /etc in an image session: %q %v", r.stdout, err)
	}
	_, err = h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "host", Path: "/etc/passwd"})
	wantCode(t, err, codes.InvalidArgument)
	if err == nil || !strings.Contains(err.Error(), "outside /home/user") {
		t.Fatalf("ReadFile(/etc/passwd) on the node's programs: %v", err)
	}
	_, err = h.exec(t, &sandboxv1.ExecRequest{SessionId: "host", Argv: []string{"true"}, Cwd: "/etc"})
	wantCode(t, err, codes.InvalidArgument)
}

// What the session's container mounts over its root filesystem (its own
// /tmp, /run, /dev, /proc, /sys, the runtime's /etc/hosts...) is not what
// the files API reaches: a path there is refused with the reason, also
// through a symlink, rather than written where the session's programs never
// see it (and a commit would keep it).
func TestFilesRefuseWhatTheContainerMountsOver(t *testing.T) {
	h, store := newImageHarness(t)
	importImage(t, store, busyboxImageOf(t, "1000:1000", []string{"proc", "dev", "sys", "run", "tmp"},
		map[string]string{"scratch": "->tmp", "var-run": "->/run", "etc/hosts": "127.0.0.1 localhost\n"}), "test/busybox:links")
	h.createFrom(t, "img", "test/busybox:links")
	ctx := context.Background()
	c := h.client

	for _, p := range []string{"/tmp/x.txt", "/tmp", "/run/x", "/dev/shm/x", "/etc/resolv.conf", "/etc/hosts", "/scratch/x.txt", "/var-run/x", "../../tmp/x.txt"} {
		_, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "img", Path: p, Content: []byte("lost")})
		wantCode(t, err, codes.InvalidArgument)
		if p != "../../tmp/x.txt" && !strings.Contains(err.Error(), "mounts over its root filesystem") {
			t.Errorf("WriteFile(%q): %v", p, err)
		}
	}
	for _, p := range []string{"/tmp", "/proc", "/scratch", "/var-run"} {
		_, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: "img", Path: p})
		wantCode(t, err, codes.InvalidArgument)
	}
	_, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "img", Path: "/etc/hosts"})
	wantCode(t, err, codes.InvalidArgument)
	_, err = c.MoveFile(ctx, &sandboxv1.MoveFileRequest{SessionId: "img", FromPath: "/etc/group", ToPath: "/tmp/group"})
	wantCode(t, err, codes.InvalidArgument)
	if _, err := h.upload(t, "img", "/run/up.txt", []byte("lost"), 1); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("upload to /run: %v", err)
	}
	if got := h.mustExec(t, "img", "sh", "-c", "ls -A /tmp /run"); strings.Contains(got.stdout, "x.txt") || strings.Contains(got.stdout, "up.txt") {
		t.Fatalf("the session's /tmp and /run: %q", got.stdout)
	}

	// Beside them, and in the rest of the root filesystem, the API works.
	for _, p := range []string{"/etc/hosts.allow", "/tmpfile", "/home/user/tmp/x.txt", "/root/run"} {
		if _, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "img", Path: p, Content: []byte("kept")}); err != nil {
			t.Fatalf("WriteFile(%q): %v", p, err)
		}
	}
	if _, err := c.ListFiles(ctx, &sandboxv1.ListFilesRequest{SessionId: "img", Path: "/"}); err != nil {
		t.Fatal(err)
	}
	// The session's changes hold none of it.
	ch, err := c.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "img"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ch.GetChanges() {
		if strings.HasPrefix(e.GetPath(), "tmp/") || strings.HasPrefix(e.GetPath(), "run/") {
			t.Errorf("change %q", e.GetPath())
		}
	}
}

// An absolute symlink in an image session's root filesystem leads where it
// does for the session's programs (Debian's /etc/alternatives,
// /usr/bin/editor), never out of the session.
func TestFilesFollowAbsoluteLinksInAnImage(t *testing.T) {
	h, store := newImageHarness(t)
	importImage(t, store, busyboxImageOf(t, "1000:1000", []string{"proc", "dev", "sys", "run", "tmp"},
		map[string]string{"usr/bin/editor": "->/etc/alternatives/editor", "etc/alternatives/editor": "->/bin/busybox",
			"etc/motd": "hello\n", "home/user/motd": "->/etc/motd", "home/user/up": "->../../../../..", "root-link": "->/"}), "test/busybox:abslinks")
	h.createFrom(t, "img", "test/busybox:abslinks")
	ctx := context.Background()
	c := h.client

	for p, want := range map[string]string{"motd": "hello\n", "/home/user/motd": "hello\n", "up/etc/motd": "hello\n", "/root-link/etc/motd": "hello\n"} {
		got, err := c.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "img", Path: p})
		if err != nil || string(got.GetContent()) != want {
			t.Fatalf("ReadFile(%q) = %q, %v", p, got.GetContent(), err)
		}
	}
	st, err := c.StatFile(ctx, &sandboxv1.StatFileRequest{SessionId: "img", Path: "/usr/bin/editor"})
	if err != nil || st.GetFile().GetSize() != int64(len("/etc/alternatives/editor")) { // the link itself
		t.Fatalf("StatFile(/usr/bin/editor) = %v, %v", st, err)
	}
	if _, data, err := h.download(t, "img", "/usr/bin/editor"); err != nil || len(data) < 1000 {
		t.Fatalf("download(/usr/bin/editor): %d bytes, %v", len(data), err)
	}
	// Written through a link, the file is where the session's programs find it.
	if _, err := c.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "img", Path: "/root-link/home/user/new.txt", Content: []byte("via /")}); err != nil {
		t.Fatal(err)
	}
	if got := h.mustExec(t, "img", "cat", "/home/user/new.txt"); got.stdout != "via /" {
		t.Fatalf("new.txt inside: %q", got.stdout)
	}
}

// A working directory in what the session's container mounts over its root
// filesystem is where the session's programs made it: the container finds
// it, the node's view of the layer does not.
func TestExecCwdInWhatTheContainerMounts(t *testing.T) {
	h, store := newImageHarness(t)
	importImage(t, store, busyboxImageOf(t, "1000:1000", []string{"proc", "dev", "sys", "run", "tmp"},
		map[string]string{"var-run": "->/run"}), "test/busybox:cwd")
	h.createFrom(t, "img", "test/busybox:cwd")
	h.mustExec(t, "img", "sh", "-c", "mkdir -p /tmp/work/sub")
	for cwd, want := range map[string]string{"/tmp/work/sub": "/tmp/work/sub\n", "/tmp": "/tmp\n", "/var-run": "/run\n"} {
		r, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "img", Argv: []string{"sh", "-c", "pwd"}, Cwd: cwd})
		if err != nil || r.stdout != want {
			t.Errorf("exec in %q: %q %q %v", cwd, r.stdout, r.stderr, err)
		}
	}
	// One that is not there either fails as the container's runtime says.
	r, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "img", Argv: []string{"sh", "-c", "pwd"}, Cwd: "/tmp/missing"})
	if err != nil || r.exit.GetExitCode() == 0 || !strings.Contains(r.stderr, `chdir to cwd ("/tmp/missing")`) {
		t.Errorf("exec in /tmp/missing: %+v %v", r, err)
	}
}

// In a session on the node's programs, a link its programs made to
// /home/user/... (or climbing out and back) leads into its home for the
// files API too; one that leads elsewhere stays refused.
func TestFilesFollowLinksIntoTheHome(t *testing.T) {
	h := newHarness(t, testConfig(t), Deps{})
	h.create(t, "host", "")
	h.mustExec(t, "host", "sh", "-c", "mkdir docs && echo hello > docs/a.txt && ln -s /home/user/docs/a.txt abs.txt && ln -s ../user/docs climb && ln -s /etc/passwd out")
	ctx := context.Background()
	for _, p := range []string{"abs.txt", "climb/a.txt", "/home/user/abs.txt"} {
		got, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "host", Path: p})
		if err != nil || string(got.GetContent()) != "hello\n" {
			t.Fatalf("ReadFile(%q) = %q, %v", p, got.GetContent(), err)
		}
	}
	_, err := h.client.ReadFile(ctx, &sandboxv1.ReadFileRequest{SessionId: "host", Path: "out"})
	wantCode(t, err, codes.PermissionDenied)
}
