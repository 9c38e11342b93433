// Package fsroot reads and writes files beneath a sandbox's root directory.
// Every path is resolved by os.Root, which walks it component by component
// and refuses to leave the root through "..", absolute symlinks or symlinks
// that climb out, so a path check cannot be bypassed by a symlink planted
// inside the sandbox. A SeenAt root first follows a path's symlinks itself
// as the programs that use the root would (an absolute target from where
// they see it), then hands os.Root a path with none left in it.
package fsroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

var (
	// ErrInvalidPath means the path is malformed: absolute, with "..", or with a NUL.
	ErrInvalidPath = errors.New("invalid path")
	// ErrEscape means resolving the path would leave the root.
	ErrEscape = errors.New("path escapes the sandbox root")
	// ErrNotRegular means the path names something other than a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrIsDir comes with ErrNotRegular when the path names a directory.
	ErrIsDir = errors.New("a directory")
	// ErrNotDir means the path names something other than a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrTooLarge means the file exceeds the size limit.
	ErrTooLarge = errors.New("file too large")
)

// The kernel's limits on a path and on one name in it (PATH_MAX, NAME_MAX):
// longer ones are refused up front as bad input instead of failing deep
// inside with ENAMETOOLONG.
const (
	MaxPathBytes = 4096
	MaxNameBytes = 255
)

// Clean validates a path given relative to the root and returns it cleaned;
// the empty path is the root itself ("."). It refuses absolute paths and any
// ".." component up front, so a caller sees a clear error even where os.Root
// would have resolved the path harmlessly.
func Clean(p string) (string, error) {
	if len(p) >= MaxPathBytes {
		return "", fmt.Errorf("%w: the path is %d bytes long; at most %d are allowed", ErrInvalidPath, len(p), MaxPathBytes-1)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrInvalidPath, p)
	}
	if p == "" {
		return ".", nil
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: %q is absolute; give a path relative to the sandbox home", ErrInvalidPath, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q contains \"..\"", ErrInvalidPath, p)
		}
		if len(part) > MaxNameBytes {
			return "", fmt.Errorf("%w: the name %.32q... is %d bytes long; a file or directory name may have at most %d", ErrInvalidPath, part, len(part), MaxNameBytes)
		}
	}
	return filepath.Clean(p), nil
}

// Root is a directory that paths are resolved beneath.
type Root struct {
	dir  string // as given
	real string // with symlinks resolved, to check what the kernel reports
	// owned, when set, gives files and directories this makes to uid:gid.
	owned    bool
	uid, gid int
	// at, when set, is the absolute path the programs using the root see it
	// at ("/" for a container's root filesystem): symlinks are followed as
	// they see them (SeenAt).
	at string
}

// Owned returns a Root that gives the files and directories it creates to
// uid:gid (host ids), as a container's user would own them.
func (r *Root) Owned(uid, gid int) *Root {
	c := *r
	c.owned, c.uid, c.gid = true, uid, gid
	return &c
}

// Chroot returns a Root that follows symlinks as the programs of a container
// whose root filesystem it is see them: SeenAt("/").
func (r *Root) Chroot() *Root { return r.SeenAt("/") }

// SeenAt returns a Root that follows symlinks as programs that see the root
// at dir (an absolute path) do: an absolute target, or a relative one that
// climbs, leads where it does for them, and is followed when that is beneath
// dir (beneath "/", always: ".." at the root stays there) and an escape
// otherwise. Links are followed by this package, component by component,
// and what it hands os.Root has none left to follow, so a link swapped in
// meanwhile still cannot lead out.
func (r *Root) SeenAt(dir string) *Root {
	c := *r
	c.at = path.Clean("/" + dir)
	return &c
}

// maxLinks bounds the symlinks one path may go through (Linux's 40).
const maxLinks = 40

