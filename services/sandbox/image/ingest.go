package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Bounds on what an image's metadata makes the node read into memory or
// keep in its state; real images stay far below them.
const (
	// maxMetadataBytes bounds an index, a manifest or a configuration, each
	// read whole (registries take manifests of 4 MiB, as the OCI
	// distribution spec asks).
	maxMetadataBytes = 4 << 20
	// maxConfigKept bounds what the state keeps of a configuration (its
	// environment, command and labels), read at every image call.
	maxConfigKept = 256 << 10
	// maxLayers bounds an image's layers (Docker's overlay2 stops at 128).
	maxLayers = 128
)

// ingest stores img on this node and tags it ref for tenant: every layer's
// compressed blob is verified against its digest and unpacked (verified
// against its diff id) into work space, and only when all of it is whole are
// blobs and layers renamed into place and the tag written, under the state
// lock. A failure leaves nothing behind.
//
// A layer already on the node is taken as it is only when the tenant sees an
// image that has it (or it is among mine, the layers of the image a commit
// builds on); otherwise its bytes must come with img, as a registry or an
// archive serves them, and are checked: knowing a private layer's digests
// is no way to another tenant's files.
func (s *Store) ingest(ctx context.Context, img v1.Image, tenant, ref string, mine []string, progress func(Progress)) (*Image, error) {
	if progress == nil {
		progress = func(Progress) {}
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", classify(err))
	}
	if !mt.IsImage() {
		return nil, fmt.Errorf("%s is not a container image manifest: %w", mt, ErrInvalid)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", classify(err))
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", classify(err))
	}
	digest := sha256Of(rawManifest)
	if len(rawManifest) > maxMetadataBytes {
		return nil, fmt.Errorf("the manifest is %d bytes, more than the %d an image may have: %w", len(rawManifest), maxMetadataBytes, ErrInvalid)
	}
	if len(manifest.Layers) > maxLayers {
		return nil, fmt.Errorf("the image has %d layers, more than the %d an image may have: %w", len(manifest.Layers), maxLayers, ErrInvalid)
	}
	if manifest.Config.Size > maxMetadataBytes {
		return nil, fmt.Errorf("the image configuration is %d bytes, more than the %d an image may have: %w", manifest.Config.Size, maxMetadataBytes, ErrInvalid)
	}
	if !manifest.Config.MediaType.IsConfig() {
		return nil, fmt.Errorf("config media type %q is not an image configuration: %w", manifest.Config.MediaType, ErrInvalid)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading image configuration: %w", classify(err))
	}
	if len(rawConfig) > maxMetadataBytes {
		return nil, fmt.Errorf("the image configuration is %d bytes, more than the %d an image may have: %w", len(rawConfig), maxMetadataBytes, ErrInvalid)
	}
	if got := sha256Of(rawConfig); got != manifest.Config.Digest.String() {
		return nil, fmt.Errorf("image configuration is %s, the manifest says %s: %w", got, manifest.Config.Digest, ErrInvalid)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(rawConfig))
	if err != nil {
		return nil, fmt.Errorf("image configuration: %v: %w", err, ErrInvalid)
	}
	if cf.OS != s.os || cf.Architecture != s.arch {
		return nil, fmt.Errorf("image %s is for %s/%s; this node runs %s/%s: %w", ref, cf.OS, cf.Architecture, s.os, s.arch, ErrPrecondition)
	}
	if len(cf.RootFS.DiffIDs) != len(manifest.Layers) {
		return nil, fmt.Errorf("image has %d layers but %d diff ids: %w", len(manifest.Layers), len(cf.RootFS.DiffIDs), ErrInvalid)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("reading layers: %w", classify(err))
	}

	work, cleanup, err := s.workDir()
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	defer cleanup()

	p := Progress{Phase: "fetching", LayersTotal: len(manifest.Layers)}
	for _, l := range manifest.Layers {
		p.Total += l.Size
	}
	progress(p)

	rec := &imageRecord{
		Digest:       digest,
		ConfigDigest: manifest.Config.Digest.String(),
		Architecture: cf.Architecture,
		OS:           cf.OS,
		Created:      time.Now().UTC(),
		Config: Config{
			Env:        cf.Config.Env,
			Entrypoint: cf.Config.Entrypoint,
			Cmd:        cf.Config.Cmd,
			WorkingDir: cf.Config.WorkingDir,
			User:       cf.Config.User,
			Labels:     cf.Config.Labels,
		},
	}
	if kept, err := json.Marshal(rec.Config); err != nil || len(kept) > maxConfigKept {
		return nil, fmt.Errorf("the image's environment, command and labels take %d bytes, more than the %d a node keeps: %w", len(kept), maxConfigKept, ErrInvalid)
	}
	type placed struct{ from, to string }
	var moves []placed
	sizes := map[string]int64{}
	seen, err := s.layersSeen(tenant)
	if err != nil {
		return nil, err
	}
	for _, d := range mine {
		seen[d] = true
	}
	var reused []string // diff ids already on the node
	for i, desc := range manifest.Layers {
		if !desc.MediaType.IsLayer() {
			return nil, fmt.Errorf("layer %d has media type %q, not a filesystem layer: %w", i, desc.MediaType, ErrInvalid)
		}
		diffID := cf.RootFS.DiffIDs[i]
		rec.LayerDigests = append(rec.LayerDigests, desc.Digest.String())
		rec.DiffIDs = append(rec.DiffIDs, diffID.String())
		p.Layer = desc.Digest.String()
		if seen[diffID.String()] && s.has(diffID.String(), desc.Digest.String()) {
			reused = append(reused, diffID.String())
			p.Done += desc.Size
			p.LayersDone++
			progress(p)
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		blob := filepath.Join(work, "blob-"+desc.Digest.Hex)
		dir := filepath.Join(work, "layer-"+diffID.Hex)
		if _, err := os.Stat(dir); err == nil {
			continue // the same layer twice in one image
		}
		rc, err := layers[i].Compressed()
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", desc.Digest, classify(err))
		}
		base := p.Done
		size, err := s.unpack(ctx, rc, blob, dir, desc.Digest, diffID, func(n int64) {
			p.Done = base + n
			p.Phase = "fetching"
			progress(p)
		})
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", desc.Digest, err)
		}
		sizes[diffID.String()] = size
		p.Done = base + desc.Size
		p.LayersDone++
		p.Phase = "unpacking"
		progress(p)
		moves = append(moves,
			placed{blob, filepath.Join(s.dir, "blobs", "sha256", desc.Digest.Hex)},
			placed{dir, s.layerPath(diffID.String())})
	}
	for _, b := range []struct {
		digest string
		data   []byte
	}{{rec.ConfigDigest, rawConfig}, {digest, rawManifest}} {
		f := filepath.Join(work, "blob-"+hexOf(b.digest))
		if err := writeSynced(f, b.data); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
		moves = append(moves, placed{f, filepath.Join(s.dir, "blobs", "sha256", hexOf(b.digest))})
	}

	var out *Image
	err = s.withState(func(st *state) (bool, error) {
		tagRef := ref
		if tagRef == "" {
			tagRef = digest
			if _, ok := canSee(st, tenant, digest); ok {
				tagRef = "" // reachable already
			}
		}
		if tagRef != "" {
			if err := s.roomForTag(st, tenant, tagRef); err != nil {
				return false, err
			}
		}
		for _, d := range reused {
			if _, err := os.Stat(s.layerPath(d)); err != nil {
				return false, fmt.Errorf("layer %s was collected while in use; try again: %w", d, ErrUnavailable)
			}
		}
		for _, m := range moves {
			if err := os.Rename(m.from, m.to); err != nil {
				if !errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
					return false, fmt.Errorf("image store: %w", err)
				}
			}
		}
		if err := s.index(v1.Descriptor{MediaType: mt, Size: int64(len(rawManifest)), Digest: mustHash(digest)}); err != nil {
			return false, err
		}
		for d, n := range sizes {
			st.Layers[d] = n
		}
		for _, d := range rec.DiffIDs {
			rec.Size += st.Layers[d]
		}
		if old := st.Images[digest]; old != nil {
			rec.Created = old.Created
		}
		st.Images[digest] = rec
		public := false
		if tagRef != "" {
			// The ref, or an untagged import's digest so that it stays
			// reachable.
			tag(st, tenant, tagRef, digest)
		}
		if ref != "" {
			if t := visible(st, tenant, ref); t != nil {
				public = t.Public
			}
		}
		name := ref
		if name == "" {
			name = digest
		}
		out = s.toImage(rec, name, public)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	p.Phase, p.Layer = "done", ""
	progress(p)
	return out, nil
}

