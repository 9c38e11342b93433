package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive"
	cfs "github.com/containerd/continuity/fs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// Upper is a session's writable layer as Commit reads it.
type Upper struct {
	// Dir is the overlayfs upper directory.
	Dir string
	// Shift maps the owners on disk to the session's ids (the zero IDShift
	// keeps them as they are).
	Shift IDShift
	// Skip, when not nil, reports the entries (by slash-separated path)
	// that are not the session's: the runtime's mount points.
	Skip func(rel string) bool
	// MaxBytes bounds the bytes of the files read (sparse files count at
	// their full size, a file linked twice once): past it the commit stops
	// before reading further. 0 or more than the store's per-layer bound:
	// that bound.
	MaxBytes int64
}

// Commit turns a session's upper directory into one OCI layer on top of
// base (nil: an image of that layer alone) and tags the result ref for
// tenant. Whiteouts (0/0 character devices) become .wh. files and opaque
// directories (trusted.overlay.opaque=y) .wh..wh..opq entries. The upper
// directory must not change while it is read: commit a frozen session.
func (s *Store) Commit(ctx context.Context, tenant string, base *Image, u Upper, ref string) (*Image, error) {
	im, err := s.commit(ctx, tenant, base, u, ref)
	return im, s.scrub(err, u.Dir)
}

func (s *Store) commit(ctx context.Context, tenant string, base *Image, u Upper, ref string) (*Image, error) {
	upper := u.Dir
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if r.Tag == "" {
		return nil, fmt.Errorf("commit: %s: name the new image with a tag, not a digest: %w", ref, ErrInvalid)
	}
	if fi, err := os.Stat(upper); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("commit: the session's writable layer is missing: %w", ErrPrecondition)
	}
	var baseImg v1.Image
	if base != nil {
		h, err := v1.NewHash(base.Digest)
		if err != nil {
			return nil, fmt.Errorf("commit: base digest %q: %w", base.Digest, ErrInvalid)
		}
		if baseImg, err = s.layout.Image(h); err != nil {
			return nil, fmt.Errorf("commit: base image %s: %v: %w", base.Digest, err, ErrNotFound)
		}
	} else {
		baseImg, err = mutate.ConfigFile(empty.Image, &v1.ConfigFile{OS: s.os, Architecture: s.arch, RootFS: v1.RootFS{Type: "layers"}})
		if err != nil {
			return nil, err
		}
	}
	work, cleanup, err := s.workDir()
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	defer cleanup()
	if u.MaxBytes <= 0 || u.MaxBytes > s.maxLayer {
		u.MaxBytes = s.maxLayer
	}
	gz := filepath.Join(work, "layer.tar.gz")
	if err := writeUpperLayer(ctx, u, gz); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	mt := types.OCILayer
	if m, err := baseImg.MediaType(); err == nil && m == types.DockerManifestSchema2 {
		mt = types.DockerLayer
	}
	layer, err := tarball.LayerFromFile(gz, tarball.WithMediaType(mt))
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	now := time.Now().UTC()
	img, err := mutate.Append(baseImg, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: now}, CreatedBy: "deskgrid commit", Comment: r.Name},
	})
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	if img, err = mutate.CreatedAt(img, v1.Time{Time: now}); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	var mine []string
	if base != nil {
		mine = base.DiffIDs
	}
	out, err := s.ingest(ctx, img, tenant, r.Name, mine, nil)
	if err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return out, nil
}

// WriteLayer writes the OCI layer (a gzip tar, whiteouts in OCI form) of an
// overlayfs upper directory to dst, which must not exist; image builds use
// it for the layer a recipe adds on top of the image it extends.
func WriteLayer(ctx context.Context, upper, dst string) error {
	return writeUpperLayer(ctx, Upper{Dir: upper}, dst)
}

// IDShift maps the host ids that own an upper directory's files to the ids
// the session saw: a session's files belong to its own host id range
// (Base is the host id of the session's id 0, Size how many ids it has), and
// an image must hold them as the session's ids, or a session made from it
// (in another range) finds its user's home owned by nobody. Host ids outside
// the range become the overflow id 65534, as the session saw them. The zero
// IDShift keeps owners as they are.
type IDShift struct{ Base, Size uint32 }

