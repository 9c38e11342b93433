package fsroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tree builds a root holding every kind of escape attempt, beside an
// outside directory holding a secret.
func tree(t testing.TB) (root *Root, dir, outside string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755))
	must(os.MkdirAll(outside, 0o755))
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "file"), []byte("inside"), 0o640))
	must(os.WriteFile(filepath.Join(dir, "sub", "deeper", "file"), []byte("deep"), 0o644))
	links := map[string]string{
		"abs-passwd":     "/etc/passwd",
		"abs-root":       "/",
		"abs-outside":    outside,
		"abs-secret":     filepath.Join(outside, "secret"),
		"up":             "..",
		"upup":           "../..",
		"rel-secret":     "../outside/secret",
		"proc-root":      "/proc/self/root",
		"sub/back":       "../..",
		"sub/deeper/out": "../../../outside",
		"sub/ok":         "../file",
		"sub/okdir":      "deeper",
		"loop":           "loop",
		"dangling":       "nowhere",
	}
	for name, target := range links {
		must(os.Symlink(target, filepath.Join(dir, name)))
	}
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	r, err := New(dir)
	must(err)
	return r, dir, outside
}

func TestClean(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		ok      bool
	}{
		{"", ".", true},
		{".", ".", true},
		{"a/b/", "a/b", true},
		{"a//b/./c", "a/b/c", true},
		{"..", "", false},
		{"a/../b", "", false},
		{"a/..", "", false},
		{"/etc/passwd", "", false},
		{"a\x00b", "", false},
		{"...", "...", true},
		{"..a", "..a", true},
		// The kernel's limits are bad input, not a failure inside.
		{strings.Repeat("a/", 2047) + "b", strings.Repeat("a/", 2047) + "b", true},
		{strings.Repeat("a/", 2048) + "b", "", false},
		{strings.Repeat("x", 5000), "", false},
		{strings.Repeat("n", 255), strings.Repeat("n", 255), true},
		{"dir/" + strings.Repeat("n", 256), "", false},
	} {
		got, err := Clean(tc.in)
		if (err == nil) != tc.ok || got != tc.out {
			t.Errorf("Clean(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.out, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Clean(%q) error %v is not ErrInvalidPath", tc.in, err)
		}
	}
}

func TestReadRefusesEscapes(t *testing.T) {
	r, _, _ := tree(t)
	for _, tc := range []struct {
		path string
		want error
	}{
		{"abs-passwd", ErrEscape},
		{"abs-root/etc/passwd", ErrEscape},
		{"abs-outside/secret", ErrEscape},
		{"abs-secret", ErrEscape},
		{"up/outside/secret", ErrEscape},
		{"upup/etc/passwd", ErrEscape},
		{"rel-secret", ErrEscape},
		{"proc-root/etc/passwd", ErrEscape},
		{"sub/back/etc/passwd", ErrEscape},
		{"sub/deeper/out/secret", ErrEscape},
		{"../outside/secret", ErrInvalidPath},
		{"/etc/passwd", ErrInvalidPath},
		{"loop", ErrInvalidPath},
		{"dangling", fs.ErrNotExist},
		{"missing", fs.ErrNotExist},
		{"fifo", ErrNotRegular},
		{"sub", ErrNotRegular},
		{"sub", ErrIsDir},
		{"file/x", ErrNotDir},
	} {
		_, _, err := r.ReadFile(tc.path, 1<<20)
		if !errors.Is(err, tc.want) {
			t.Errorf("ReadFile(%q) = %v, want %v", tc.path, err, tc.want)
		}
	}
	// Only a directory is told as one.
	if _, _, err := r.ReadFile("fifo", 1<<20); errors.Is(err, ErrIsDir) {
		t.Errorf("ReadFile(fifo) = %v: a named pipe is not a directory", err)
	}
	for path, want := range map[string]string{"file": "inside", "sub/ok": "inside", "sub/okdir/file": "deep", "./sub/deeper/file": "deep"} {
		got, _, err := r.ReadFile(path, 1<<20)
		if err != nil || string(got) != want {
			t.Errorf("ReadFile(%q) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, mode, _ := r.ReadFile("file", 1<<20); mode != 0o640 {
		t.Errorf("mode %o", mode)
	}
	if _, _, err := r.ReadFile("file", 3); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadFile over limit: %v", err)
	}
}

func TestWriteRefusesEscapes(t *testing.T) {
	r, dir, outside := tree(t)
	for _, p := range []string{"abs-outside/new", "up/outside/new", "sub/deeper/out/new", "sub/back/new", "abs-root/tmp/new"} {
		if err := r.WriteFile(p, []byte("x"), 0o644); !errors.Is(err, ErrEscape) {
			t.Errorf("WriteFile(%q) = %v, want ErrEscape", p, err)
		}
	}
	// A symlink at the target itself is replaced, not followed.
	if err := r.WriteFile("abs-secret", []byte("replaced"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(outside, "secret")); string(got) != "SECRET" {
		t.Fatalf("outside file changed: %q", got)
	}
	if st, err := os.Lstat(filepath.Join(dir, "abs-secret")); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("abs-secret after write: %v %v", st, err)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Fatalf("outside has %d entries", len(entries))
	}
	// Parents are made; the mode is exact whatever the umask.
	if err := r.WriteFile("a/b/c.txt", []byte("abc"), 0o777); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "a/b/c.txt")); err != nil || st.Mode().Perm() != 0o777 {
		t.Fatalf("stat: %v %v", st, err)
	}
	if err := r.WriteFile("sub", []byte("x"), 0o644); !errors.Is(err, ErrNotRegular) {
		t.Errorf("write over a directory: %v", err)
	}
	if err := r.WriteFile("", []byte("x"), 0o644); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("write to root: %v", err)
	}
	// No temporary files are left behind.
	entries, _ = os.ReadDir(filepath.Join(dir, "a/b"))
	if len(entries) != 1 {
		t.Errorf("a/b holds %d entries", len(entries))
	}
}

