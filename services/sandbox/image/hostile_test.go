package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// TestHostileLayersStayInTheirDirectory unpacks crafted layers that try to
// write outside their layer directory ("..", absolute paths, symlink and
// hardlink escapes), make device nodes, set overlayfs's own xattrs, or
// fill the disk; none may touch anything outside the layer.
func TestHostileLayersStayInTheirDirectory(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	victim := filepath.Join(root, "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "passwd"), []byte("root:x:0:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(root, "a", "b", "c", "images")
	s, err := New(ctx, Deps{Dir: store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxLayerBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == store || filepath.Dir(p) == store {
				if p == store {
					return filepath.SkipDir
				}
				return err
			}
			b, _ := os.ReadFile(p)
			out[p] = string(b)
			return nil
		})
		return out
	}
	before := snapshot()
	up := "../../../../../victim/"

	for _, tc := range []struct {
		name    string
		entries []entry
		code    codes.Code // OK: imports, contained
		check   func(t *testing.T, layer string)
	}{
		{name: "dot-dot path", entries: []entry{{name: up + "passwd", body: "owned\n"}},
			check: func(t *testing.T, l string) { mustRead(t, filepath.Join(l, "victim/passwd"), "owned\n") }},
		{name: "absolute path", entries: []entry{{name: victim + "/passwd", body: "owned\n"}},
			check: func(t *testing.T, l string) { mustRead(t, filepath.Join(l, victim, "passwd"), "owned\n") }},
		{name: "symlink to a host dir then a file through it", entries: []entry{
			{name: "escape", typ: tar.TypeSymlink, link: victim},
			{name: "escape/passwd", body: "owned\n"},
		}, check: func(t *testing.T, l string) { mustRead(t, filepath.Join(l, victim, "passwd"), "owned\n") }},
		{name: "relative symlink climbing out then a file through it", entries: []entry{
			{name: "up", typ: tar.TypeSymlink, link: "../../../../../../../../"},
			{name: "up" + victim + "/passwd", body: "owned\n"},
		}, check: func(t *testing.T, l string) { mustRead(t, filepath.Join(l, victim, "passwd"), "owned\n") }},
		{name: "symlink replaced by a file write", entries: []entry{
			{name: "pw", typ: tar.TypeSymlink, link: victim + "/passwd"},
			{name: "pw", body: "owned\n"},
		}, check: func(t *testing.T, l string) { mustRead(t, filepath.Join(l, "pw"), "owned\n") }},
		{name: "hardlink to a host file", entries: []entry{
			{name: "hl", typ: tar.TypeLink, link: victim + "/passwd"},
		}, code: codes.InvalidArgument},
		{name: "hardlink climbing out", entries: []entry{
			{name: "hl", typ: tar.TypeLink, link: up + "passwd"},
		}, code: codes.InvalidArgument},
		{name: "hardlink through a symlink", entries: []entry{
			{name: "s", typ: tar.TypeSymlink, link: victim},
			{name: "hl", typ: tar.TypeLink, link: "s/passwd"},
		}, code: codes.InvalidArgument},
		{name: "device nodes", entries: []entry{
			{name: "dev/", typ: tar.TypeDir},
			{name: "dev/sda", typ: tar.TypeBlock, devmajor: 8, mode: 0o666},
			{name: "dev/mem", typ: tar.TypeChar, devmajor: 1, mode: 0o666},
			{name: "dev/ok", body: "file"},
		}, check: func(t *testing.T, l string) {
			for _, n := range []string{"dev/sda", "dev/mem"} {
				if _, err := os.Lstat(filepath.Join(l, n)); !os.IsNotExist(err) {
					t.Fatalf("%s was made: %v", n, err)
				}
			}
			mustRead(t, filepath.Join(l, "dev/ok"), "file")
		}},
		{name: "overlayfs xattrs", entries: []entry{
			{name: "d/", typ: tar.TypeDir, pax: map[string]string{"SCHILY.xattr.trusted.overlay.redirect": "/etc", "SCHILY.xattr.user.note": "kept"}},
		}, check: func(t *testing.T, l string) {
			buf := make([]byte, 64)
			if _, err := unix.Lgetxattr(filepath.Join(l, "d"), "trusted.overlay.redirect", buf); err == nil {
				t.Fatal("trusted.overlay.redirect was set")
			}
		}},
		{name: "huge file", entries: []entry{{name: "big", body: string(bytes.Repeat([]byte("x"), 2<<20))}}, code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layers, _ := os.ReadDir(s.layers)
			blobs, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
			img := makeImage(t, runtime.GOARCH, layerTar(t, tc.entries...))
			got, err := s.Import(ctx, "acme", bytes.NewReader(tarDir(t, writeLayout(t, img, "hostile:"+safeTag(tc.name)))), ImportOptions{})
			after := snapshot()
			for p, b := range before {
				if after[p] != b {
					t.Fatalf("%s changed to %q", p, after[p])
				}
			}
			for p := range after {
				if _, ok := before[p]; !ok {
					t.Fatalf("%s was created outside the store", p)
				}
			}
			if tc.code != codes.OK {
				wantCode(t, err, tc.code)
				assertNothingLeft(t, s, len(layers), len(blobs))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got[0].Layers[0])
		})
	}
}

