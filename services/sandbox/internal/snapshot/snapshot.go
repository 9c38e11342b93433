// Package snapshot archives an overlay's upper layer as a zstd-compressed
// tar and restores it. Whiteouts (0/0 character devices), the overlay
// xattrs (opaque directories), ownership, modes and times are kept, so a
// restored layer means exactly what it meant before.
package snapshot

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// xattrPrefixes are the extended attributes overlay drivers keep state in.
var xattrPrefixes = []string{"trusted.overlay.", "user.overlay.", "user.fuseoverlayfs."}

const paxXattr = "SCHILY.xattr."

// Write archives dir into w.
func Write(w io.Writer, dir string) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("archive %s: %w", rel, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if fi.Mode()&fs.ModeCharDevice != 0 {
				hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
			}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			for name, value := range xattrs(p) {
				if hdr.PAXRecords == nil {
					hdr.PAXRecords = map[string]string{}
				}
				hdr.PAXRecords[paxXattr+name] = value
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, fi.Size())
			f.Close()
			if err != nil {
				return fmt.Errorf("archive %s: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		zw.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func xattrs(p string) map[string]string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return nil
	}
	out := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		keep := false
		for _, pre := range xattrPrefixes {
			keep = keep || strings.HasPrefix(name, pre)
		}
		if !keep {
			continue
		}
		val := make([]byte, 4096)
		if m, err := unix.Lgetxattr(p, name, val); err == nil {
			out[name] = string(val[:m])
		}
	}
	return out
}

// ErrBadArchive means the archive holds something Extract refuses.
var ErrBadArchive = errors.New("bad snapshot archive")

// Extract unpacks an archive made by Write into dir, which should be empty.
// Every entry is created beneath dir by os.Root, so a tampered archive
// cannot write outside it.
func Extract(r io.Reader, dir string) error {
	zr, err := zstd.NewReader(r)
	if err != nil {
		return err
	}
	defer zr.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	type dirTime struct {
		name string
		hdr  *tar.Header
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		name := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
		if name == "." || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%w: entry %q", ErrBadArchive, hdr.Name)
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, dirTime{name, hdr})
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if err == nil {
				err = setXattrs(f, hdr)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeChar:
			if hdr.Devmajor != 0 || hdr.Devminor != 0 {
				return fmt.Errorf("%w: %s is a device, not a whiteout", ErrBadArchive, name)
			}
			parent, err := root.Open(path.Dir(name))
			if err != nil {
				return err
			}
			err = unix.Mknodat(int(parent.Fd()), path.Base(name), unix.S_IFCHR|uint32(mode), 0)
			parent.Close()
			if err != nil {
				return fmt.Errorf("whiteout %s: %w", name, err)
			}
		default:
			return fmt.Errorf("%w: %s has unsupported type %q", ErrBadArchive, name, hdr.Typeflag)
		}
		if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeSymlink {
			if err := root.Chmod(name, mode); err != nil {
				return err
			}
			if hdr.Typeflag != tar.TypeDir {
				_ = root.Chtimes(name, hdr.AccessTime, hdr.ModTime)
			}
		}
	}
	// Directories last: creating their entries changed their times.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		f, err := root.Open(d.name)
		if err != nil {
			return err
		}
		err = setXattrs(f, d.hdr)
		f.Close()
		if err != nil {
			return err
		}
		_ = root.Chtimes(d.name, d.hdr.AccessTime, d.hdr.ModTime)
	}
	return nil
}

func setXattrs(f *os.File, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok {
			continue
		}
		if err := unix.Fsetxattr(int(f.Fd()), name, []byte(v), 0); err != nil {
			return fmt.Errorf("set %s on %s: %w", name, hdr.Name, err)
		}
	}
	return nil
}