// overflowID is the id a user namespace shows for an id it does not map.
const overflowID = 65534

func (m IDShift) id(host uint32) uint32 {
	if m.Size == 0 {
		return host
	}
	if host >= m.Base && host-m.Base < m.Size {
		return host - m.Base
	}
	return overflowID
}

// shiftedInfo is a file's information with its owner as the session saw it.
type shiftedInfo struct {
	os.FileInfo
	st *syscall.Stat_t
}

func (f shiftedInfo) Sys() any { return f.st }

func (m IDShift) info(fi os.FileInfo) os.FileInfo {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if m.Size == 0 || !ok {
		return fi
	}
	c := *st
	c.Uid, c.Gid = m.id(st.Uid), m.id(st.Gid)
	return shiftedInfo{fi, &c}
}

// writeUpperLayer writes the OCI layer (a gzip tar) of an overlayfs upper
// directory with containerd's change writer, owners mapped by u.Shift.
func writeUpperLayer(ctx context.Context, u Upper, dst string) error {
	upper, shift := u.Dir, u.Shift
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	cw := archive.NewChangeWriter(zw, upper)
	var total int64
	linked := map[uint64]bool{}
	err = filepath.Walk(upper, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if u.Skip != nil && u.Skip(filepath.ToSlash(rel)) {
			if fi.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel = "/" + rel
		base := filepath.Base(rel)
		switch {
		case isWhiteoutDevice(fi):
			return cw.HandleChange(cfs.ChangeKindDelete, rel, nil, nil)
		case base == ".wh..wh..opq":
			// fuse-overlayfs's opaque marker file
			return cw.HandleChange(cfs.ChangeKindDelete, filepath.Join(filepath.Dir(rel), ".wh..opq"), nil, nil)
		case strings.HasPrefix(base, ".wh."):
			// fuse-overlayfs's whiteout file
			return cw.HandleChange(cfs.ChangeKindDelete, filepath.Join(filepath.Dir(rel), strings.TrimPrefix(base, ".wh.")), nil, nil)
		}
		if fi.Mode().IsRegular() && u.MaxBytes > 0 {
			// A sparse file reads as its full size: a session's terabyte
			// of holes would keep the node compressing zeros for hours.
			st, _ := fi.Sys().(*syscall.Stat_t)
			if st == nil || st.Nlink <= 1 || !linked[st.Ino] {
				if st != nil && st.Nlink > 1 {
					linked[st.Ino] = true
				}
				if total += fi.Size(); total > u.MaxBytes {
					return fmt.Errorf("the session's files add up to more than %d bytes (sparse files count at their full size; %s is %d): %w", u.MaxBytes, rel, fi.Size(), ErrInvalid)
				}
			}
		}
		if err := cw.HandleChange(cfs.ChangeKindAdd, rel, shift.info(fi), nil); err != nil {
			return err
		}
		if fi.IsDir() && isOpaque(path) {
			return cw.HandleChange(cfs.ChangeKindDelete, filepath.Join(rel, ".wh..opq"), nil, nil)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the writable layer changed while it was read (freeze the session first): %v: %w", err, ErrPrecondition)
		}
		if errors.Is(err, syscall.ENAMETOOLONG) {
			// A session nests directories one relative step at a time,
			// past what the node can name from its root.
			return fmt.Errorf("the session's files nest too deep for the node to read (paths of more than %d bytes on the node); flatten them to commit: %w", unix.PathMax, ErrPrecondition)
		}
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

func isWhiteoutDevice(fi os.FileInfo) bool {
	if fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(path string) bool {
	for _, attr := range []string{"trusted.overlay.opaque", "user.overlay.opaque", "user.fuseoverlayfs.opaque"} {
		buf := make([]byte, 4)
		n, err := unix.Lgetxattr(path, attr, buf)
		if err == nil && bytes.Equal(buf[:n], []byte("y")) {
			return true
		}
	}
	return false
}