// layersSeen is the set of diff ids of the images a tenant sees: its own
// tags' and the public ones'.
func (s *Store) layersSeen(tenant string) (map[string]bool, error) {
	seen := map[string]bool{}
	err := s.withState(func(st *state) (bool, error) {
		for _, t := range st.Tags {
			if t.Tenant != tenant && !t.Public {
				continue
			}
			if rec := st.Images[t.Digest]; rec != nil {
				for _, d := range rec.DiffIDs {
					seen[d] = true
				}
			}
		}
		return false, nil
	})
	return seen, err
}

// has reports whether a layer is unpacked and its blob kept on this node.
func (s *Store) has(diffID, digest string) bool {
	if _, err := os.Stat(s.layerPath(diffID)); err != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(s.dir, "blobs", "sha256", hexOf(digest)))
	return err == nil
}

// unpack reads a compressed layer once: it writes the blob, checks its
// digest, and unpacks the tar (checked against the diff id) into dir with
// containerd's archive package, whiteouts converted to overlayfs form. Device
// nodes are skipped, overlayfs's own xattrs dropped, and the unpacked size
// bounded; every path stays beneath dir (containerd resolves each one, and
// every link, beneath the root).
func (s *Store) unpack(ctx context.Context, rc io.Reader, blob, dir string, digest, diffID v1.Hash, read func(int64)) (int64, error) {
	if digest.Algorithm != "sha256" || diffID.Algorithm != "sha256" {
		return 0, fmt.Errorf("unsupported digest algorithm %s: %w", digest.Algorithm, ErrInvalid)
	}
	f, err := os.OpenFile(blob, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ch, dh := sha256.New(), sha256.New()
	// Both streams are bounded, each by what the layer may unpack to plus
	// its tar headers: zeros after the tar's end (read for the digests)
	// or zstd's skippable frames would otherwise keep the node reading
	// and decompressing terabytes from a small blob, or fill its disk.
	limit := s.maxLayer + s.maxEntries*2048
	counted := &countingReader{r: rc, fn: read}
	compressed := io.TeeReader(&boundedReader{r: counted, left: limit, what: "is"}, io.MultiWriter(f, ch))
	ds, err := compression.DecompressStream(compressed)
	if err != nil {
		return 0, fmt.Errorf("not a layer archive: %v: %w", err, ErrInvalid)
	}
	defer ds.Close()
	tarStream := io.TeeReader(&boundedReader{r: ds, left: limit, what: "decompresses to"}, dh)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return 0, err
	}
	var total, entries int64
	filter := func(h *tar.Header) (bool, error) {
		if entries++; entries > s.maxEntries {
			return false, fmt.Errorf("layer has more than %d files: %w", s.maxEntries, ErrInvalid)
		}
		switch h.Typeflag {
		case tar.TypeBlock, tar.TypeChar:
			s.log.Warn("image layer: device node skipped", "layer", digest.String(), "path", h.Name)
			return false, nil
		}
		total += h.Size
		if total > s.maxLayer {
			return false, fmt.Errorf("layer unpacks to more than %d bytes: %w", s.maxLayer, ErrInvalid)
		}
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, "SCHILY.xattr.trusted.") {
				delete(h.PAXRecords, k)
			}
		}
		return true, nil
	}
	size, err := archive.Apply(ctx, dir, tarStream,
		archive.WithConvertWhiteout(archive.OverlayConvertWhiteout),
		archive.WithFilter(filter))
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, classifyUnpack(err)
	}
	// Whatever follows the tar's end still belongs to the digests.
	if _, err := io.Copy(io.Discard, tarStream); err != nil {
		return 0, classifyUnpack(err)
	}
	if _, err := io.Copy(io.Discard, compressed); err != nil {
		return 0, classify(err)
	}
	if got := "sha256:" + hex.EncodeToString(ch.Sum(nil)); got != digest.String() {
		return 0, fmt.Errorf("content is %s, not the digest %s it was asked for: %w", got, digest, ErrInvalid)
	}
	if got := "sha256:" + hex.EncodeToString(dh.Sum(nil)); got != diffID.String() {
		return 0, fmt.Errorf("uncompressed content is %s, not its diff id %s: %w", got, diffID, ErrInvalid)
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return size, nil
}

