package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestImportLayoutResolveAndTenancy(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	img := simpleImage(t)
	dir := writeLayout(t, img, "example.com/team/desk:v1")

	got, err := s.ImportPath(ctx, "acme", dir, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Ref != "example.com/team/desk:v1" {
		t.Fatalf("imported %+v", got)
	}
	want, _ := img.Digest()
	im, err := s.Resolve(ctx, "acme", "example.com/team/desk:v1")
	if err != nil {
		t.Fatal(err)
	}
	if im.Digest != want.String() || len(im.Layers) != 2 {
		t.Fatalf("resolved %+v, want digest %s and 2 layers", im, want)
	}
	if b, err := os.ReadFile(filepath.Join(im.Layers[0], "etc/os-release")); err != nil || string(b) != "ID=test\n" {
		t.Fatalf("bottom layer: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(im.Layers[1], "home/readme.txt")); err != nil || string(b) != "second layer\n" {
		t.Fatalf("top layer: %q %v", b, err)
	}
	if !slices.Contains(im.Config.Env, "GREETING=hello") || im.Config.Labels["made-by"] != "test" || im.Size == 0 {
		t.Fatalf("config %+v size %d", im.Config, im.Size)
	}
	byDigest, err := s.Resolve(ctx, "acme", want.String())
	if err != nil || byDigest.Ref != want.String() || byDigest.Digest != want.String() {
		t.Fatalf("by digest: %+v %v", byDigest, err)
	}

	// Another tenant sees neither the tag nor the digest.
	_, err = s.Resolve(ctx, "other", "example.com/team/desk:v1")
	wantCode(t, err, codes.NotFound)
	_, err = s.Resolve(ctx, "other", want.String())
	wantCode(t, err, codes.NotFound)
	if l, _ := s.List(ctx, "other"); len(l) != 0 {
		t.Fatalf("other lists %v", l)
	}
	// Made public, it does.
	if err := s.SetPublic(ctx, "acme", "example.com/team/desk:v1", true); err != nil {
		t.Fatal(err)
	}
	if im, err := s.Resolve(ctx, "other", "example.com/team/desk:v1"); err != nil || !im.Public {
		t.Fatalf("public: %+v %v", im, err)
	}
	if l, _ := s.List(ctx, "other"); len(l) != 1 {
		t.Fatalf("other lists %v", l)
	}
	// But may not delete it.
	wantCode(t, s.Delete(ctx, "other", "example.com/team/desk:v1"), codes.NotFound)
	// The node reports the tag, its owner and that it is public.
	tags, err := s.Tags(ctx)
	if err != nil || len(tags) != 1 || tags[0] != (Tag{Tenant: "acme", Ref: "example.com/team/desk:v1", Digest: want.String(), Public: true}) {
		t.Fatalf("tags %+v %v", tags, err)
	}
}

func TestImportOCITarAndDockerArchiveShareLayers(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	img := simpleImage(t)
	oci := tarDir(t, writeLayout(t, img, "docker.io/library/desk:oci"))
	if _, err := s.Import(ctx, "acme", bytes.NewReader(oci), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	layers1, _ := os.ReadDir(s.layers)

	var prog []Progress
	got, err := s.Import(ctx, "acme", bytes.NewReader(dockerArchive(t, img, "desk:saved")), ImportOptions{Progress: func(p Progress) { prog = append(prog, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Ref != "docker.io/library/desk:saved" {
		t.Fatalf("docker-archive import: %+v", got)
	}
	if len(prog) == 0 || prog[len(prog)-1].Phase != "done" {
		t.Fatalf("progress %+v", prog)
	}
	layers2, _ := os.ReadDir(s.layers)
	if len(layers1) != 2 || len(layers2) != 2 {
		t.Fatalf("layers after OCI import %d, after docker-archive import %d: want 2 shared", len(layers1), len(layers2))
	}
	a, _ := s.Resolve(ctx, "acme", "desk:oci")
	b, _ := s.Resolve(ctx, "acme", "desk:saved")
	if !slices.Equal(a.Layers, b.Layers) {
		t.Fatalf("layers not shared: %v vs %v", a.Layers, b.Layers)
	}
	// An explicit name tags the import.
	got, err = s.Import(ctx, "acme", bytes.NewReader(oci), ImportOptions{Ref: "my-team/qa:v3"})
	if err != nil || got[0].Ref != "docker.io/my-team/qa:v3" {
		t.Fatalf("named import: %+v %v", got, err)
	}
}

func TestImportRejectsBadArchives(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	// A good image first, so "nothing left" is measured against a store in use.
	if _, err := s.ImportPath(ctx, "acme", writeLayout(t, simpleImage(t), "desk:v1"), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	layers, _ := os.ReadDir(s.layers)
	blobs, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))

	junk := make([]byte, 4096)
	_, _ = rand.Read(junk)
	otherArch := "arm64"
	if runtime.GOARCH == "arm64" {
		otherArch = "amd64"
	}
	foreign := makeImage(t, otherArch, layerTar(t, entry{name: "x", body: "y"}))

	tampered := writeLayout(t, makeImage(t, runtime.GOARCH, layerTar(t, entry{name: "a", body: "original"})), "desk:tampered")
	img := makeImage(t, runtime.GOARCH, layerTar(t, entry{name: "a", body: "original"}))
	ls, _ := img.Layers()
	d, _ := ls[0].Digest()
	other := layerOf(t, layerTar(t, entry{name: "a", body: "tampered"}))
	rc, _ := other.Compressed()
	body, _ := io.ReadAll(rc)
	if err := os.WriteFile(filepath.Join(tampered, "blobs", "sha256", d.Hex), body, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		run  func() error
		code codes.Code
	}{
		{"random bytes", func() error { _, err := s.Import(ctx, "acme", bytes.NewReader(junk), ImportOptions{}); return err }, codes.InvalidArgument},
		{"tar without an image", func() error {
			_, err := s.Import(ctx, "acme", bytes.NewReader(layerTar(t, entry{name: "hello.txt", body: "hi"})), ImportOptions{})
			return err
		}, codes.InvalidArgument},
		{"another CPU architecture", func() error {
			_, err := s.Import(ctx, "acme", bytes.NewReader(tarDir(t, writeLayout(t, foreign, "desk:arm"))), ImportOptions{})
			return err
		}, codes.FailedPrecondition},
		{"another CPU architecture, docker-archive", func() error {
			_, err := s.Import(ctx, "acme", bytes.NewReader(dockerArchive(t, foreign, "desk:arm")), ImportOptions{})
			return err
		}, codes.FailedPrecondition},
		{"layer not matching its digest", func() error {
			_, err := s.ImportPath(ctx, "acme", tampered, ImportOptions{})
			return err
		}, codes.InvalidArgument},
		{"malformed name", func() error {
			_, err := s.ImportPath(ctx, "acme", writeLayout(t, simpleImage(t), ""), ImportOptions{Ref: "Bad Name!"})
			return err
		}, codes.InvalidArgument},
		{"missing path", func() error {
			_, err := s.ImportPath(ctx, "acme", filepath.Join(t.TempDir(), "nope.tar"), ImportOptions{})
			return err
		}, codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.run(), tc.code)
			assertNothingLeft(t, s, len(layers), len(blobs))
		})
	}
	if l, _ := s.List(ctx, "acme"); len(l) != 1 {
		t.Fatalf("images after rejected imports: %v", l)
	}
}

func TestReferences(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"debian", "docker.io/library/debian:latest"},
		{"docker.io/library/debian:bookworm", "docker.io/library/debian:bookworm"},
		{"my-team/qa-desktop:v3", "docker.io/my-team/qa-desktop:v3"},
		{"127.0.0.1:5000/a/b:c", "127.0.0.1:5000/a/b:c"},
		{"sha256:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 64)},
	} {
		r, err := ParseRef(tc.in)
		if err != nil || r.Name != tc.want {
			t.Errorf("ParseRef(%q) = %q, %v; want %q", tc.in, r.Name, err, tc.want)
		}
	}
	for _, bad := range []string{"", "UPPER/case", "a b", "x:y:z", "sha256:abc", "repo@sha256:short"} {
		_, err := ParseRef(bad)
		if Code(err) != codes.InvalidArgument {
			t.Errorf("ParseRef(%q): %v, want InvalidArgument", bad, err)
		}
	}
	s, _ := newStore(t)
	_, err := s.Resolve(context.Background(), "acme", "debian:unknown")
	wantCode(t, err, codes.NotFound)
	_, err = s.Resolve(context.Background(), "acme", "Not/A Ref")
	wantCode(t, err, codes.InvalidArgument)
}

func TestPinsKeepImagesThroughGC(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	base := layerTar(t, entry{name: "etc/", typ: '5'}, entry{name: "etc/base", body: "shared"})
	a := makeImage(t, runtime.GOARCH, base, layerTar(t, entry{name: "a", body: "only a"}))
	b := makeImage(t, runtime.GOARCH, base, layerTar(t, entry{name: "b", body: "only b"}))
	if _, err := s.ImportPath(ctx, "acme", writeLayout(t, a, "img:a"), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportPath(ctx, "acme", writeLayout(t, b, "img:b"), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := s.Usage(ctx)
	if err != nil || u.Images != 2 || u.Layers != 3 || u.LayerBytes == 0 || u.BlobBytes == 0 {
		t.Fatalf("usage %+v %v", u, err)
	}
	ia, _ := s.Resolve(ctx, "acme", "img:a")
	if err := s.Pin("session-1", ia.Digest); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "acme", "img:a"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Resolve(ctx, "acme", "img:a")
	wantCode(t, err, codes.NotFound)
	for _, l := range ia.Layers {
		if _, err := os.Stat(l); err != nil {
			t.Fatalf("pinned layer collected: %v", err)
		}
	}
	if u, _ := s.Usage(ctx); u.PinnedBytes == 0 {
		t.Fatalf("pinned bytes not reported: %+v", u)
	}
	if err := s.Unpin("session-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ia.Layers[1]); !os.IsNotExist(err) {
		t.Fatalf("unused layer kept after unpin: %v", err)
	}
	if _, err := os.Stat(ia.Layers[0]); err != nil {
		t.Fatalf("layer img:b still uses was collected: %v", err)
	}
	if err := s.Delete(ctx, "acme", "img:b"); err != nil {
		t.Fatal(err)
	}
	u, _ = s.Usage(ctx)
	layers, _ := os.ReadDir(s.layers)
	if u.Images != 0 || u.Layers != 0 || len(layers) != 0 {
		t.Fatalf("after deleting everything: %+v, %d layer dirs", u, len(layers))
	}
	wantCode(t, s.Pin("session-2", ia.Digest), codes.NotFound)
}

func TestNewRemovesUnfinishedWork(t *testing.T) {
	s, dir := newStore(t)
	// A crashed process's half-unpacked layer (its pid is gone).
	dead := filepath.Join(s.tmp, "999999999-1-1", "layer-abc")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, "half"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), Deps{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(s.tmp); len(entries) != 0 {
		t.Fatalf("leftovers kept: %v", entries)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir mode %v %v, want 0700", fi.Mode(), err)
	}
}
