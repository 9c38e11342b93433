package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc/codes"
)

// rawLayout is an OCI layout written blob by blob, so a test can make one
// no honest tool would: a huge configuration, thousands of layers.
type rawLayout struct {
	blobs map[string][]byte
	index []byte
}

func (l *rawLayout) add(b []byte) v1.Descriptor {
	d := sha256Of(b)
	if l.blobs == nil {
		l.blobs = map[string][]byte{}
	}
	l.blobs[hexOf(d)] = b
	return v1.Descriptor{Digest: mustHash(d), Size: int64(len(b))}
}

// image adds a manifest of config and layers (each a tar, listed as often
// as it appears) and names it in the index.
func (l *rawLayout) image(t testing.TB, config []byte, layers ...[]byte) {
	t.Helper()
	cd := l.add(config)
	cd.MediaType = types.OCIConfigJSON
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cd}
	for _, b := range layers {
		d := l.add(b)
		d.MediaType = types.OCIUncompressedLayer
		m.Layers = append(m.Layers, d)
	}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	md := l.add(mb)
	md.MediaType = types.OCIManifestSchema1
	md.Annotations = map[string]string{"org.opencontainers.image.ref.name": "bomb:v1"}
	if l.index, err = json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{md}}); err != nil {
		t.Fatal(err)
	}
}

