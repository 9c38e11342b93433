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
	"slices"
	"strings"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// xattrPrefixes are the extended attributes overlay drivers keep state in.
var xattrPrefixes = []string{"trusted.overlay.", "user.overlay.", "user.fuseoverlayfs."}

const paxXattr = "SCHILY.xattr."

// Write archives dir into w. Every entry is read beneath dir by os.Root,
// each regular file opened without following a link or blocking and checked
// to be the file that was listed: a layer whose session swaps a directory
// for a link to the node's files while it is read (one running on a node
// without cgroups, or thawed mid-archive) yields an error or its own files,
// never the node's. The bytes of the files written are bounded by maxBytes
// (0: unbounded), sparse files at their full size and a file linked twice
// twice, as the archive holds them: past it, ErrTooLarge before more is read.
func Write(w io.Writer, dir string, maxBytes int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	var total int64
	err = walk(root, ".", func(rel string, fi fs.FileInfo) error {
		if fi.Mode().IsRegular() && maxBytes > 0 {
			if total += fi.Size(); total > maxBytes {
				return fmt.Errorf("%w: the layer's files add up to more than %d bytes (sparse files count at their full size; %s is %d)", ErrTooLarge, maxBytes, rel, fi.Size())
			}
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = root.Readlink(rel); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("archive %s: %w", rel, err)
		}
		hdr.Name = rel
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
		var f *os.File
		if fi.IsDir() || fi.Mode().IsRegular() {
			// Only directories and files carry the overlay's xattrs.
			if f, err = openListed(root, rel, fi); err != nil {
				return fmt.Errorf("archive %s: %w", rel, err)
			}
			defer f.Close()
			for name, value := range xattrs(f) {
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
			if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
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

// walk calls fn on every entry beneath rel in root (not rel itself), in
// lexical order, directories before what they hold; it descends only into
// what Lstat saw as a directory, opened as one beneath root.
func walk(root *os.Root, rel string, fn func(rel string, fi fs.FileInfo) error) error {
	d, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		p := path.Join(rel, name)
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		if err := fn(p, fi); err != nil {
			return err
		}
		if fi.IsDir() {
			if err := walk(root, p, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// openListed opens rel beneath root as the directory or regular file fi
// says it was, and refuses anything else found there now.
func openListed(root *os.Root, rel string, fi fs.FileInfo) (*os.File, error) {
	flag := os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	if fi.IsDir() {
		flag |= syscall.O_DIRECTORY
	}
	f, err := root.OpenFile(rel, flag, 0)
	if err != nil {
		return nil, err
	}
	now, err := f.Stat()
	if err == nil && (now.Mode().Type() != fi.Mode().Type() || !os.SameFile(now, fi)) {
		err = errors.New("changed while it was archived")
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func xattrs(f *os.File) map[string]string {
	fd := int(f.Fd())
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(fd, buf)
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
		if m, err := unix.Fgetxattr(fd, name, val); err == nil {
			out[name] = string(val[:m])
		}
	}
	return out
}

// ErrTooLarge means the layer holds more than Write was let to archive.
var ErrTooLarge = errors.New("layer too large to archive")

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
