package overlay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Copy is the last resort where no overlay can be mounted (no overlayfs,
// no FUSE): Mount copies the lower into merged, which then is the whole
// sandbox. Nothing records what changed, so the changes of such a sandbox
// are found by comparing merged with the lower (changes.Compare). Unmount
// has nothing to do; removing the sandbox dir removes the copy.
type Copy struct{}

// CopyName is the name the copy driver reports.
const CopyName = "copy"

// Name implements Driver.
func (Copy) Name() string { return CopyName }

// copiedMarker, in the work dir, says the copy is complete: mounting an
// adopted sandbox again must keep what it holds, and a copy interrupted by
// a crash is started over.
const copiedMarker = "copied"

// Mount implements Driver.
func (Copy) Mount(ctx context.Context, l Layers) error {
	marker := filepath.Join(l.Work, copiedMarker)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if err := emptyDir(l.Merged); err != nil {
		return err
	}
	dst, err := os.OpenRoot(l.Merged)
	if err != nil {
		return fmt.Errorf("copy %s: %w", l.Lower, err)
	}
	defer dst.Close()
	if err := CopyTree(ctx, l.Lower, dst, ".", l.Owner); err != nil {
		return fmt.Errorf("copy %s to %s: %w", l.Lower, l.Merged, err)
	}
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return fmt.Errorf("copy %s: %w", l.Lower, err)
	}
	return nil
}

// Unmount implements Driver: a copy is not mounted.
func (Copy) Unmount(context.Context, string) error { return nil }

// emptyDir removes what dir holds, keeping dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("empty %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("empty %s: %w", dir, err)
		}
	}
	return nil
}

// CopyTree copies src/rel (a file, symlink or directory tree) to rel in
// dst, preserving modes, modification times of files and symlinks, and
// owners where the host allows; with owner set, the owner's files become
// root's, as FUSE shows them. Writes go through dst, so a symlink a
// sandboxed process planted in it cannot lead a copy outside. Hard links
// become separate files; sockets, fifos and devices are skipped.
func CopyTree(ctx context.Context, src string, dst *os.Root, rel string, owner *Owner) error {
	if dir := filepath.Dir(rel); dir != "." {
		if err := dst.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return filepath.WalkDir(filepath.Join(src, rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return copyOne(p, dst, r, fi, owner)
	})
}

// mode keeps the permission and special bits os.File.Chmod understands.
func mode(fi fs.FileInfo) fs.FileMode {
	return fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

func copyOne(p string, dst *os.Root, r string, fi fs.FileInfo, owner *Owner) error {
	uid, gid := hostIDs(fi, owner)
	switch {
	case fi.IsDir():
		if r != "." {
			if err := dst.Mkdir(r, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		f, err := dst.Open(r)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.IsDir() {
			return fmt.Errorf("%s is not a directory in the copy", r)
		}
		return finish(f, fi, uid, gid, false)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if err := dst.Symlink(target, r); err != nil {
			return err
		}
		if err := dst.Lchown(r, uid, gid); err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
		return nil
	case fi.Mode().IsRegular():
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := dst.OpenFile(r, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		if err == nil {
			err = finish(out, fi, uid, gid, true)
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return err
	default:
		return nil
	}
}

// finish gives f the owner, mode and (for a file) times of fi; mode after
// owner, since chown clears set-id bits.
func finish(f *os.File, fi fs.FileInfo, uid, gid int, times bool) error {
	if err := f.Chown(uid, gid); err != nil && !errors.Is(err, fs.ErrPermission) {
		return err
	}
	if err := f.Chmod(mode(fi)); err != nil {
		return err
	}
	if !times {
		return nil
	}
	// Nanoseconds, through the descriptor: changes are found by size and
	// modification time first.
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	ts := []unix.Timespec{unix.NsecToTimespec(syscall.TimespecToNsec(st.Atim)), unix.NsecToTimespec(syscall.TimespecToNsec(st.Mtim))}
	return unix.UtimesNano(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), ts)
}

// hostIDs maps a lower file's owner into the copy.
func hostIDs(fi fs.FileInfo, owner *Owner) (uid, gid int) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return os.Getuid(), os.Getgid()
	}
	uid, gid = int(st.Uid), int(st.Gid)
	if owner != nil {
		if uid == owner.UID {
			uid = 0
		}
		if gid == owner.GID {
			gid = 0
		}
	}
	return uid, gid
}
