package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc/codes"
)

type entry struct {
	name, body string
	typ        byte
	link       string
	mode       int64
	pax        map[string]string
	devmajor   int64
}

func layerTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, PAXRecords: e.pax, Devmajor: e.devmajor}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t testing.TB, tarBytes []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// makeImage builds an OCI image of the given layers (each a tar) for arch.
func makeImage(t testing.TB, arch string, layers ...[]byte) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, layerOf(t, l)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "GREETING=hello"}
	cf.Config.Cmd = []string{"/bin/sh"}
	cf.Config.Labels = map[string]string{"made-by": "test"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

func simpleImage(t testing.TB) v1.Image {
	return makeImage(t, runtime.GOARCH,
		layerTar(t, entry{name: "etc/", typ: tar.TypeDir}, entry{name: "etc/os-release", body: "ID=test\n"}, entry{name: "bin/", typ: tar.TypeDir}),
		layerTar(t, entry{name: "home/", typ: tar.TypeDir}, entry{name: "home/readme.txt", body: "second layer\n"}))
}

// writeLayout writes img as an OCI layout directory, named ref.
func writeLayout(t testing.TB, img v1.Image, ref string) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	var opts []layout.Option
	if ref != "" {
		opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref}))
	}
	if err := p.AppendImage(img, opts...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tarDir makes a tar of a directory's files (an OCI layout as a tar).
func tarDir(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// dockerArchive makes a `docker save` style tarball of img tagged ref.
func dockerArchive(t testing.TB, img v1.Image, ref string) []byte {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newStore(t testing.TB) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images")
	s, err := New(context.Background(), Deps{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func wantCode(t testing.TB, err error, want codes.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", want)
	}
	if got := Code(err); got != want {
		t.Fatalf("got %s (%v), want %s", got, err, want)
	}
}

// assertNothingLeft checks that a failed operation left no work, layer or
// blob in the store beyond what it held before.
func assertNothingLeft(t testing.TB, s *Store, layersBefore, blobsBefore int) {
	t.Helper()
	tmp, _ := os.ReadDir(s.tmp)
	if len(tmp) != 0 {
		t.Fatalf("work left in %s: %v", s.tmp, tmp)
	}
	layers, _ := os.ReadDir(s.layers)
	if len(layers) != layersBefore {
		t.Fatalf("layers: %d, want %d", len(layers), layersBefore)
	}
	blobs, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	if len(blobs) != blobsBefore {
		t.Fatalf("blobs: %d, want %d", len(blobs), blobsBefore)
	}
}
