package changes

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if c == "/" {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestList(t *testing.T) {
	lowerFiles := map[string]string{"same.txt": "s", "edit.txt": "a", "gone.txt": "g", "d/x": "x", "d/y": "y", "gonedir/z": "z"}
	for _, tc := range []struct {
		name  string
		upper func(t *testing.T, upper string)
		want  []string
	}{
		{"kernel whiteouts and opaque dir", func(t *testing.T, upper string) {
			write(t, upper, map[string]string{"same.txt": "s", "edit.txt": "b", "new/n": "n", "d/y": "y2"})
			for _, w := range []string{"gone.txt", "gonedir"} {
				if err := unix.Mknod(filepath.Join(upper, w), unix.S_IFCHR, 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := unix.Setxattr(filepath.Join(upper, "d"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
				t.Fatal(err)
			}
		}, []string{"modified d/y", "deleted d/x", "modified edit.txt", "deleted gone.txt", "deleted gonedir/", "added new/", "added new/n"}},
		{"fuse-overlayfs marker files", func(t *testing.T, upper string) {
			write(t, upper, map[string]string{".wh.gone.txt": "", "d/.wh..wh..opq": "", "d/y": "y"})
		}, []string{"deleted d/x", "deleted gone.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lower, upper := t.TempDir(), t.TempDir()
			write(t, lower, lowerFiles)
			tc.upper(t, upper)
			list, err := List(upper, lower, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range list {
				s := fmt.Sprintf("%s %s", c.Kind, c.Path)
				if c.IsDir {
					s += "/"
				}
				got = append(got, s)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Fatalf("got  %q\nwant %q", got, want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		sel, p string
		want   bool
	}{
		{"", "a", true}, {".", "a/b", true}, {"a", "a", true}, {"a", "a/b", true}, {"a", "ab", false}, {"a/b", "a", false},
	} {
		if got := Covers(tc.sel, tc.p); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v", tc.sel, tc.p, got)
		}
	}
}

func TestDiff(t *testing.T) {
	if d, bin := Diff("f", []byte("a\nb\n"), []byte("a\nc\n")); bin || d != "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n" {
		t.Fatalf("diff %q %v", d, bin)
	}
	if _, bin := Diff("f", []byte("a"), []byte{0, 1}); !bin {
		t.Fatal("NUL bytes not taken as binary")
	}
}

func TestCompare(t *testing.T) {
	lower, merged := t.TempDir(), t.TempDir()
	base := map[string]string{"same.txt": "s", "edit.txt": "aaa", "touch.txt": "t", "gone.txt": "g", "olddir/x": "x", "d/keep": "k", "d/rm": "r", "f2d": "f"}
	write(t, lower, base)
	write(t, merged, base)
	// Same size, new content; same content, new time: only the first changed.
	write(t, merged, map[string]string{"edit.txt": "bbb", "d/new": "n"})
	if err := os.Remove(filepath.Join(merged, "f2d")); err != nil {
		t.Fatal(err)
	}
	write(t, merged, map[string]string{"f2d/in": "i", "newdir/a/b": "b"})
	if err := os.Chtimes(filepath.Join(merged, "touch.txt"), time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"gone.txt", "d/rm"} {
		if err := os.Remove(filepath.Join(merged, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(merged, "olddir")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"added d/new", "deleted d/rm", "modified edit.txt", "modified f2d", "added f2d/in", "deleted gone.txt", "added newdir", "added newdir/a", "added newdir/a/b", "deleted olddir"}},
		{"d", []string{"added d/new", "deleted d/rm"}},
		{"d/rm", []string{"deleted d/rm"}},
		{"olddir", []string{"deleted olddir"}},
		{"same.txt", nil},
		{"nowhere", nil},
	} {
		got, err := Compare(merged, lower, tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, c := range got {
			kinds = append(kinds, c.Kind.String()+" "+c.Path)
		}
		if !slices.Equal(kinds, tc.want) {
			t.Errorf("Compare(%q)\n got %q\nwant %q", tc.prefix, kinds, tc.want)
		}
	}
}
