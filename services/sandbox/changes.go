package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/changes"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/fsroot"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// layerDir holds the upper and work dirs: the sandbox dir, or the
// size-limited filesystem mounted in it.
func (b *box) layerDir() string {
	if b.disk != "" {
		return filepath.Join(b.dir, "disk")
	}
	return b.dir
}

func (b *box) upper() string { return filepath.Join(b.layerDir(), "upper") }
func (b *box) work() string  { return filepath.Join(b.layerDir(), "work") }

// copied reports whether the sandbox is a plain copy of its lower (no
// overlay could be mounted): its changes are in merged, not in an upper.
func (b *box) copied() bool { return b.driver.Name() == overlay.CopyName }

// changes lists the sandbox's changes at or beneath prefix.
func (b *box) changes(prefix string) ([]changes.Change, error) {
	if b.copied() {
		return changes.Compare(b.merged(), b.lower, prefix)
	}
	return changes.List(b.upper(), b.lower, prefix, b.mountPoint)
}

// mountPoint reports whether the entry at rel in a container sandbox's
// upper layer is a mount point its runtime made (an image without /proc,
// or without /etc/hosts, say): not a change of the session's.
func (b *box) mountPoint(rel string) bool {
	return b.img != nil && container.IsMountPoint(b.upper(), b.lower, rel)
}

// changed is where the new content of a change is.
func (b *box) changed() string {
	if b.copied() {
		return b.merged()
	}
	return b.upper()
}

func changeProto(c changes.Change) *sandboxv1.Change {
	return &sandboxv1.Change{Path: c.Path, Kind: sandboxv1.ChangeKind(c.Kind), IsDir: c.IsDir, Size: c.Size}
}

// cleanChangePath validates a path of the changes API. The writable layer of
// a session from an image is its whole root filesystem, so there the path
// its programs see ("/etc/hosts") names the same change as "etc/hosts".
func (b *box) cleanChangePath(p string) (string, error) {
	if b.img != nil && strings.HasPrefix(p, "/") {
		p = strings.TrimLeft(p, "/")
	}
	return fsroot.Clean(p)
}

func (b *box) cleanChangePaths(paths []string) ([]string, error) {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		c, err := b.cleanChangePath(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func selected(sel []string, p string) bool {
	if len(sel) == 0 {
		return true
	}
	for _, s := range sel {
		if changes.Covers(s, p) {
			return true
		}
	}
	return false
}

func (s *Service) listChanges(ctx context.Context, id, prefix string) ([]changes.Change, error) {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	clean, err := b.cleanChangePath(prefix)
	if err != nil {
		return nil, err
	}
	return b.changes(clean)
}

func (s *Service) diffFile(ctx context.Context, id, p string) (*sandboxv1.DiffFileResponse, error) {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	clean, err := b.cleanChangePath(p)
	if err != nil {
		return nil, err
	}
	if clean == "." || clean == "" {
		return nil, invalidf("path is required")
	}
	list, err := b.changes(clean)
	if err != nil {
		return nil, err
	}
	var ch *changes.Change
	for i := range list {
		if list[i].Path == clean {
			ch = &list[i]
		}
	}
	if ch == nil {
		return nil, failf(errNotFound, "%s has no change in session %q", clean, id)
	}
	out := &sandboxv1.DiffFileResponse{Change: changeProto(*ch)}
	if ch.IsDir {
		return out, nil
	}
	var old, new []byte
	if ch.Kind != changes.Added {
		lroot, err := os.OpenRoot(b.lower)
		if err != nil {
			return nil, err
		}
		defer lroot.Close()
		if old, err = readBounded(lroot, clean, s.cfg.MaxFileBytes); err != nil {
			return nil, err
		}
	}
	if ch.Kind != changes.Deleted {
		r, err := s.root(b)
		if err != nil {
			return nil, err
		}
		if new, _, err = r.ReadFile(clean, s.cfg.MaxFileBytes); err != nil {
			return nil, err
		}
	}
	out.Diff, out.Binary = changes.Diff(clean, old, new)
	return out, nil
}

func readBounded(r *os.Root, p string, max int64) ([]byte, error) {
	fi, err := r.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the limit of %d", fsroot.ErrTooLarge, p, fi.Size(), max)
	}
	return r.ReadFile(p)
}

func ctimeOf(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim.Nano()
	}
	return 0
}

