package overlay

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/var/lib/deskgrid/sandbox/base", true},
		{"/home/me/my project", true},
		{"relative/path", false},
		{"", false},
		{"/a,b", false},
		{"/a:b", false},
		{`/a\b`, false},
		{"/a=b", false},
		{"/a\nb", false},
	} {
		err := CheckPath(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("CheckPath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrUnsafePath) {
			t.Errorf("CheckPath(%q) = %v, not ErrUnsafePath", tc.path, err)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	data := []byte(`22 27 0:21 / /proc rw,relatime - proc proc rw
44 27 0:39 / /srv/sb/sandboxes/a/merged rw,relatime - overlay overlay rw,lowerdir=/x,upperdir=/y,workdir=/z
45 27 0:40 / /srv/sb/sandboxes/my\040dir/merged rw shared:5 - fuse.fuse-overlayfs fuse-overlayfs rw
46 27 0:41 / /srv/sb/sandboxes/a/merged/inner rw - tmpfs tmpfs rw
47 27 0:42 / /srv/sb/sandboxes-other rw - tmpfs tmpfs rw
`)
	got := parseMountinfo(data, "/srv/sb/sandboxes")
	var points []string
	for _, m := range got {
		points = append(points, m.Point)
	}
	want := []string{"/srv/sb/sandboxes/a/merged/inner", "/srv/sb/sandboxes/my dir/merged", "/srv/sb/sandboxes/a/merged"}
	if !slices.Equal(points, want) {
		t.Fatalf("points %q, want %q", points, want)
	}
	if got[1].FSType != "fuse.fuse-overlayfs" {
		t.Errorf("fstype %q", got[1].FSType)
	}
}

func TestDriversMountAndUnmount(t *testing.T) {
	for _, d := range []Driver{Kernel{}, FUSE{}} {
		t.Run(d.Name(), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			l := Layers{Lower: filepath.Join(dir, "l"), Upper: filepath.Join(dir, "u"), Work: filepath.Join(dir, "w"), Merged: filepath.Join(dir, "m")}
			for _, p := range []string{l.Lower, l.Upper, l.Work, l.Merged} {
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(l.Lower, "f"), []byte("lower"), 0o644); err != nil {
				t.Fatal(err)
			}
			used, err := Chain{d}.Mount(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = used.Unmount(ctx, l.Merged) })
			if ok, err := IsMounted(l.Merged); err != nil || !ok {
				t.Fatalf("IsMounted = %v, %v", ok, err)
			}
			if got, err := os.ReadFile(filepath.Join(l.Merged, "f")); err != nil || string(got) != "lower" {
				t.Fatalf("read through merged: %q %v", got, err)
			}
			if err := used.Unmount(ctx, l.Merged); err != nil {
				t.Fatal(err)
			}
			if ok, _ := IsMounted(l.Merged); ok {
				t.Fatal("still mounted")
			}
			if err := used.Unmount(ctx, l.Merged); err != nil {
				t.Fatalf("second unmount: %v", err)
			}
		})
	}
}

func TestUnmountDetachesBusyMount(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := Layers{Lower: filepath.Join(dir, "l"), Upper: filepath.Join(dir, "u"), Work: filepath.Join(dir, "w"), Merged: filepath.Join(dir, "m")}
	for _, p := range []string{l.Lower, l.Upper, l.Work, l.Merged} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := (Kernel{}).Mount(ctx, l); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(l.Merged, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Unmount(ctx, l.Merged); err != nil {
		t.Fatal(err)
	}
	if ok, _ := IsMounted(l.Merged); ok {
		t.Fatal("busy mount not detached")
	}
}
