// Package changes reads what a session changed from its overlay's upper
// layer: files added, modified and deleted (whiteouts and opaque
// directories, in the kernel's format and in fuse-overlayfs's), diffs of
// text files against the lower layer, and applies changes to the lower
// layer file by file. Where no overlay could be mounted (the copy driver),
// Compare finds the changes by comparing the copy with the lower instead.
package changes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	udiff "github.com/aymanbagabas/go-udiff"
	"golang.org/x/sys/unix"
)

// Kind is what happened to a path.
type Kind int

const (
	Added Kind = iota + 1
	Modified
	Deleted
)

func (k Kind) String() string {
	switch k {
	case Added:
		return "added"
	case Modified:
		return "modified"
	case Deleted:
		return "deleted"
	}
	return "unknown"
}

// Change is one changed path, relative to the layer roots, slash-separated.
type Change struct {
	Path  string
	Kind  Kind
	IsDir bool
	Size  int64
	// Opaque is set on a deletion implied by an opaque directory (no
	// whiteout of its own in the upper layer).
	Opaque bool
}

// Whiteout and opaque markers: the kernel uses a 0/0 character device and
// the trusted.overlay.opaque xattr; fuse-overlayfs, where it cannot make
// devices, uses ".wh."-prefixed files and user.fuseoverlayfs.opaque or a
// ".wh..wh..opq" file.
const (
	whPrefix  = ".wh."
	whOpaque  = ".wh..wh..opq"
	whOpaque2 = ".wh..opq" // what some fuse-overlayfs versions write
	xattrOpq  = "trusted.overlay.opaque"
	xattrFOpq = "user.fuseoverlayfs.opaque"
)

func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