// applyChanges copies the selected changes into the workspace (the lower
// layer). A lower path whose inode changed (ctime) since the sandbox was
// created, other than by an earlier apply, is a conflict and is skipped.
func (s *Service) applyChanges(ctx context.Context, id string, paths []string) (applied []string, conflicts []*sandboxv1.Conflict, err error) {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	if b.img != nil {
		return nil, nil, failf(errPrecondition, "session %q runs an image, not a workspace: there is nothing to apply changes to (commit it to an image instead)", id)
	}
	sel, err := b.cleanChangePaths(paths)
	if err != nil {
		return nil, nil, err
	}
	if b.lower == s.cfg.BaseDir {
		return nil, nil, failf(errPrecondition, "session %q works on the node's base, not a workspace: there is nothing to apply changes to", id)
	}
	list, err := b.changes("")
	if err != nil {
		return nil, nil, err
	}
	lroot, err := os.OpenRoot(b.lower)
	if err != nil {
		return nil, nil, fmt.Errorf("open workspace: %w", err)
	}
	defer lroot.Close()
	b.pmu.Lock()
	defer b.pmu.Unlock()
	if b.applied == nil {
		b.applied = map[string]int64{}
	}
	created := b.created.UnixNano()
	for _, c := range list {
		if !selected(sel, c.Path) {
			continue
		}
		if fi, err := lroot.Lstat(c.Path); err == nil {
			since := max(created, b.applied[c.Path])
			if c.Kind == changes.Added && !fi.IsDir() || ctimeOf(fi) > since && !(c.IsDir && fi.IsDir()) {
				conflicts = append(conflicts, &sandboxv1.Conflict{Path: c.Path, Reason: "changed in the workspace since the session started"})
				continue
			}
		} else if c.Kind != changes.Added && !errors.Is(err, fs.ErrNotExist) {
			return applied, conflicts, err
		} else if c.Kind == changes.Modified {
			conflicts = append(conflicts, &sandboxv1.Conflict{Path: c.Path, Reason: "deleted in the workspace since the session started"})
			continue
		}
		if err := s.applyOne(b, lroot, c); err != nil {
			conflicts = append(conflicts, &sandboxv1.Conflict{Path: c.Path, Reason: err.Error()})
			continue
		}
		if fi, err := lroot.Lstat(c.Path); err == nil {
			b.applied[c.Path] = ctimeOf(fi)
		}
		applied = append(applied, c.Path)
	}
	return applied, conflicts, nil
}

func (s *Service) applyOne(b *box, lroot *os.Root, c changes.Change) error {
	if c.Kind == changes.Deleted {
		return lroot.RemoveAll(c.Path)
	}
	// The changed tree is read through a root of its own: the session may
	// replace a directory on the way with a link to anywhere on the node
	// between the listing and this read, and it is resolved beneath the
	// tree, never followed out of it.
	croot, err := os.OpenRoot(b.changed())
	if err != nil {
		return err
	}
	defer croot.Close()
	fi, err := croot.Lstat(c.Path)
	if err != nil {
		return err
	}
	chown := func(p string) error {
		if b.owner == nil {
			return nil
		}
		return lroot.Lchown(p, b.owner.UID, b.owner.GID)
	}
	if fi.IsDir() {
		if c.Kind == changes.Modified {
			if err := lroot.Remove(c.Path); err != nil {
				return err
			}
		}
		if err := lroot.Mkdir(c.Path, fi.Mode().Perm()); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return chown(c.Path)
	}
	// Written beside its target and renamed over it: a reader of the
	// workspace sees the old file or the new one, never half of it.
	tmp := path.Join(path.Dir(c.Path), fmt.Sprintf(".deskgrid-apply-%d", time.Now().UnixNano()))
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := croot.Readlink(c.Path)
		if err != nil {
			return err
		}
		if err := lroot.Symlink(target, tmp); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		f, err := lroot.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
		if err != nil {
			return err
		}
		werr := copyChanged(croot, c.Path, b.layerBytes(), f)
		if werr == nil {
			werr = f.Chmod(fi.Mode().Perm())
		}
		if werr == nil {
			werr = f.Sync()
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			_ = lroot.Remove(tmp)
			return werr
		}
	default:
		return fmt.Errorf("%s is not a regular file, directory or symlink", c.Path)
	}
	if err := chown(tmp); err != nil {
		_ = lroot.Remove(tmp)
		return err
	}
	if err := lroot.Rename(tmp, c.Path); err != nil {
		_ = lroot.Remove(tmp)
		return err
	}
	return nil
}