// classifyUnpack turns an unpacking failure into one of the store's kinds.
func classifyUnpack(err error) error {
	if errors.Is(err, ErrInvalid) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO) {
		return err
	}
	return fmt.Errorf("unpacking: %w: %w", err, ErrInvalid)
}

// scrubbedError is an error whose message no longer names the node's own
// directory; it still is what it wraps.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrub takes the store's directory out of err's message: a caller learns
// what in its image failed (a layer's own paths), never where the node keeps
// its store or its pid (in the name of its work directory). A session's
// layer directory, given as layer, is "the session's layer".
func (s *Store) scrub(err error, layer ...string) error {
	if err == nil {
		return nil
	}
	work := regexp.MustCompile(regexp.QuoteMeta(s.tmp) + `/[^/\s"]+(/layout|/layer-[0-9a-f]+)?/?`)
	msg := work.ReplaceAllString(err.Error(), "")
	msg = strings.ReplaceAll(msg, s.dir, "the image store")
	for _, l := range layer {
		msg = strings.ReplaceAll(msg, l, "the session's layer")
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

// boundedReader fails, ErrInvalid, once more than left bytes were read.
type boundedReader struct {
	r    io.Reader
	left int64
	what string
	max  int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.max == 0 {
		b.max = b.left
	}
	if b.left <= 0 {
		return 0, fmt.Errorf("the layer %s more than %d bytes: %w", b.what, b.max, ErrInvalid)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

type countingReader struct {
	r    io.Reader
	n    int64
	last int64
	fn   func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.fn != nil && (c.n-c.last >= 1<<20 || err == io.EOF) {
		c.last = c.n
		c.fn(c.n)
	}
	return n, err
}

func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// index lists a manifest in the layout's index.json (once), so the store is
// an OCI layout other tools can read.
func (s *Store) index(desc v1.Descriptor) error {
	ii, err := s.layout.ImageIndex()
	if err != nil {
		return fmt.Errorf("image store index: %w", err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return fmt.Errorf("image store index: %w", err)
	}
	for _, d := range im.Manifests {
		if d.Digest == desc.Digest {
			return nil
		}
	}
	if err := s.layout.AppendDescriptor(desc); err != nil {
		return fmt.Errorf("image store index: %w", err)
	}
	return nil
}

func mustHash(s string) v1.Hash {
	h, err := v1.NewHash(s)
	if err != nil {
		panic(err)
	}
	return h
}