func TestList(t *testing.T) {
	r, _, _ := tree(t)
	infos, err := r.List("sub")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fi := range infos {
		names = append(names, fi.Name())
	}
	if got := strings.Join(names, ","); got != "back,deeper,ok,okdir" {
		t.Fatalf("names %s", got)
	}
	if infos[0].Mode()&fs.ModeSymlink == 0 {
		t.Error("symlink followed")
	}
	for p, want := range map[string]error{"abs-root": ErrEscape, "up": ErrEscape, "file": ErrNotDir, "missing": fs.ErrNotExist, "..": ErrInvalidPath} {
		if _, err := r.List(p); !errors.Is(err, want) {
			t.Errorf("List(%q) = %v, want %v", p, err, want)
		}
	}
	if infos, err := r.List(""); err != nil || len(infos) == 0 {
		t.Errorf("List root: %v", err)
	}
}

func TestResolve(t *testing.T) {
	r, _, _ := tree(t)
	for p, want := range map[string]string{"": ".", "sub/ok": "file", "sub/okdir": "sub/deeper", "sub/okdir/file": "sub/deeper/file"} {
		got, err := r.Resolve(p)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{
		"", ".", "file", "sub/ok", "sub/okdir/file", "abs-passwd", "abs-root/etc/passwd",
		"up/outside/secret", "upup", "rel-secret", "proc-root/etc/shadow", "sub/back/outside/secret",
		"sub/deeper/out/secret", "../outside/secret", "/etc/passwd", "loop", "fifo", "a/b/../../..",
		"sub/./deeper/../../up", "sub//okdir///file", "dangling/x", "\x00", "./..", "abs-outside",
	} {
		f.Add(s)
	}
	r, dir, outside := tree(f)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if rel, err := r.Resolve(p); err == nil {
			if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("Resolve(%q) = %q, outside the root", p, rel)
			}
			full := filepath.Join(real, rel)
			if full != real && !strings.HasPrefix(full, real+"/") {
				t.Fatalf("Resolve(%q) = %q lies outside %s", p, full, real)
			}
		}
		if data, _, err := r.ReadFile(p, 1<<20); err == nil && strings.Contains(string(data), "SECRET") {
			t.Fatalf("ReadFile(%q) read the outside secret", p)
		}
		if len(p) < 64 {
			_ = r.WriteFile(p, []byte("fuzz"), 0o644)
			entries, _ := os.ReadDir(outside)
			secret, _ := os.ReadFile(filepath.Join(outside, "secret"))
			if len(entries) != 1 || string(secret) != "SECRET" {
				t.Fatalf("WriteFile(%q) changed the outside directory", p)
			}
		}
		if _, err := r.List(p); err == nil {
			if _, cerr := Clean(p); cerr != nil {
				t.Fatalf("List(%q) accepted an invalid path", p)
			}
		}
	})
}

