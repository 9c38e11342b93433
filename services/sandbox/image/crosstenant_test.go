package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc/codes"
)

// TestAnotherTenantsLayerNeedsItsBytes imports, as another tenant, an
// archive that names the layers of a tenant's private image by their
// digests but does not hold them: a node that took the layers it already
// had would hand that tenant the private files for knowing two digests.
// The layers must come with the archive (or the registry) unless the
// importing tenant already sees an image that has them.
func TestAnotherTenantsLayerNeedsItsBytes(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	img := makeImage(t, runtime.GOARCH,
		layerTar(t, entry{name: "etc/", typ: tar.TypeDir}, entry{name: "etc/os-release", body: "ID=test\n"}),
		layerTar(t, entry{name: "home/", typ: tar.TypeDir}, entry{name: "home/secret.txt", body: "acme's secret\n"}))
	if _, err := s.ImportPath(ctx, "acme", writeLayout(t, img, "acme/private:v1"), ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	// The same manifest and configuration, with no layer in the archive.
	rawM, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	rawC, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var l rawLayout
	l.add(rawC)
	md := l.add(rawM)
	md.MediaType = types.OCIManifestSchema1
	md.Annotations = map[string]string{"org.opencontainers.image.ref.name": "other/stolen:v1"}
	if l.index, err = json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{md}}); err != nil {
		t.Fatal(err)
	}
	blobless := l.tar(t)

	layers, _ := os.ReadDir(s.layers)
	blobs, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	_, err = s.Import(ctx, "other", bytes.NewReader(blobless), ImportOptions{})
	wantCode(t, err, codes.InvalidArgument)
	assertNothingLeft(t, s, len(layers), len(blobs))
	if l, _ := s.List(ctx, "other"); len(l) != 0 {
		t.Fatalf("other got %+v", l[0])
	}
	digest, _ := img.Digest()
	_, err = s.Resolve(ctx, "other", digest.String())
	wantCode(t, err, codes.NotFound)

	// The tenant that owns the layers may name them without their bytes.
	if _, err := s.Import(ctx, "acme", bytes.NewReader(blobless), ImportOptions{Ref: "acme/again:v1"}); err != nil {
		t.Fatalf("the owner's own layers: %v", err)
	}
	// Another tenant that holds the bytes imports them, sharing the layers.
	got, err := s.Import(ctx, "other", bytes.NewReader(tarDir(t, writeLayout(t, img, ""))), ImportOptions{Ref: "other/own:v1"})
	if err != nil {
		t.Fatalf("with the layers' bytes: %v", err)
	}
	mustRead(t, filepath.Join(got[0].Layers[1], "home/secret.txt"), "acme's secret\n")
	// And a public image's layers are anyone's to name.
	if err := s.SetPublic(ctx, "acme", "acme/private:v1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, "third", bytes.NewReader(blobless), ImportOptions{Ref: "third/base:v1"}); err != nil {
		t.Fatalf("a public image's layers: %v", err)
	}
}

// TestTagSquattingStaysWithTheSquatter tags, as a tenant, its own image
// with the name of a public image and of another tenant's private one, then
// deletes them: each tenant keeps resolving what it resolved before; only
// the squatter sees its image, and its delete removes only its own tag.
func TestTagSquattingStaysWithTheSquatter(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	public := makeImage(t, runtime.GOARCH, layerTar(t, entry{name: "who", body: "the desktop"}))
	private := makeImage(t, runtime.GOARCH, layerTar(t, entry{name: "who", body: "acme"}))
	squat := makeImage(t, runtime.GOARCH, layerTar(t, entry{name: "who", body: "evil"}))
	const desk, acme = "deskgrid/desktop:latest", "example.com/acme/private:v1"
	if _, err := s.ImportPath(ctx, "", writeLayout(t, public, ""), ImportOptions{Ref: desk}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPublic(ctx, "", desk, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportPath(ctx, "acme", writeLayout(t, private, ""), ImportOptions{Ref: acme}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{desk, acme} {
		if _, err := s.Import(ctx, "evil", bytes.NewReader(tarDir(t, writeLayout(t, squat, ""))), ImportOptions{Ref: ref}); err != nil {
			t.Fatal(err)
		}
	}
	sees := func(tenant, ref, want string) {
		t.Helper()
		im, err := s.Resolve(ctx, tenant, ref)
		if err != nil {
			t.Fatalf("%s resolves %s: %v", tenant, ref, err)
		}
		mustRead(t, filepath.Join(im.Layers[0], "who"), want)
	}
	sees("evil", desk, "evil")
	sees("evil", acme, "evil")
	sees("acme", desk, "the desktop")
	sees("acme", acme, "acme")
	sees("other", desk, "the desktop")
	if _, err := s.Resolve(ctx, "other", acme); Code(err) != codes.NotFound {
		t.Fatalf("another tenant resolves acme's private name: %v", err)
	}
	for _, ref := range []string{desk, acme} {
		if err := s.Delete(ctx, "evil", ref); err != nil {
			t.Fatal(err)
		}
	}
	sees("acme", desk, "the desktop")
	sees("acme", acme, "acme")
	sees("evil", desk, "the desktop")
	wantCode(t, s.Delete(ctx, "evil", acme), codes.NotFound)
}
