package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// maxArchiveNames bounds the images, and the names tagging them, one
// archive may bring: each becomes a tag in the state every image call reads.
const maxArchiveNames = 64

// ImportOptions tune an import.
type ImportOptions struct {
	// Ref tags the imported image; empty: the names the archive carries
	// (docker-archive RepoTags, OCI ref annotations), else its digest only.
	Ref      string
	Progress func(Progress)
}

// Import stores the images of an archive read from r: an OCI layout as a
// tar, or a docker-archive (`docker save`), either possibly gzip- or
// zstd-compressed. Only the images for this node's platform are taken.
func (s *Store) Import(ctx context.Context, tenant string, r io.Reader, opt ImportOptions) ([]*Image, error) {
	imgs, err := s.importArchive(ctx, tenant, r, opt)
	return imgs, s.scrub(err)
}

func (s *Store) importArchive(ctx context.Context, tenant string, r io.Reader, opt ImportOptions) ([]*Image, error) {
	// A name that cannot tag anything is refused before the archive is read.
	if opt.Ref != "" {
		pr, err := ParseRef(opt.Ref)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		if pr.Tag == "" {
			return nil, fmt.Errorf("import: %s: a digest cannot name an import: %w", opt.Ref, ErrInvalid)
		}
	}
	work, cleanup, err := s.workDir()
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	defer cleanup()
	ds, err := compression.DecompressStream(r)
	if err != nil {
		return nil, fmt.Errorf("import: reading the archive: %v: %w", err, ErrInvalid)
	}
	defer ds.Close()
	spool := filepath.Join(work, "archive.tar")
	f, err := os.OpenFile(spool, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(f, io.LimitReader(&ctxReader{ctx: ctx, r: ds}, s.maxImport+1))
	if err != nil {
		f.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("import: reading the archive: %w", err)
	}
	if n > s.maxImport {
		f.Close()
		return nil, fmt.Errorf("import: the archive unpacks to more than %d bytes, the most this node takes: %w", s.maxImport, ErrInvalid)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return s.importFile(ctx, tenant, spool, work, opt)
}

// ImportPath imports an OCI layout directory, or an archive file as Import.
func (s *Store) ImportPath(ctx context.Context, tenant, path string, opt ImportOptions) ([]*Image, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("import %s: %v: %w", path, err, ErrNotFound)
	}
	if fi.IsDir() {
		idx, err := layoutIndex(path)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
		imgs, err := s.importIndex(ctx, tenant, path, idx, opt)
		return imgs, s.scrub(err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	defer f.Close()
	return s.Import(ctx, tenant, f, opt)
}

func (s *Store) importFile(ctx context.Context, tenant, spool, work string, opt ImportOptions) ([]*Image, error) {
	names, err := tarNames(spool)
	if err != nil {
		return nil, fmt.Errorf("import: not a tar archive: %v: %w", err, ErrInvalid)
	}
	switch {
	case names.isFile("index.json") && names.isFile("oci-layout"):
		dir := filepath.Join(work, "layout")
		if err := extractLayout(spool, dir); err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		// The layout holds the same bytes again.
		_ = os.Remove(spool)
		idx, err := layoutIndex(dir)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		return s.importIndex(ctx, tenant, dir, idx, opt)
	case names.isFile("manifest.json"):
		return s.importDockerArchive(ctx, tenant, spool, names, opt)
	}
	return nil, fmt.Errorf("import: the archive holds no image (neither an OCI layout's index.json nor a docker-archive's manifest.json): %w", ErrInvalid)
}

func (s *Store) importDockerArchive(ctx context.Context, tenant, spool string, sizes tarEntries, opt ImportOptions) ([]*Image, error) {
	if n, err := sizes.size("manifest.json"); err != nil || n > maxMetadataBytes {
		if err != nil {
			return nil, fmt.Errorf("import: the docker-archive's manifest.json: %w", err)
		}
		return nil, fmt.Errorf("import: the docker-archive's manifest.json is %d bytes, more than %d: %w", n, maxMetadataBytes, ErrInvalid)
	}
	opener := func() (io.ReadCloser, error) { return os.Open(spool) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("import: docker-archive manifest.json: %v: %w", err, ErrInvalid)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("import: the docker-archive lists no image: %w", ErrInvalid)
	}
	if opt.Ref != "" && len(m) > 1 {
		return nil, fmt.Errorf("import: the archive holds %d images; a name can tag only one: %w", len(m), ErrInvalid)
	}
	names := 0
	for _, d := range m {
		names += max(1, len(d.RepoTags))
	}
	if len(m) > maxArchiveNames || opt.Ref == "" && names > maxArchiveNames {
		return nil, fmt.Errorf("import: the archive names %d images (%d names), more than the %d one import may: %w", len(m), names, maxArchiveNames, ErrInvalid)
	}
	var out []*Image
	for i, d := range m {
		if n, err := sizes.size(d.Config); err != nil || n > maxMetadataBytes {
			if err != nil {
				return nil, fmt.Errorf("import: image %d's configuration: %w", i, err)
			}
			return nil, fmt.Errorf("import: image %d's configuration is %d bytes, more than the %d an image may have: %w", i, n, maxMetadataBytes, ErrInvalid)
		}
		if len(d.Layers) > maxLayers {
			return nil, fmt.Errorf("import: image %d has %d layers, more than the %d an image may have: %w", i, len(d.Layers), maxLayers, ErrInvalid)
		}
		var t *name.Tag
		var refs []string
		for _, rt := range d.RepoTags {
			tg, err := name.NewTag(rt)
			if err != nil {
				return nil, fmt.Errorf("import: tag %q: %v: %w", rt, err, ErrInvalid)
			}
			if t == nil {
				t = &tg
			}
			refs = append(refs, rt)
		}
		if t == nil && len(m) > 1 {
			return nil, fmt.Errorf("import: image %d of the archive has no tag to find it by: %w", i, ErrInvalid)
		}
		img, err := tarball.Image(opener, t)
		if err != nil {
			return nil, fmt.Errorf("import: %v: %w", err, ErrInvalid)
		}
		got, err := s.ingestNamed(ctx, tenant, img, refs, opt)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// layoutIndex opens the OCI layout at dir, its index.json no larger than an
// image's metadata may be.
func layoutIndex(dir string) (v1.ImageIndex, error) {
	if fi, err := os.Stat(filepath.Join(dir, "index.json")); err == nil && fi.Size() > maxMetadataBytes {
		return nil, fmt.Errorf("the layout's index.json is %d bytes, more than %d: %w", fi.Size(), maxMetadataBytes, ErrInvalid)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("not an OCI layout: %v: %w", err, ErrInvalid)
	}
	return idx, nil
}

// metadataBlob refuses an index, manifest or configuration of the layout
// at dir that is larger than maxMetadataBytes (as described, or on disk)
// before anything reads it whole.
func metadataBlob(dir string, d v1.Descriptor) error {
	size := d.Size
	if fi, err := os.Stat(filepath.Join(dir, "blobs", d.Digest.Algorithm, d.Digest.Hex)); err == nil {
		size = max(size, fi.Size())
	}
	if size > maxMetadataBytes {
		return fmt.Errorf("%s is %d bytes, more than the %d an index, manifest or configuration may have: %w", d.Digest, size, maxMetadataBytes, ErrInvalid)
	}
	return nil
}

// importIndex takes every image of an OCI index (of the layout at dir) for
// this node's platform.
func (s *Store) importIndex(ctx context.Context, tenant, dir string, idx v1.ImageIndex, opt ImportOptions) ([]*Image, error) {
	type found struct {
		img  v1.Image
		refs []string
	}
	var imgs []found
	var others []string
	var walk func(idx v1.ImageIndex, refs []string, depth int) error
	walk = func(idx v1.ImageIndex, refs []string, depth int) error {
		if depth > 4 {
			return fmt.Errorf("image index nested too deep: %w", ErrInvalid)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return fmt.Errorf("image index: %v: %w", err, ErrInvalid)
		}
		for _, d := range im.Manifests {
			r := append(refNames(d.Annotations), refs...)
			if d.Platform != nil && (d.Platform.OS != s.os || d.Platform.Architecture != s.arch) {
				others = append(others, d.Platform.OS+"/"+d.Platform.Architecture)
				continue
			}
			if d.MediaType.IsIndex() || d.MediaType.IsImage() {
				if err := metadataBlob(dir, d); err != nil {
					return err
				}
			}
			switch {
			case d.MediaType.IsIndex():
				child, err := idx.ImageIndex(d.Digest)
				if err != nil {
					return fmt.Errorf("image index %s: %v: %w", d.Digest, err, ErrInvalid)
				}
				if err := walk(child, r, depth+1); err != nil {
					return err
				}
			case d.MediaType.IsImage():
				img, err := idx.Image(d.Digest)
				if err != nil {
					return fmt.Errorf("image %s: %v: %w", d.Digest, err, ErrInvalid)
				}
				m, err := img.Manifest()
				if err != nil {
					return fmt.Errorf("image %s: %v: %w", d.Digest, err, ErrInvalid)
				}
				if err := metadataBlob(dir, m.Config); err != nil {
					return fmt.Errorf("image %s: configuration: %w", d.Digest, err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					return fmt.Errorf("image %s: configuration: %v: %w", d.Digest, err, ErrInvalid)
				}
				if cf.OS != s.os || cf.Architecture != s.arch {
					others = append(others, cf.OS+"/"+cf.Architecture)
					continue
				}
				imgs = append(imgs, found{img, r})
				if len(imgs) > maxArchiveNames {
					return fmt.Errorf("the archive holds more than %d images, the most one import may: %w", maxArchiveNames, ErrInvalid)
				}
			}
		}
		return nil
	}
	if err := walk(idx, nil, 0); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	if len(imgs) == 0 {
		if len(others) > 0 {
			return nil, fmt.Errorf("import: the archive has images for %s only; this node runs %s/%s: %w", strings.Join(others, ", "), s.os, s.arch, ErrPrecondition)
		}
		return nil, fmt.Errorf("import: the archive holds no image: %w", ErrInvalid)
	}
	names := 0
	for _, f := range imgs {
		names += max(1, len(f.refs))
	}
	if opt.Ref == "" && names > maxArchiveNames {
		return nil, fmt.Errorf("import: the archive names its images %d times, more than the %d one import may: %w", names, maxArchiveNames, ErrInvalid)
	}
	if opt.Ref != "" && len(imgs) > 1 {
		return nil, fmt.Errorf("import: the archive holds %d images for this platform; a name can tag only one: %w", len(imgs), ErrInvalid)
	}
	var out []*Image
	for _, f := range imgs {
		got, err := s.ingestNamed(ctx, tenant, f.img, f.refs, opt)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// ingestNamed stores img under opt.Ref, else under each name it carries,
// else by digest alone.
func (s *Store) ingestNamed(ctx context.Context, tenant string, img v1.Image, refs []string, opt ImportOptions) ([]*Image, error) {
	if opt.Ref != "" {
		refs = []string{opt.Ref}
	}
	var names []string
	for _, r := range refs {
		pr, err := ParseRef(r)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		if pr.Tag == "" {
			return nil, fmt.Errorf("import: %s: a digest cannot name an import: %w", r, ErrInvalid)
		}
		names = append(names, pr.Name)
	}
	if len(names) == 0 {
		names = []string{""}
	}
	var out []*Image
	for i, n := range names {
		p := opt.Progress
		if i > 0 {
			p = nil
		}
		got, err := s.ingest(ctx, img, tenant, n, nil, p)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		out = append(out, got)
	}
	return out, nil
}

// fullRef matches a reference with a repository (not a bare "v1" tag).
var fullRef = regexp.MustCompile(`[/:]`)

func refNames(ann map[string]string) []string {
	var out []string
	if n := ann["io.containerd.image.name"]; n != "" {
		out = append(out, n)
	} else if n := ann["org.opencontainers.image.ref.name"]; n != "" && fullRef.MatchString(n) {
		out = append(out, n)
	}
	return out
}

func cleanName(n string) string { return strings.TrimPrefix(filepath.Clean("/"+n), "/") }

// tarEntry is a file of a tar as tarNames saw it: the largest of the regular
// files of that name, or where a link of that name leads.
type tarEntry struct {
	size int64
	link string
}

// tarEntries lists the files and links of a tar by their cleaned names.
type tarEntries map[string]tarEntry

// size is the size of the file named n, following links as go-containerregistry
// does (each relative to the link's directory), at most 8 of them: more, or a
// loop, is no archive docker wrote.
func (e tarEntries) size(n string) (int64, error) {
	n = cleanName(n)
	for range 8 {
		t, ok := e[n]
		if !ok || t.link == "" {
			return t.size, nil
		}
		n = cleanName(path.Join(path.Dir(n), path.Clean(t.link)))
	}
	return 0, fmt.Errorf("%s: too many links: %w", n, ErrInvalid)
}

func (e tarEntries) isFile(n string) bool {
	t, ok := e[n]
	return ok && t.link == ""
}

// tarNames lists the regular files and links of a tar.
func tarNames(file string) (tarEntries, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names := tarEntries{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		n := cleanName(h.Name)
		switch h.Typeflag {
		case tar.TypeReg:
			if t := names[n]; t.link == "" {
				names[n] = tarEntry{size: max(t.size, h.Size)}
			}
		case tar.TypeSymlink, tar.TypeLink:
			names[n] = tarEntry{link: h.Linkname}
		}
	}
}

var layoutEntry = regexp.MustCompile(`^(oci-layout|index\.json|blobs/sha256/[0-9a-f]{64})$`)

// extractLayout writes an OCI layout tar's files into dir: only regular files
// named as a layout names them, so the archive cannot place anything else.
func extractLayout(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %v: %w", err, ErrInvalid)
		}
		n := cleanName(h.Name)
		if h.Typeflag != tar.TypeReg || !layoutEntry.MatchString(n) {
			continue
		}
		w, err := root.OpenFile(n, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, tr)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