// isOpaque reports whether the upper directory open as d (at rel beneath
// root) replaces its lower one.
func isOpaque(root *os.Root, d *os.File, rel string) bool {
	buf := make([]byte, 4)
	for _, x := range []string{xattrOpq, xattrFOpq, "user.overlay.opaque"} {
		if n, err := unix.Fgetxattr(int(d.Fd()), x, buf); err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	for _, m := range []string{whOpaque, whOpaque2} {
		if _, err := root.Lstat(path.Join(rel, m)); err == nil {
			return true
		}
	}
	return false
}

// upperEntry is a name in an upper directory with what Lstat said of it.
type upperEntry struct {
	name string
	fi   fs.FileInfo
}

// readUpper lists the upper directory rel beneath root, sorted by name,
// each entry's information read beneath root too: the session may swap a
// directory for a link to the node's files while it is listed, and the
// list must show its own entries only. An entry gone meanwhile is left out.
func readUpper(root *os.Root, rel string) ([]upperEntry, bool, error) {
	d, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, false, err
	}
	opaque := rel != "." && isOpaque(root, d, rel)
	sort.Strings(names)
	out := make([]upperEntry, 0, len(names))
	for _, n := range names {
		fi, err := root.Lstat(path.Join(rel, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		out = append(out, upperEntry{n, fi})
	}
	return out, opaque, nil
}

// List returns the changes of upper over lower at or beneath prefix
// (empty for all), sorted by path. Entries of upper that skip (when not
// nil) reports as not the session's, by their slash-separated path, are
// left out.
func List(upper, lower, prefix string, skip func(rel string) bool) ([]Change, error) {
	var out []Change
	root, err := os.OpenRoot(upper)
	if err != nil {
		return nil, fmt.Errorf("read upper layer: %w", err)
	}
	defer root.Close()
	w := walker{root: root, lower: lower, skip: skip}
	if err := w.walk(".", &out); err != nil {
		return nil, err
	}
	if prefix != "" && prefix != "." {
		kept := out[:0]
		for _, c := range out {
			if Covers(prefix, c.Path) {
				kept = append(kept, c)
			}
		}
		out = kept
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Covers reports whether selecting sel selects p: p is sel or beneath it.
func Covers(sel, p string) bool {
	sel = strings.Trim(sel, "/")
	return sel == "" || sel == "." || p == sel || strings.HasPrefix(p, sel+"/")
}

// walker lists an upper layer, read beneath its root (the session's, whose
// programs may run meanwhile), against its lower one (the node's).
type walker struct {
	root  *os.Root
	lower string
	skip  func(rel string) bool
}

func (w walker) walk(rel string, out *[]Change) error {
	lower := w.lower
	entries, opaque, err := readUpper(w.root, rel)
	if err != nil {
		return fmt.Errorf("read upper layer: %w", err)
	}
	names := map[string]bool{}
	for _, e := range entries {
		name, fi := e.name, e.fi
		if name == whOpaque || name == whOpaque2 {
			continue
		}
		p := path.Join(rel, name)
		if strings.HasPrefix(name, whPrefix) && fi.Mode().IsRegular() {
			p = path.Join(rel, strings.TrimPrefix(name, whPrefix))
			names[path.Base(p)] = true
			*out = append(*out, deleted(lower, p, false))
			continue
		}
		names[name] = true
		if w.skip != nil && w.skip(p) {
			continue
		}
		if isWhiteout(fi) {
			*out = append(*out, deleted(lower, p, false))
			continue
		}
		lfi, lerr := os.Lstat(filepath.Join(lower, p))
		inLower := lerr == nil
		switch {
		case fi.IsDir():
			switch {
			case !inLower || !lfi.IsDir():
				kind := Added
				if inLower {
					kind = Modified
				}
				*out = append(*out, Change{Path: p, Kind: kind, IsDir: true})
				if err := addAll(w.root, p, out); err != nil {
					return err
				}
			default:
				if err := w.walk(p, out); err != nil {
					return err
				}
			}
		case !inLower:
			*out = append(*out, Change{Path: p, Kind: Added, Size: fi.Size()})
		default:
			if lfi.IsDir() || !same(w.root, p, filepath.Join(lower, p), fi, lfi) {
				*out = append(*out, Change{Path: p, Kind: Modified, Size: fi.Size()})
			}
		}
	}
	if opaque {
		lentries, err := os.ReadDir(filepath.Join(lower, rel))
		if err == nil {
			for _, e := range lentries {
				if !names[e.Name()] {
					c := deleted(lower, path.Join(rel, e.Name()), true)
					*out = append(*out, c)
				}
			}
		}
	}
	return nil
}

func deleted(lower, p string, opaque bool) Change {
	lfi, err := os.Lstat(filepath.Join(lower, p))
	return Change{Path: p, Kind: Deleted, IsDir: err == nil && lfi.IsDir(), Opaque: opaque}
}

// addAll reports everything beneath an added directory as added.
func addAll(root *os.Root, rel string, out *[]Change) error {
	entries, _, err := readUpper(root, rel)
	if err != nil {
		return fmt.Errorf("read upper layer: %w", err)
	}
	for _, e := range entries {
		if e.name == whOpaque || e.name == whOpaque2 || strings.HasPrefix(e.name, whPrefix) {
			continue
		}
		fi := e.fi
		if isWhiteout(fi) {
			continue
		}
		p := path.Join(rel, e.name)
		if fi.IsDir() {
			*out = append(*out, Change{Path: p, Kind: Added, IsDir: true})
			if err := addAll(root, p, out); err != nil {
				return err
			}
			continue
		}
		*out = append(*out, Change{Path: p, Kind: Added, Size: fi.Size()})
	}
	return nil
}

// same reports whether a copied-up file (rel beneath the upper root, as
// ufi) still equals its lower original l: a copy-up happens on open for
// writing or on a metadata change, even when nothing was written. The upper
// file is opened beneath its root, without following a link or blocking,
// and must still be the file ufi describes: a FIFO or a link swapped in
// since the listing is no match, never a read of the node's files or a
// call that hangs.
func same(root *os.Root, rel, l string, ufi, lfi fs.FileInfo) bool {
	if ufi.Mode() != lfi.Mode() || ufi.Size() != lfi.Size() {
		return false
	}
	if ufi.Mode()&fs.ModeSymlink != 0 {
		a, err1 := root.Readlink(rel)
		b, err2 := os.Readlink(l)
		return err1 == nil && err2 == nil && a == b
	}
	if !ufi.Mode().IsRegular() {
		return false
	}
	fa, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return false
	}
	defer fa.Close()
	if now, err := fa.Stat(); err != nil || !now.Mode().IsRegular() || !os.SameFile(now, ufi) {
		return false
	}
	fb, err := os.Open(l)
	if err != nil {
		return false
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF)
		}
	}
}

// Binary reports whether data does not look like text.
func Binary(data []byte) bool {
	head := data
	if len(head) > 8000 {
		head = head[:8000]
	}
	return bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(head)
}

// Diff returns a unified diff from old to new labelled with p, or
// binary=true and no diff when either side is not text.
func Diff(p string, old, new []byte) (diff string, binary bool) {
	if Binary(old) || Binary(new) {
		return "", true
	}
	return udiff.Unified("a/"+p, "b/"+p, string(old), string(new)), false
}

// Compare returns the changes of merged, a full copy of lower that a
// session edited in place (the copy driver, where no overlay could be
// mounted), at or beneath prefix, sorted by path. With no upper layer to
// read, every path is compared: a file whose mode, size and modification
// time match its lower original is unchanged without reading it, else the
// contents decide. A removed directory is one deletion, as a whiteout is.
func Compare(merged, lower, prefix string) ([]Change, error) {
	start := "."
	if prefix != "" && prefix != "." {
		start = strings.Trim(prefix, "/")
	}
	// Read beneath its root: the session's programs run meanwhile.
	root, err := os.OpenRoot(merged)
	if err != nil {
		return nil, fmt.Errorf("read sandbox copy: %w", err)
	}
	defer root.Close()
	var out []Change
	mfi, merr := root.Lstat(start)
	lfi, lerr := os.Lstat(filepath.Join(lower, start))
	switch {
	case merr != nil && lerr != nil:
		if !errors.Is(merr, fs.ErrNotExist) {
			return nil, merr
		}
	case start == ".":
		if err := compare(root, lower, start, &out); err != nil {
			return nil, err
		}
	default:
		if err := compareEntry(root, lower, start, mfi, merr, lfi, lerr, &out); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func compare(root *os.Root, lower, rel string, out *[]Change) error {
	entries, _, err := readUpper(root, rel)
	if err != nil {
		return fmt.Errorf("read sandbox copy: %w", err)
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.name] = true
		p := path.Join(rel, e.name)
		lfi, lerr := os.Lstat(filepath.Join(lower, p))
		if err := compareEntry(root, lower, p, e.fi, nil, lfi, lerr, out); err != nil {
			return err
		}
	}
	lentries, err := os.ReadDir(filepath.Join(lower, rel))
	if err != nil {
		return fmt.Errorf("read lower layer: %w", err)
	}
	for _, e := range lentries {
		if !names[e.Name()] {
			*out = append(*out, Change{Path: path.Join(rel, e.Name()), Kind: Deleted, IsDir: e.IsDir()})
		}
	}
	return nil
}

// compareEntry compares one path present in the copy (beneath root), lower
// or both.
func compareEntry(root *os.Root, lower, p string, fi fs.FileInfo, ferr error, lfi fs.FileInfo, lerr error, out *[]Change) error {
	if ferr != nil {
		if !errors.Is(ferr, fs.ErrNotExist) {
			return ferr
		}
		if lerr == nil {
			*out = append(*out, Change{Path: p, Kind: Deleted, IsDir: lfi.IsDir()})
		}
		return nil
	}
	inLower := lerr == nil
	switch {
	case fi.IsDir():
		if inLower && lfi.IsDir() {
			// As in an overlay, a directory's own metadata is no change.
			return compare(root, lower, p, out)
		}
		kind := Added
		if inLower {
			kind = Modified
		}
		*out = append(*out, Change{Path: p, Kind: kind, IsDir: true})
		return addAllCopied(root, p, out)
	case !inLower:
		*out = append(*out, Change{Path: p, Kind: Added, Size: fi.Size()})
	case lfi.IsDir() || !unchanged(root, p, filepath.Join(lower, p), fi, lfi):
		*out = append(*out, Change{Path: p, Kind: Modified, Size: fi.Size()})
	}
	return nil
}

// unchanged is same, with matching size and modification time taken as
// proof: the copy was made with the lower's times.
func unchanged(root *os.Root, rel, l string, mfi, lfi fs.FileInfo) bool {
	if mfi.Mode().IsRegular() && mfi.Mode() == lfi.Mode() && mfi.Size() == lfi.Size() && mfi.ModTime().Equal(lfi.ModTime()) {
		return true
	}
	return same(root, rel, l, mfi, lfi)
}

// addAllCopied reports everything beneath an added directory of a copy.
func addAllCopied(root *os.Root, rel string, out *[]Change) error {
	entries, _, err := readUpper(root, rel)
	if err != nil {
		return fmt.Errorf("read sandbox copy: %w", err)
	}
	for _, e := range entries {
		p := path.Join(rel, e.name)
		if e.fi.IsDir() {
			*out = append(*out, Change{Path: p, Kind: Added, IsDir: true})
			if err := addAllCopied(root, p, out); err != nil {
				return err
			}
			continue
		}
		*out = append(*out, Change{Path: p, Kind: Added, Size: e.fi.Size()})
	}
	return nil
}
