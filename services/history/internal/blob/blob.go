// Package blob keeps large bytes, such as screenshots, once each under the
// SHA-256 of their content. Dir keeps them in a directory; an object store
// can stand behind the same Store interface.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotFound is returned for a hash with no blob.
var ErrNotFound = errors.New("blob: not found")

// ErrInvalidHash is returned for a string that is not a SHA-256 in hex.
var ErrInvalidHash = errors.New("blob: invalid hash")

// Store keeps blobs by content hash.
type Store interface {
	// Put stores data, durably, and returns its hash. Storing bytes already
	// stored only refreshes their modification time.
	Put(ctx context.Context, data []byte) (hash string, err error)
	// Get returns the bytes of a hash, or ErrNotFound.
	Get(ctx context.Context, hash string) ([]byte, error)
	// Delete removes a blob; a missing blob is not an error.
	Delete(ctx context.Context, hash string) error
	// Walk calls fn with every blob last put before olderThan.
	Walk(ctx context.Context, olderThan time.Time, fn func(hash string) error) error
	// PutFrom stores what r reads, as Put, without holding it in memory
	// (a video), and returns its hash and size.
	PutFrom(ctx context.Context, r io.Reader) (hash string, size int64, err error)
	// Open returns a reader of a blob and its size, or ErrNotFound.
	Open(ctx context.Context, hash string) (io.ReadCloser, int64, error)
}

// Hash returns the hash Put gives data.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ValidHash reports whether s is a SHA-256 as Hash writes it: 64 lowercase
// hex digits. Only such names ever reach the file system.
func ValidHash(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Dir is a Store in a directory: <root>/sha256/<first two hex>/<hash>.
type Dir struct {
	root string
}

var _ Store = (*Dir)(nil)

// OpenDir opens, creating it if needed, the blob directory at root.
func OpenDir(root string) (*Dir, error) {
	for _, d := range []string{filepath.Join(root, "sha256"), filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("blob: %w", err)
		}
	}
	return &Dir{root: root}, nil
}

func (d *Dir) path(hash string) string {
	return filepath.Join(d.root, "sha256", hash[:2], hash)
}

// Put implements Store. The bytes go to a temporary file that is synced and
// then renamed into place, so a blob is either whole or absent.
func (d *Dir) Put(ctx context.Context, data []byte) (string, error) {
	hash := Hash(data)
	p := d.path(hash)
	now := time.Now()
	// Already there: refresh its time so a collection running now, which
	// spares recent blobs, does not take it from the entry about to refer
	// to it.
	if err := os.Chtimes(p, now, now); err == nil {
		return hash, nil
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return "", fmt.Errorf("blob: %w", err)
	}
	f, err := os.CreateTemp(filepath.Join(d.root, "tmp"), hash[:8]+"-*")
	if err != nil {
		return "", fmt.Errorf("blob: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", fmt.Errorf("blob: write %s: %w", hash, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("blob: sync %s: %w", hash, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("blob: close %s: %w", hash, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("blob: %w", err)
	}
	// The rename is durable only once the directory is synced.
	if dir, err := os.Open(filepath.Dir(p)); err == nil {
		err = dir.Sync()
		dir.Close()
		if err != nil {
			return "", fmt.Errorf("blob: sync directory of %s: %w", hash, err)
		}
	}
	return hash, nil
}

// PutFrom implements Store: the bytes are hashed as they are written to a
// temporary file, which is synced and renamed to its hash.
func (d *Dir) PutFrom(ctx context.Context, r io.Reader) (string, int64, error) {
	f, err := os.CreateTemp(filepath.Join(d.root, "tmp"), "stream-*")
	if err != nil {
		return "", 0, fmt.Errorf("blob: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	var h hash.Hash = sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), ctxReader{ctx, r})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("blob: write: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	p := d.path(sum)
	now := time.Now()
	if err := os.Chtimes(p, now, now); err == nil {
		return sum, n, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return "", 0, fmt.Errorf("blob: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", 0, fmt.Errorf("blob: %w", err)
	}
	if dir, err := os.Open(filepath.Dir(p)); err == nil {
		err = dir.Sync()
		dir.Close()
		if err != nil {
			return "", 0, fmt.Errorf("blob: sync directory of %s: %w", sum, err)
		}
	}
	return sum, n, nil
}

// ctxReader stops a copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Open implements Store.
func (d *Dir) Open(_ context.Context, hash string) (io.ReadCloser, int64, error) {
	if !ValidHash(hash) {
		return nil, 0, fmt.Errorf("%w: %q", ErrInvalidHash, hash)
	}
	f, err := os.Open(d.path(hash))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, hash)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("blob: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("blob: %w", err)
	}
	return f, info.Size(), nil
}

// Get implements Store.
func (d *Dir) Get(_ context.Context, hash string) ([]byte, error) {
	if !ValidHash(hash) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidHash, hash)
	}
	b, err := os.ReadFile(d.path(hash))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, hash)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	return b, nil
}

// Delete implements Store.
func (d *Dir) Delete(_ context.Context, hash string) error {
	if !ValidHash(hash) {
		return fmt.Errorf("%w: %q", ErrInvalidHash, hash)
	}
	if err := os.Remove(d.path(hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob: %w", err)
	}
	return nil
}

// Walk implements Store. It also removes temporary files left older than
// olderThan by a crash in the middle of a Put.
func (d *Dir) Walk(ctx context.Context, olderThan time.Time, fn func(hash string) error) error {
	tmps, _ := os.ReadDir(filepath.Join(d.root, "tmp"))
	for _, t := range tmps {
		if info, err := t.Info(); err == nil && info.ModTime().Before(olderThan) {
			_ = os.Remove(filepath.Join(d.root, "tmp", t.Name()))
		}
	}
	return filepath.WalkDir(filepath.Join(d.root, "sha256"), func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := de.Name()
		if de.IsDir() || !ValidHash(name) || !strings.HasPrefix(name, filepath.Base(filepath.Dir(p))) {
			return nil
		}
		info, err := de.Info()
		if err != nil || !info.ModTime().Before(olderThan) {
			return nil
		}
		return fn(name)
	})
}