func mustRead(t *testing.T, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != want {
		t.Fatalf("%s: %q %v, want %q", p, b, err, want)
	}
}

func safeTag(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// TestWhiteoutsUnpackInOverlayForm checks that OCI whiteouts become what
// overlayfs reads in a lower dir, and that the image's layers, mounted as
// overlay lower dirs, show the image's files.
func TestWhiteoutsUnpackInOverlayForm(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	img := makeImage(t, runtime.GOARCH,
		layerTar(t, entry{name: "etc/", typ: tar.TypeDir}, entry{name: "etc/gone", body: "x"}, entry{name: "etc/kept", body: "k"},
			entry{name: "opaque/", typ: tar.TypeDir}, entry{name: "opaque/old", body: "old"}),
		layerTar(t, entry{name: "etc/", typ: tar.TypeDir}, entry{name: "etc/.wh.gone"},
			entry{name: "opaque/", typ: tar.TypeDir}, entry{name: "opaque/.wh..wh..opq"}, entry{name: "opaque/new", body: "new"}))
	got, err := s.ImportPath(ctx, "acme", writeLayout(t, img, "wh:v1"), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	top := got[0].Layers[1]
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(top, "etc/gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("whiteout: %+v %v", st, err)
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(top, "opaque"), "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("opaque xattr: %q %v", buf[:n], err)
	}
	if _, err := os.Lstat(filepath.Join(top, "opaque/.wh..wh..opq")); !os.IsNotExist(err) {
		t.Fatalf("opaque marker written as a file: %v", err)
	}
	merged := mountLowers(t, got[0].Layers)
	mustRead(t, filepath.Join(merged, "etc/kept"), "k")
	mustRead(t, filepath.Join(merged, "opaque/new"), "new")
	for _, n := range []string{"etc/gone", "opaque/old"} {
		if _, err := os.Lstat(filepath.Join(merged, n)); !os.IsNotExist(err) {
			t.Fatalf("%s visible through the overlay: %v", n, err)
		}
	}
}

// mountLowers mounts layers (bottom first) read-only as overlayfs lower dirs.
func mountLowers(t *testing.T, layers []string) string {
	t.Helper()
	merged := t.TempDir()
	lower := ""
	for i := len(layers) - 1; i >= 0; i-- {
		if lower != "" {
			lower += ":"
		}
		lower += layers[i]
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, "lowerdir="+lower); err != nil {
		t.Skipf("overlayfs mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

// TestErrorsNameNoNodePath imports archives that fail in the node's work
// space (a hardlink to a missing file, a file where a directory must be, a
// blob the manifest names and the archive lacks): the error names the
// layer's own paths and the blob, never the store's directory or the work
// directory's name (which holds the node's pid).
func TestErrorsNameNoNodePath(t *testing.T) {
	ctx := context.Background()
	s, dir := newStore(t)
	try := func(name string, archive []byte, want string) {
		t.Helper()
		_, err := s.Import(ctx, "acme", bytes.NewReader(archive), ImportOptions{Ref: "paths:" + name})
		wantCode(t, err, codes.InvalidArgument)
		if strings.Contains(err.Error(), dir) || strings.Contains(err.Error(), strconv.Itoa(os.Getpid())+"-") {
			t.Errorf("%s: the error names the node's paths: %v", name, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: the error %q does not say %q", name, err, want)
		}
	}
	layout := func(es ...entry) []byte {
		return tarDir(t, writeLayout(t, makeImage(t, runtime.GOARCH, layerTar(t, es...)), ""))
	}
	try("hardlink", layout(entry{name: "hl", typ: tar.TypeLink, link: "nothere"}), "nothere")
	try("parent", layout(entry{name: "d", body: "x"}, entry{name: "d/e", body: "y"}), "not a directory")
	img := simpleImage(t)
	rawM, _ := img.RawManifest()
	rawC, _ := img.RawConfigFile()
	var l rawLayout
	l.add(rawC)
	md := l.add(rawM)
	md.MediaType = types.OCIManifestSchema1
	l.index, _ = json.Marshal(v1.IndexManifest{SchemaVersion: 2, Manifests: []v1.Descriptor{md}})
	layers, _ := img.Layers()
	d, _ := layers[0].Digest()
	try("lacking", l.tar(t), d.Hex)
}
