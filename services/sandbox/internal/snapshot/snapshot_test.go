package snapshot

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

func TestRoundTripKeepsWhiteoutsAndOpaqueDirs(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "d/e"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "d/e/f"), []byte("content"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/e/f", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(src, "d"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, src, 0); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := Extract(bytes.NewReader(buf.Bytes()), dst); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "d/e/f")); err != nil || string(data) != "content" {
		t.Fatalf("file: %q %v", data, err)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "d/e/f")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "d/e/f" {
		t.Fatalf("link: %q %v", target, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dst, "gone"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("whiteout: %+v %v", st, err)
	}
	val := make([]byte, 8)
	if n, err := unix.Getxattr(filepath.Join(dst, "d"), "trusted.overlay.opaque", val); err != nil || string(val[:n]) != "y" {
		t.Fatalf("opaque xattr: %q %v", val[:n], err)
	}
}

func archive(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestExtractRefusesTamperedArchives(t *testing.T) {
	outside := t.TempDir()
	for name, data := range map[string][]byte{
		"dot-dot":      archive(t, &tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}),
		"absolute":     archive(t, &tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644}),
		"device":       archive(t, &tar.Header{Name: "sda", Typeflag: tar.TypeChar, Devmajor: 8, Mode: 0o600}),
		"through link": archive(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}, &tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Mode: 0o644}),
	} {
		t.Run(name, func(t *testing.T) {
			err := Extract(bytes.NewReader(data), t.TempDir())
			if err == nil {
				t.Fatal("extracted")
			}
			if name != "through link" && !errors.Is(err, ErrBadArchive) {
				t.Fatalf("error %v is not ErrBadArchive", err)
			}
		})
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("wrote outside: %v", entries)
	}
}