// A Chroot root follows links as a container's programs see them: an
// absolute target starts at the root, ".." stops there, and nothing leads
// out of it.
func TestChroot(t *testing.T) {
	plain, dir, outside := tree(t)
	r := plain.Chroot()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "etc", "alternatives"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("the root's passwd"), 0o644))
	must(os.MkdirAll(filepath.Join(dir, "usr", "bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr", "bin", "nano"), []byte("nano"), 0o755))
	for name, target := range map[string]string{
		"etc/alternatives/editor": "/usr/bin/nano",
		"usr/bin/editor":          "/etc/alternatives/editor",
		"bin":                     "usr/bin",
		"var-run":                 "/sub/deeper",
		"abs-loop":                "/abs-loop",
	} {
		must(os.Symlink(target, filepath.Join(dir, name)))
	}

	for path, want := range map[string]string{
		"abs-passwd":              "the root's passwd",
		"abs-root/file":           "inside",
		"abs-root/abs-root/file":  "inside",
		"usr/bin/editor":          "nano",
		"bin/editor":              "nano",
		"var-run/file":            "deep",
		"sub/back/etc/passwd":     "the root's passwd",
		"upup/usr/bin/editor":     "nano",
		"sub/okdir/file":          "deep",
		"etc/alternatives/editor": "nano",
	} {
		got, _, err := r.ReadFile(path, 1<<20)
		if err != nil || string(got) != want {
			t.Errorf("ReadFile(%q) = %q, %v; want %q", path, got, err, want)
		}
		if _, _, err := plain.ReadFile(path, 1<<20); strings.Contains(want, "passwd") && err == nil {
			t.Errorf("without Chroot, ReadFile(%q) read the root's file", path)
		}
	}
	// What leads outside on the machine is looked for inside the root.
	for _, p := range []string{"abs-secret", "abs-outside/secret", "up/outside/secret", "rel-secret", "sub/deeper/out/secret", "proc-root/etc/passwd"} {
		got, _, err := r.ReadFile(p, 1<<20)
		if !errors.Is(err, fs.ErrNotExist) || strings.Contains(string(got), "SECRET") {
			t.Errorf("ReadFile(%q) = %q, %v; want not found", p, got, err)
		}
	}
	for _, p := range []string{"abs-loop", "loop/x"} {
		if _, _, err := r.ReadFile(p, 1<<20); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("ReadFile(%q) = %v, want too many links", p, err)
		}
	}
	if got, err := r.Resolve("bin/editor"); err != nil || got != "usr/bin/nano" {
		t.Errorf("Resolve(bin/editor) = %q, %v", got, err)
	}
	if l, err := r.List("var-run"); err != nil || len(l) != 2 {
		t.Errorf("List(var-run) = %v, %v", l, err)
	}
	// A final link is described, replaced, moved and removed, not followed.
	if st, err := r.Stat("usr/bin/editor"); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Stat(usr/bin/editor) = %v, %v", st, err)
	}
	must(r.WriteFile("var-run/made", []byte("made"), 0o644))
	must(r.WriteFile("abs-outside/new", []byte("in the root"), 0o644))
	if got, _ := os.ReadFile(filepath.Join(dir, "sub", "deeper", "made")); string(got) != "made" {
		t.Errorf("var-run/made: %q", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("outside has %d entries", len(entries))
	}
	must(r.Rename("bin", "bin2", false))
	must(r.Remove("bin2", false))
	if _, err := os.Stat(filepath.Join(dir, "usr", "bin", "nano")); err != nil {
		t.Errorf("removing a link removed its target: %v", err)
	}
	must(r.Mkdir("var-run/newdir", 0o755, false))
	if st, err := os.Stat(filepath.Join(dir, "sub", "deeper", "newdir")); err != nil || !st.IsDir() {
		t.Errorf("Mkdir(var-run/newdir): %v", err)
	}
}

// A root seen at /home/user (a session on the node's programs) follows a
// link that leads beneath /home/user as its programs do, absolute or
// climbing out and back, and refuses one that leads elsewhere.
func TestSeenAt(t *testing.T) {
	plain, dir, _ := tree(t)
	r := plain.SeenAt("/home/user")
	for name, target := range map[string]string{
		"home-abs":   "/home/user/sub/deeper/file",
		"home-dir":   "/home/user/sub",
		"home-self":  "/home/user",
		"round-trip": "../user/file",
		"home-other": "/home/other/file",
		"home-up":    "/home/user/../other",
	} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{"home-abs": "deep", "home-dir/deeper/file": "deep", "home-self/file": "inside", "round-trip": "inside", "sub/ok": "inside"} {
		got, _, err := r.ReadFile(p, 1<<20)
		if err != nil || string(got) != want {
			t.Errorf("ReadFile(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"home-other", "home-up/x", "abs-passwd", "abs-root/file", "up/root/file", "upup/etc/passwd", "abs-secret", "rel-secret", "sub/back/file", "proc-root/etc/passwd"} {
		if _, _, err := r.ReadFile(p, 1<<20); !errors.Is(err, ErrEscape) {
			t.Errorf("ReadFile(%q) = %v, want ErrEscape", p, err)
		}
		if err := r.WriteFile(p+"/new", []byte("x"), 0o644); !errors.Is(err, ErrEscape) && !errors.Is(err, ErrNotDir) {
			t.Errorf("WriteFile(%q/new) = %v, want ErrEscape", p, err)
		}
	}
	if got, err := r.Resolve("home-dir/okdir"); err != nil || got != "sub/deeper" {
		t.Errorf("Resolve(home-dir/okdir) = %q, %v", got, err)
	}
}