// copyChanged copies the regular file at rel beneath root to w, streamed:
// opened without blocking (a FIFO put there since the listing would hang
// the call) and refused when it is not a regular file by then, or larger
// than max (a sparse file counts at its full size: a terabyte of holes
// costs the session's quota nothing and would fill the node's disk).
func copyChanged(root *os.Root, rel string, max int64, w io.Writer) error {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is no longer a regular file", rel)
	case fi.Size() > max:
		return fmt.Errorf("%s is %d bytes (sparse files count at their full size), more than the %d this node copies", rel, fi.Size(), max)
	}
	_, err = io.Copy(w, io.LimitReader(f, max))
	return err
}

// discardChanges drops the selected changes from the upper layer. Editing
// an upper layer under a live mount is undefined, so the layer is
// unmounted, edited and mounted again, which needs the sandbox idle: no
// call using it and no process running in it.
func (s *Service) discardChanges(ctx context.Context, id string, paths []string) ([]string, error) {
	b, unlock, err := s.exclusive(ctx, id, "discard changes")
	if err != nil {
		return nil, err
	}
	defer unlock()
	sel, err := b.cleanChangePaths(paths)
	if err != nil {
		return nil, err
	}
	list, err := b.changes("")
	if err != nil {
		return nil, err
	}
	var drop []changes.Change
	for _, c := range list {
		if c.Opaque && selected(sel, path.Dir(c.Path)) {
			// The whole replaced directory goes: the lower one shows again.
			drop = append(drop, changes.Change{Path: path.Dir(c.Path), IsDir: true})
			continue
		}
		if selected(sel, c.Path) {
			if c.Opaque {
				return nil, failf(errPrecondition, "%s was deleted together with its replaced directory %s; discard that directory instead", c.Path, path.Dir(c.Path))
			}
			drop = append(drop, c)
		}
	}
	if len(drop) == 0 {
		return nil, nil
	}
	if b.copied() {
		return s.discardCopied(ctx, b, drop)
	}
	if err := s.unmountRoot(ctx, b); err != nil {
		return nil, err
	}
	// Removed beneath the layer: what was a directory at the listing may be
	// a link to the node's files by now (a process nothing counted, on a
	// node without cgroups, ran until the container ended).
	root, err := os.OpenRoot(b.upper())
	if err != nil {
		return nil, errors.Join(err, s.remount(ctx, b))
	}
	defer root.Close()
	var out []string
	var rmErr error
	for _, c := range drop {
		if _, err := root.Lstat(c.Path); errors.Is(err, fs.ErrNotExist) && c.Kind == 0 {
			continue // a replaced directory already dropped
		}
		err := root.RemoveAll(c.Path)
		wh := path.Join(path.Dir(c.Path), ".wh."+path.Base(c.Path))
		if _, werr := root.Lstat(wh); werr == nil && err == nil {
			err = root.Remove(wh)
		}
		if err != nil {
			rmErr = err
			break
		}
		out = append(out, c.Path)
	}
	if err := s.remount(ctx, b); err != nil {
		return out, err
	}
	return out, rmErr
}

// running counts the sandbox's live processes.
func (b *box) running() int {
	if b.cg != nil {
		if pids, err := b.cg.Pids(); err == nil {
			if b.img != nil && len(pids) > 0 {
				return len(pids) - 1 // the container's init
			}
			return len(pids)
		}
	}
	b.pmu.Lock()
	defer b.pmu.Unlock()
	n := 0
	for _, p := range b.procs {
		select {
		case <-p.p.Done():
		default:
			n++
		}
	}
	return n
}

// discardCopied restores the dropped paths of a copied sandbox from its
// lower. The sandbox is idle; writes go through an os.Root of the copy, so
// a symlink left in it cannot lead them outside.
func (s *Service) discardCopied(ctx context.Context, b *box, drop []changes.Change) ([]string, error) {
	root, err := os.OpenRoot(b.merged())
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var out []string
	for _, c := range drop {
		if err := root.RemoveAll(c.Path); err != nil {
			return out, err
		}
		if _, err := os.Lstat(filepath.Join(b.lower, c.Path)); err == nil {
			if err := overlay.CopyTree(ctx, b.lower, root, c.Path, b.owner); err != nil {
				return out, fmt.Errorf("restore %s: %w", c.Path, err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return out, err
		}
		out = append(out, c.Path)
	}
	return out, nil
}
