package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// A built layer holds /dev as an empty directory before the root
// filesystem's entries (mmdebstrap leaves /dev out whole), so the runtime's
// mount point is in the image and never in a session's writable layer.
func TestLayerHoldsEmptyDev(t *testing.T) {
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs.tar")
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755},
		{Typeflag: tar.TypeDir, Name: "./etc/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "./etc/motd", Mode: 0o644, Size: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("hi\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rootfs, raw.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix, err := emptyDirEntries()
	if err != nil {
		t.Fatal(err)
	}
	gz := filepath.Join(dir, "layer.tar.gz")
	b := &Builder{d: Deps{Progress: io.Discard}}
	if err := b.compress(context.Background(), time.Now(), prefix, rootfs, gz, int64(raw.Len())); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromFile(gz)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "./dev/" && (h.Typeflag != tar.TypeDir || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0) {
			t.Errorf("./dev/: %+v; want a root-owned 0755 directory", h)
		}
		names = append(names, h.Name)
	}
	want := []string{"./dev/", "./", "./etc/", "./etc/motd"}
	if len(names) != len(want) {
		t.Fatalf("layer entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("layer entries %q, want %q", names, want)
		}
	}
	// GNU tar reads it the same: /dev beside the root filesystem's files.
	out := t.TempDir()
	if b, err := exec.Command("tar", "-C", out, "-xzf", gz).CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, b)
	}
	if fi, err := os.Stat(filepath.Join(out, "dev")); err != nil || !fi.IsDir() {
		t.Fatalf("dev after tar -x: %v, %v", fi, err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "etc/motd")); string(got) != "hi\n" {
		t.Fatalf("etc/motd after tar -x: %q", got)
	}
}