// tar is the layout as a gzip-compressed tar.
func (l *rawLayout) tar(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	put := func(name string, b []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	put("index.json", l.index)
	for h, b := range l.blobs {
		put("blobs/sha256/"+h, b)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// configOf is an image configuration for this machine, its label padded
// to about pad bytes, with a diff id per layer.
func configOf(t testing.TB, pad int, layers ...[]byte) []byte {
	t.Helper()
	cf := v1.ConfigFile{OS: "linux", Architecture: runtime.GOARCH, RootFS: v1.RootFS{Type: "layers"}}
	cf.Config.Labels = map[string]string{"pad": strings.Repeat("x", pad)}
	for _, b := range layers {
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, mustHash(sha256Of(b)))
	}
	b, err := json.Marshal(cf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dockerTar is a docker-archive of the given files and links, uncompressed.
func dockerTar(t testing.TB, files map[string][]byte, links map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, b := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for n, to := range links {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: to, Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestImportBombsAreBounded imports small archives that would make the node
// read, keep or write far more than they weigh: a configuration, manifest
// or index of many megabytes (read whole into memory; a 256 KiB gzip
// archive holding a 256 MiB configuration took 4.6 GB of allocations and
// was stored, its label read back at every image call), an image of 10,000
// layers, a gzip bomb, a layer of many empty files, a docker-archive whose
// configuration is a link loop. Each is refused with InvalidArgument naming
// the bound, and nothing is left in the store.
func TestImportBombsAreBounded(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxImportBytes: 16 << 20, MaxLayerEntries: 1000, MaxLayerBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	layer := layerTar(t, entry{name: "f", body: "x"})
	big := maxMetadataBytes + 1<<20
	layoutOf := func(config []byte, layers ...[]byte) []byte {
		var l rawLayout
		l.image(t, config, layers...)
		return l.tar(t)
	}
	for _, tc := range []struct {
		name    string
		archive func() []byte
		want    string
	}{
		{name: "configuration over the bound", want: "configuration", archive: func() []byte {
			return layoutOf(configOf(t, big, layer), layer)
		}},
		{name: "configuration kept over the bound", want: "a node keeps", archive: func() []byte {
			return layoutOf(configOf(t, maxConfigKept+1, layer), layer)
		}},
		{name: "manifest over the bound", want: "more than", archive: func() []byte {
			var l rawLayout
			l.image(t, configOf(t, 0, layer), layer)
			// Swap the manifest for one carrying a huge annotation.
			var ix v1.IndexManifest
			if err := json.Unmarshal(l.index, &ix); err != nil {
				t.Fatal(err)
			}
			var m v1.Manifest
			if err := json.Unmarshal(l.blobs[ix.Manifests[0].Digest.Hex], &m); err != nil {
				t.Fatal(err)
			}
			m.Annotations = map[string]string{"pad": strings.Repeat("x", big)}
			mb, _ := json.Marshal(m)
			d := l.add(mb)
			ix.Manifests[0].Digest, ix.Manifests[0].Size = d.Digest, d.Size
			l.index, _ = json.Marshal(ix)
			return l.tar(t)
		}},
		{name: "index.json over the bound", want: "index.json", archive: func() []byte {
			var l rawLayout
			l.image(t, configOf(t, 0, layer), layer)
			var ix v1.IndexManifest
			if err := json.Unmarshal(l.index, &ix); err != nil {
				t.Fatal(err)
			}
			ix.Annotations = map[string]string{"pad": strings.Repeat("x", big)}
			l.index, _ = json.Marshal(ix)
			return l.tar(t)
		}},
		{name: "10,000 layers", want: "layers", archive: func() []byte {
			layers := make([][]byte, 10000)
			for i := range layers {
				layers[i] = layer
			}
			return layoutOf(configOf(t, 0, layers...), layers...)
		}},
		{name: "gzip bomb", want: "unpacks to more than", archive: func() []byte {
			return layoutOf(configOf(t, 0, layer), layer, make([]byte, 64<<20))
		}},
		{name: "layer of many empty files", want: "more than 1000 files", archive: func() []byte {
			var es []entry
			for i := range 2000 {
				es = append(es, entry{name: fmt.Sprintf("f%d", i)})
			}
			many := layerTar(t, es...)
			return layoutOf(configOf(t, 0, many), many)
		}},
		{name: "zeros after the tar's end", want: "decompresses to more than", archive: func() []byte {
			// A small gzip blob whose stream goes on past the tar: read
			// for its digests, it was decompressed to the end.
			whole := append(slices.Clone(layer), make([]byte, 64<<20)...)
			return layoutOf(configOf(t, 0, whole), gzipOf(t, whole))
		}},
		{name: "docker-archive naming 1,000 tags", want: "more than the 64", archive: func() []byte {
			// Each name a tag in the state every image call reads: a
			// 20 KiB archive took 9 s and left 1,000 tags.
			var tags []string
			for i := range 1000 {
				tags = append(tags, fmt.Sprintf("bomb/t%d:v1", i))
			}
			m, _ := json.Marshal([]map[string]any{{"Config": "c.json", "RepoTags": tags, "Layers": []string{"l.tar"}}})
			return dockerTar(t, map[string][]byte{"manifest.json": m, "c.json": configOf(t, 0, layer), "l.tar": layer}, nil)
		}},
		{name: "docker-archive configuration over the bound", want: "configuration", archive: func() []byte {
			return gzipOf(t, dockerTar(t, map[string][]byte{
				"manifest.json": []byte(`[{"Config":"c.json","RepoTags":["bomb:v1"],"Layers":["l.tar"]}]`),
				"c.json":        configOf(t, big, layer),
				"l.tar":         layer,
			}, nil))
		}},
		{name: "docker-archive configuration behind a link loop", want: "too many links", archive: func() []byte {
			return dockerTar(t, map[string][]byte{
				"manifest.json": []byte(`[{"Config":"c.json","RepoTags":["bomb:v1"],"Layers":["l.tar"]}]`),
				"l.tar":         layer,
			}, map[string]string{"c.json": "c.json"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layers, _ := os.ReadDir(s.layers)
			blobs, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
			_, err := s.Import(ctx, "acme", bytes.NewReader(tc.archive()), ImportOptions{})
			wantCode(t, err, codes.InvalidArgument)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name the bound (%q)", err, tc.want)
			}
			assertNothingLeft(t, s, len(layers), len(blobs))
			if imgs, _ := s.List(ctx, "acme"); len(imgs) != 0 {
				t.Fatalf("stored: %v", imgs)
			}
		})
	}
}

// TestImportRefusesABadNameUnread imports under a name that cannot tag an
// image: refused before a byte of the archive is read, not after the whole
// of it was spooled and unpacked.
func TestImportRefusesABadNameUnread(t *testing.T) {
	s, _ := newStore(t)
	for _, ref := range []string{"UPPER:v1", "x:" + strings.Repeat("t", 5000), "sha256:" + strings.Repeat("0", 64)} {
		r := &readCounter{r: bytes.NewReader(make([]byte, 1<<20))}
		_, err := s.Import(context.Background(), "acme", r, ImportOptions{Ref: ref})
		wantCode(t, err, codes.InvalidArgument)
		if r.n != 0 {
			t.Errorf("%.20s: %d bytes of the archive read before the name was refused", ref, r.n)
		}
	}
}

type readCounter struct {
	r io.Reader
	n int
}

func (c *readCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestTenantTagsAreBounded imports, as one tenant, more tags than a tenant
// may hold on a node: past the bound a new tag is ResourceExhausted with
// nothing stored, while moving a tag it holds, another tenant's tags and
// the system's go on.
func TestTenantTagsAreBounded(t *testing.T) {
	ctx := context.Background()
	s, err := New(ctx, Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxTenantTags: 3})
	if err != nil {
		t.Fatal(err)
	}
	archive := tarDir(t, writeLayout(t, simpleImage(t), ""))
	imp := func(tenant, ref string) error {
		_, err := s.Import(ctx, tenant, bytes.NewReader(archive), ImportOptions{Ref: ref})
		return err
	}
	for i := range 3 {
		if err := imp("acme", fmt.Sprintf("acme/t%d:v1", i)); err != nil {
			t.Fatal(err)
		}
	}
	wantCode(t, imp("acme", "acme/t3:v1"), codes.ResourceExhausted)
	if _, err := s.Resolve(ctx, "acme", "acme/t3:v1"); Code(err) != codes.NotFound {
		t.Fatalf("the refused tag: %v", err)
	}
	if err := imp("acme", "acme/t0:v1"); err != nil {
		t.Fatalf("moving a tag it holds: %v", err)
	}
	if err := imp("other", "other/t0:v1"); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	for i := range 4 {
		if err := imp("", fmt.Sprintf("system/t%d:v1", i)); err != nil {
			t.Fatalf("the system: %v", err)
		}
	}
}
