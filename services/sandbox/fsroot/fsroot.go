// Package fsroot reads and writes files beneath a sandbox's root directory.
// Every path is resolved by os.Root, which walks it component by component
// and refuses to leave the root through "..", absolute symlinks or symlinks
// that climb out, so a path check cannot be bypassed by a symlink planted
// inside the sandbox.
package fsroot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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
	// ErrNotDir means the path names something other than a directory.
	ErrNotDir = errors.New("not a directory")
	// ErrTooLarge means the file exceeds the size limit.
	ErrTooLarge = errors.New("file too large")
)

// Clean validates a path given relative to the root and returns it cleaned;
// the empty path is the root itself ("."). It refuses absolute paths and any
// ".." component up front, so a caller sees a clear error even where os.Root
// would have resolved the path harmlessly.
func Clean(p string) (string, error) {
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
	}
	return filepath.Clean(p), nil
}

// Root is a directory that paths are resolved beneath.
type Root struct {
	dir  string // as given
	real string // with symlinks resolved, to check what the kernel reports
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
		return nil, 0, fmt.Errorf("%w: %s is %s", ErrNotRegular, clean, describe(st.Mode()))
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
	perm &= fs.ModePerm
	root, err := r.open()
	if err != nil {
		return err
	}
	defer root.Close()
	dir, name := filepath.Split(clean)
	if dir != "" {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return classify(err)
		}
	}
	if st, err := root.Lstat(clean); err == nil && st.IsDir() {
		return fmt.Errorf("%w: %s is a directory", ErrNotRegular, clean)
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(dir, "."+name+".deskgrid-"+hex.EncodeToString(suffix[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return classify(err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm) // the umask must not narrow the requested mode
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = classify(root.Rename(tmp, clean))
	}
	if werr != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write %s: %w", clean, werr)
	}
	return nil
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