// walk returns clean with the symlinks of its existing part followed as
// SeenAt says, the last component's only with followLast; clean itself
// when the Root has no SeenAt. What does not exist is kept as given.
func (r *Root) walk(root *os.Root, clean string, followLast bool) (string, error) {
	if r.at == "" || clean == "." {
		return clean, nil
	}
	var base []string
	if r.at != "/" {
		base = strings.Split(strings.TrimPrefix(r.at, "/"), "/")
	}
	// abs is the path as the programs see it, component by component.
	abs := slices.Clone(base)
	beneath := func() bool { return len(abs) >= len(base) && slices.Equal(abs[:len(base)], base) }
	todo := strings.Split(clean, "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(abs) > 0 {
				abs = abs[:len(abs)-1]
			}
			continue
		}
		abs = append(abs, c)
		if !beneath() {
			continue // outside the root: nothing there to look at
		}
		cur := filepath.Join(abs[len(base):]...)
		st, err := root.Lstat(cur)
		if err != nil || st.Mode()&fs.ModeSymlink == 0 || len(todo) == 0 && !followLast {
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%w: %s: too many symbolic links", ErrInvalidPath, clean)
		}
		target, err := root.Readlink(cur)
		if err != nil {
			return "", classify(err)
		}
		abs = abs[:len(abs)-1]
		if strings.HasPrefix(target, "/") {
			abs = abs[:0]
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	if !beneath() {
		return "", fmt.Errorf("%w: %s leads to /%s, outside %s", ErrEscape, clean, strings.Join(abs, "/"), r.at)
	}
	if len(abs) == len(base) {
		return ".", nil
	}
	return filepath.Join(abs[len(base):]...), nil
}

// New returns a Root for dir, which must exist.
func New(dir string) (*Root, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve root %s: %w", dir, err)
	}
	return &Root{dir: dir, real: real}, nil
}

// open opens the root for one operation; nothing is held open between
// operations so the root's mount can always be unmounted.
func (r *Root) open() (*os.Root, error) {
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", r.dir, err)
	}
	return root, nil
}

// classify maps os.Root's errors to this package's.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// os.Root reports escapes with an unexported error of this text,
		// sometimes inside another PathError.
		for e := error(pe); e != nil; e = errors.Unwrap(e) {
			if e.Error() == "path escapes from parent" {
				return fmt.Errorf("%w: %s", ErrEscape, pe.Path)
			}
		}
		if errors.Is(pe.Err, syscall.ELOOP) {
			return fmt.Errorf("%w: %s: too many symbolic links", ErrInvalidPath, pe.Path)
		}
		if errors.Is(pe.Err, syscall.ENOTDIR) {
			return fmt.Errorf("%w: %s", ErrNotDir, pe.Path)
		}
	}
	return err
}

// Resolve returns where p really lies, relative to the root, after following
// symlinks (which must stay beneath the root). The path must exist.
func (r *Root) Resolve(p string) (string, error) {
	clean, err := Clean(p)
	if err != nil {
		return "", err
	}
	root, err := r.open()
	if err != nil {
		return "", err
	}
	defer root.Close()
	if clean, err = r.walk(root, clean, true); err != nil {
		return "", err
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", classify(err)
	}
	defer f.Close()
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return "", fmt.Errorf("locate %s: %w", clean, err)
	}
	rel, err := filepath.Rel(r.real, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		// os.Root should make this impossible; refuse rather than trust.
		return "", fmt.Errorf("%w: %s resolves to %s", ErrEscape, clean, real)
	}
	return rel, nil
}

// ReadFile returns a regular file's content and permission bits, refusing
// files larger than max bytes.
func (r *Root) ReadFile(p string, max int64) ([]byte, fs.FileMode, error) {
	clean, err := Clean(p)
	if err != nil {
		return nil, 0, err
	}
	root, err := r.open()
	if err != nil {
		return nil, 0, err
	}
	defer root.Close()
	if clean, err = r.walk(root, clean, true); err != nil {
		return nil, 0, err
	}
	f, err := root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, classify(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("stat %s: %w", clean, err)
	}
	if !st.Mode().IsRegular() {
		return nil, 0, notRegular(clean, st.Mode())
	}
	if st.Size() > max {
		return nil, 0, fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrTooLarge, clean, st.Size(), max)
	}
	// The file may grow while being read: read at most one byte past the limit.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", clean, err)
	}
	if int64(len(data)) > max {
		return nil, 0, fmt.Errorf("%w: %s grew past the limit of %d bytes", ErrTooLarge, clean, max)
	}
	return data, st.Mode().Perm(), nil
}

// WriteFile creates or atomically replaces a regular file, creating missing
// parent directories. A symlink at p is replaced, never followed.
func (r *Root) WriteFile(p string, data []byte, perm fs.FileMode) error {
	clean, err := Clean(p)
	if err != nil {
		return err
	}
	if clean == "." {
		return fmt.Errorf("%w: a file path is required", ErrInvalidPath)
	}
	w, err := r.Create(clean, perm)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return fmt.Errorf("write %s: %w", clean, err)
	}
	return w.Commit()
}

// Writer is a file being written: it appears at its path, whole, on
// Commit, and not at all on Abort.
type Writer struct {
	root     *os.Root
	f        *os.File
	tmp      string
	path     string
	perm     fs.FileMode
	finished bool
}

// Create starts writing a regular file that creates or atomically replaces
// p, creating missing parent directories. A symlink at p is replaced, never
// followed. Call Commit or Abort.
func (r *Root) Create(p string, perm fs.FileMode) (*Writer, error) {
	clean, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if clean == "." {
		return nil, fmt.Errorf("%w: a file path is required", ErrInvalidPath)
	}
	perm &= fs.ModePerm
	root, err := r.open()
	if err != nil {
		return nil, err
	}
	if clean, err = r.walk(root, clean, false); err != nil {
		root.Close()
		return nil, err
	}
	dir, name := filepath.Split(clean)
	if dir != "" {
		if err := r.mkdirAll(root, filepath.Clean(dir), 0o755); err != nil {
			root.Close()
			return nil, classify(err)
		}
	}
	if st, err := root.Lstat(clean); err == nil && st.IsDir() {
		root.Close()
		return nil, notRegular(clean, st.Mode())
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(dir, "."+name+".deskgrid-"+hex.EncodeToString(suffix[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		root.Close()
		return nil, classify(err)
	}
	if r.owned {
		if err := f.Chown(r.uid, r.gid); err != nil {
			f.Close()
			_ = root.Remove(tmp)
			root.Close()
			return nil, err
		}
	}
	return &Writer{root: root, f: f, tmp: tmp, path: clean, perm: perm}, nil
}

// Write appends to the file.
func (w *Writer) Write(p []byte) (int, error) { return w.f.Write(p) }

// Commit puts the file in place.
func (w *Writer) Commit() error {
	if w.finished {
		return errors.New("file already committed or aborted")
	}
	w.finished = true
	defer w.root.Close()
	werr := w.f.Chmod(w.perm) // the umask must not narrow the requested mode
	if cerr := w.f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = classify(w.root.Rename(w.tmp, w.path))
	}
	if werr != nil {
		_ = w.root.Remove(w.tmp)
		return fmt.Errorf("write %s: %w", w.path, werr)
	}
	return nil
}

// Abort drops the file; it is a no-op after Commit.
func (w *Writer) Abort() {
	if w.finished {
		return
	}
	w.finished = true
	_ = w.f.Close()
	_ = w.root.Remove(w.tmp)
	_ = w.root.Close()
}

// Open opens a regular file for reading.
func (r *Root) Open(p string) (*os.File, fs.FileInfo, error) {
	clean, err := Clean(p)
	if err != nil {
		return nil, nil, err
	}
	root, err := r.open()
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	if clean, err = r.walk(root, clean, true); err != nil {
		return nil, nil, err
	}
	f, err := root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, classify(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", clean, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(clean, st.Mode())
	}
	return f, st, nil
}

// Stat describes p without following a final symlink.
func (r *Root) Stat(p string) (fs.FileInfo, error) {
	clean, err := Clean(p)
	if err != nil {
		return nil, err
	}
	root, err := r.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if clean, err = r.walk(root, clean, false); err != nil {
		return nil, err
	}
	st, err := root.Lstat(clean)
	return st, classify(err)
}

// Mkdir creates a directory; with parents, missing parents too, and an
// existing directory is not an error.
func (r *Root) Mkdir(p string, perm fs.FileMode, parents bool) error {
	clean, err := Clean(p)
	if err != nil {
		return err
	}
	if clean == "." {
		if parents {
			return nil
		}
		return fmt.Errorf("%w: the root exists", fs.ErrExist)
	}
	root, err := r.open()
	if err != nil {
		return err
	}
	defer root.Close()
	if clean, err = r.walk(root, clean, false); err != nil {
		return err
	}
	if parents {
		return classify(r.mkdirAll(root, clean, perm&fs.ModePerm))
	}
	if err := root.Mkdir(clean, perm&fs.ModePerm); err != nil {
		return classify(err)
	}
	if r.owned {
		if err := root.Lchown(clean, r.uid, r.gid); err != nil {
			return classify(err)
		}
	}
	return classify(root.Chmod(clean, perm&fs.ModePerm))
}

// Rename moves from to to. Without overwrite an existing to is refused
// (fs.ErrExist), atomically (renameat2 RENAME_NOREPLACE).
func (r *Root) Rename(from, to string, overwrite bool) error {
	cf, err := Clean(from)
	if err != nil {
		return err
	}
	ct, err := Clean(to)
	if err != nil {
		return err
	}
	if cf == "." || ct == "." {
		return fmt.Errorf("%w: the root cannot be moved or replaced", ErrInvalidPath)
	}
	root, err := r.open()
	if err != nil {
		return err
	}
	defer root.Close()
	if cf, err = r.walk(root, cf, false); err != nil {
		return err
	}
	if ct, err = r.walk(root, ct, false); err != nil {
		return err
	}
	openDir := func(p string) (*os.File, error) {
		f, err := root.OpenFile(p, os.O_RDONLY|unix.O_DIRECTORY, 0)
		return f, classify(err)
	}
	fd, err := openDir(filepath.Dir(cf))
	if err != nil {
		return err
	}
	defer fd.Close()
	td, err := openDir(filepath.Dir(ct))
	if err != nil {
		return err
	}
	defer td.Close()
	var flags uint
	if !overwrite {
		flags = unix.RENAME_NOREPLACE
	}
	if err := unix.Renameat2(int(fd.Fd()), filepath.Base(cf), int(td.Fd()), filepath.Base(ct), flags); err != nil {
		return classify(&fs.PathError{Op: "rename", Path: cf, Err: err})
	}
	return nil
}

// Remove removes a file or an empty directory; with recursive, a
// directory and everything beneath it.
func (r *Root) Remove(p string, recursive bool) error {
	clean, err := Clean(p)
	if err != nil {
		return err
	}
	if clean == "." {
		return fmt.Errorf("%w: the root cannot be removed", ErrInvalidPath)
	}
	root, err := r.open()
	if err != nil {
		return err
	}
	defer root.Close()
	if clean, err = r.walk(root, clean, false); err != nil {
		return err
	}
	if _, err := root.Lstat(clean); err != nil {
		return classify(err)
	}
	if recursive {
		return classify(root.RemoveAll(clean))
	}
	return classify(root.Remove(clean))
}

// List returns a directory's entries sorted by name; symlinks are described,
// not followed.
func (r *Root) List(p string) ([]fs.FileInfo, error) {
	clean, err := Clean(p)
	if err != nil {
		return nil, err
	}
	root, err := r.open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if clean, err = r.walk(root, clean, true); err != nil {
		return nil, err
	}
	f, err := root.OpenFile(clean, os.O_RDONLY|syscall.O_NONBLOCK|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, classify(err)
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, classify(fmt.Errorf("list %s: %w", clean, err))
	}
	out := make([]fs.FileInfo, 0, len(entries))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// notRegular is the error for clean, of mode m, named where a regular file
// was expected.
func notRegular(clean string, m fs.FileMode) error {
	if m.IsDir() {
		return fmt.Errorf("%w: %s is %w", ErrNotRegular, clean, ErrIsDir)
	}
	return fmt.Errorf("%w: %s is %s", ErrNotRegular, clean, describe(m))
}

func describe(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "not a regular file"
	}
}

// mkdirAll is root.MkdirAll, giving the directories it makes to the
// Root's owner when it has one.
func (r *Root) mkdirAll(root *os.Root, dir string, perm fs.FileMode) error {
	var made []string
	if r.owned {
		for p := dir; p != "." && p != "/" && p != ""; p = filepath.Dir(p) {
			if _, err := root.Lstat(p); err == nil {
				break
			}
			made = append(made, p)
		}
	}
	if err := root.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, p := range made {
		if err := root.Lchown(p, r.uid, r.gid); err != nil {
			return err
		}
	}
	return nil
}
