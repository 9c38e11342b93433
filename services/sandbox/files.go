package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/fsroot"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/jail"
)

// Paths given to the files API and an exec's working directory mean the
// same in both kinds of sandbox: a relative path starts at the session
// user's home, an absolute one is the path the session's programs see. A
// sandbox on the node's programs (bubblewrap) shows only its home, jail.Home,
// to the API: an absolute path elsewhere is refused. A sandbox running an
// image shows its whole root filesystem; its home is the image user's
// (HOME in the image's environment, else the user's /etc/passwd entry).
// Symlinks lead where they do for the session's programs (fsroot.SeenAt),
// and only within what the API shows.

// checkPath validates a path's form and cleans it, keeping it relative or
// absolute: "" is ".", the home.
func checkPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return fsroot.Clean(p)
	}
	c, err := fsroot.Clean(strings.TrimLeft(p, "/"))
	if err != nil {
		return "", err
	}
	if c == "." {
		return "/", nil
	}
	return "/" + c, nil
}

// home is the session user's home inside b, absolute.
func (b *box) home() string {
	if b.img == nil {
		return jail.Home
	}
	return imageHome(b.merged(), b.img.Config.Env, b.img.Config.User)
}

// imageHome is the home of an image's user: HOME in its environment, else
// the home of its /etc/passwd entry, else "/".
func imageHome(rootfs string, env []string, user string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok && strings.HasPrefix(v, "/") {
			if c, err := checkPath(v); err == nil {
				return c
			}
		}
	}
	u, _, _ := strings.Cut(user, ":")
	if u == "" {
		u = "0"
	}
	for _, line := range strings.Split(string(readInside(rootfs, "etc/passwd")), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 6 || f[0] != u && f[2] != u {
			continue
		}
		if c, err := checkPath(f[5]); err == nil && strings.HasPrefix(c, "/") {
			return c
		}
		break
	}
	return "/"
}

// readInside reads up to 1 MiB of a file beneath root, not following a
// symlink out of it (an image session's user may replace any file); nil
// when it cannot.
func readInside(root, name string) []byte {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil
	}
	defer r.Close()
	// O_NONBLOCK: a FIFO put there must not hold the call.
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	data, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return data
}

// rootRel turns a path of the files API or a working directory (what names
// it in errors) into one relative to b's root directory, b.merged().
func (b *box) rootRel(what, p string) (string, error) {
	c, err := checkPath(p)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(c, "/") {
		if b.img == nil {
			return c, nil
		}
		return path.Join(strings.TrimPrefix(b.home(), "/"), c), nil
	}
	if b.img != nil {
		if c == "/" {
			return ".", nil
		}
		return strings.TrimPrefix(c, "/"), nil
	}
	rel, ok := strings.CutPrefix(c, jail.Home)
	if !ok || rel != "" && rel[0] != '/' {
		return "", invalidf("%s %q is outside %s: a session on the node's programs shows only its home (give a path relative to it)", what, p, jail.Home)
	}
	if rel = strings.TrimPrefix(rel, "/"); rel == "" {
		return ".", nil
	}
	return rel, nil
}

// fileRel is rootRel for the files API, given b's root r: in a session on
// an image it refuses a path the session's container mounts over (its own
// /tmp, /run, /dev, /proc, /sys, and the runtime's /etc/hostname,
// /etc/hosts and /etc/resolv.conf), also when a symlink leads there (Debian's
// /var/run). The files API reaches the root filesystem beneath those mounts,
// where a file written would stay hidden from the session's programs (and
// land in a commit) and what they write is never found.
func (b *box) fileRel(r *fsroot.Root, p string) (string, error) {
	rel, err := b.rootRel("path", p)
	if err != nil || b.img == nil {
		return rel, err
	}
	if m := mountedOver(r, rel); m != "" {
		return "", invalidf("path %q reaches /%s, which the session's container mounts over its root filesystem: the files API does not reach it (its programs do: use exec or the shell there, or a path elsewhere, such as the home)", p, m)
	}
	return rel, nil
}

// mountedOver returns which of the runtime's mount points (container.
// MountPoints) rel, relative to r, lies at or beneath once the symlinks of its
// existing part are followed; "" when none.
func mountedOver(r *fsroot.Root, rel string) string {
	if m := mountAt(rel); m != "" {
		return m
	}
	return mountAt(resolveExisting(r, rel))
}

// mountAt returns the runtime's mount point p (relative to the root) lies at
// or beneath, or "".
func mountAt(p string) string {
	for _, m := range container.MountPoints {
		if p == m || strings.HasPrefix(p, m+"/") {
			return m
		}
	}
	return ""
}

// resolveExisting is rel with the symlinks of its longest existing part
// followed (r.Resolve), the rest kept as given.
func resolveExisting(r *fsroot.Root, rel string) string {
	for dir, rest := rel, ""; dir != "."; dir, rest = path.Dir(dir), path.Join(path.Base(dir), rest) {
		if real, err := r.Resolve(dir); err == nil {
			return path.Join(real, rest)
		}
	}
	return rel
}

// shown gives err, when it is a path error of b's root directory, the path
// the session's programs see: absolute, beneath / for a session on an
// image, beneath the home for one on the node's programs.
func (b *box) shown(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && !path.IsAbs(pe.Path) {
		base := "/"
		if b.img == nil {
			base = jail.Home
		}
		pe.Path = path.Join(base, pe.Path)
	}
	return err
}

func (s *Service) root(b *box) (*fsroot.Root, error) {
	r, err := fsroot.New(b.merged())
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", b.id, err)
	}
	if b.img != nil {
		// What the file API makes belongs to the image's user, in the
		// session's range, as if the user had made it inside.
		uid, gid, err := imageUser(b.merged(), b.img.Config.User)
		if err != nil {
			uid, gid = 0, 0
		}
		// Its programs see the root filesystem as theirs: an absolute
		// symlink (/var/run -> /run, /etc/alternatives) starts there.
		return r.Owned(int(b.img.Range.Host(uint32(uid))), int(b.img.Range.Host(uint32(gid)))).Chroot(), nil
	}
	// A session on the node's programs sees its root directory as its home:
	// a link there to /home/user/... is one into it.
	return r.SeenAt(jail.Home), nil
}

func (s *Service) readFile(ctx context.Context, id, path string) ([]byte, fs.FileMode, error) {
	if _, err := checkPath(path); err != nil {
		return nil, 0, err
	}
	if path == "" {
		return nil, 0, invalidf("path is required")
	}
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	defer release()
	r, err := s.root(b)
	if err != nil {
		return nil, 0, err
	}
	rel, err := b.fileRel(r, path)
	if err != nil {
		return nil, 0, err
	}
	data, mode, err := r.ReadFile(rel, s.cfg.MaxFileBytes)
	return data, mode, b.shown(err)
}

func (s *Service) writeFile(ctx context.Context, id, path string, data []byte, mode fs.FileMode) error {
	if _, err := checkPath(path); err != nil {
		return err
	}
	if path == "" {
		return invalidf("path is required")
	}
	if int64(len(data)) > s.cfg.MaxFileBytes {
		return fmt.Errorf("%w: content is %d bytes, over the limit of %d", fsroot.ErrTooLarge, len(data), s.cfg.MaxFileBytes)
	}
	if mode&^fs.ModePerm != 0 {
		return invalidf("mode %#o: only permission bits (0777) are allowed", uint32(mode))
	}
	if mode == 0 {
		mode = 0o644
	}
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	r, err := s.root(b)
	if err != nil {
		return err
	}
	rel, err := b.fileRel(r, path)
	if err != nil {
		return err
	}
	return b.shown(r.WriteFile(rel, data, mode))
}

func (s *Service) listFiles(ctx context.Context, id, path string) ([]fs.FileInfo, error) {
	if _, err := checkPath(path); err != nil {
		return nil, err
	}
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := s.root(b)
	if err != nil {
		return nil, err
	}
	rel, err := b.fileRel(r, path)
	if err != nil {
		return nil, err
	}
	fis, err := r.List(rel)
	return fis, b.shown(err)
}

// withRoot runs fn on a sandbox's root while holding the sandbox; at turns
// a path of the API into one relative to that root.
func (s *Service) withRoot(ctx context.Context, id string, fn func(r *fsroot.Root, at func(string) (string, error)) error) error {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	r, err := s.root(b)
	if err != nil {
		return err
	}
	return b.shown(fn(r, func(p string) (string, error) { return b.fileRel(r, p) }))
}

// inside is at for a call that changes what a path names: the path may not
// be the sandbox's root directory.
func inside(at func(string) (string, error), p string) (string, error) {
	rel, err := at(p)
	if err == nil && rel == "." {
		return "", invalidf("path %q is the sandbox's root directory; name something inside it", p)
	}
	return rel, err
}

func requirePath(p string) error {
	c, err := checkPath(p)
	if err != nil {
		return err
	}
	if c == "." {
		return invalidf("path is required")
	}
	return nil
}

func (s *Service) statFile(ctx context.Context, id, p string) (fs.FileInfo, error) {
	if _, err := checkPath(p); err != nil {
		return nil, err
	}
	var fi fs.FileInfo
	err := s.withRoot(ctx, id, func(r *fsroot.Root, at func(string) (string, error)) error {
		rel, err := at(p)
		if err != nil {
			return err
		}
		fi, err = r.Stat(rel)
		return err
	})
	return fi, err
}

func (s *Service) makeDirectory(ctx context.Context, id, p string, mode fs.FileMode, parents bool) error {
	if err := requirePath(p); err != nil {
		return err
	}
	if mode&^fs.ModePerm != 0 {
		return invalidf("mode %#o: only permission bits (0777) are allowed", uint32(mode))
	}
	if mode == 0 {
		mode = 0o755
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root, at func(string) (string, error)) error {
		rel, err := inside(at, p)
		if err != nil {
			return err
		}
		return r.Mkdir(rel, mode, parents)
	})
}

func (s *Service) moveFile(ctx context.Context, id, from, to string, overwrite bool) error {
	if err := requirePath(from); err != nil {
		return err
	}
	if err := requirePath(to); err != nil {
		return err
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root, at func(string) (string, error)) error {
		relFrom, err := inside(at, from)
		if err != nil {
			return err
		}
		relTo, err := inside(at, to)
		if err != nil {
			return err
		}
		return r.Rename(relFrom, relTo, overwrite)
	})
}

func (s *Service) deleteFile(ctx context.Context, id, p string, recursive bool) error {
	if err := requirePath(p); err != nil {
		return err
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root, at func(string) (string, error)) error {
		rel, err := inside(at, p)
		if err != nil {
			return err
		}
		return r.Remove(rel, recursive)
	})
}

// upload writes a streamed file: next returns its chunks, then io.EOF.
func (s *Service) upload(ctx context.Context, id, p string, mode fs.FileMode, next func() ([]byte, error)) (fs.FileInfo, error) {
	if err := requirePath(p); err != nil {
		return nil, err
	}
	if mode&^fs.ModePerm != 0 {
		return nil, invalidf("mode %#o: only permission bits (0777) are allowed", uint32(mode))
	}
	if mode == 0 {
		mode = 0o644
	}
	var fi fs.FileInfo
	err := s.withRoot(ctx, id, func(r *fsroot.Root, at func(string) (string, error)) error {
		rel, err := inside(at, p)
		if err != nil {
			return err
		}
		w, err := r.Create(rel, mode)
		if err != nil {
			return err
		}
		var n int64
		for {
			chunk, err := next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				w.Abort()
				return err
			}
			if n += int64(len(chunk)); n > s.cfg.MaxUploadBytes {
				w.Abort()
				return fmt.Errorf("%w: upload is over the limit of %d bytes", fsroot.ErrTooLarge, s.cfg.MaxUploadBytes)
			}
			if _, err := w.Write(chunk); err != nil {
				w.Abort()
				return fmt.Errorf("write %s: %w", p, err)
			}
		}
		if err := w.Commit(); err != nil {
			return err
		}
		fi, err = r.Stat(rel)
		return err
	})
	return fi, err
}

// download streams a regular file to send, info first.
func (s *Service) download(ctx context.Context, id, p string, info func(fs.FileInfo) error, send func([]byte) error) error {
	if err := requirePath(p); err != nil {
		return err
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root, at func(string) (string, error)) error {
		rel, err := at(p)
		if err != nil {
			return err
		}
		f, fi, err := r.Open(rel)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := info(fi); err != nil {
			return err
		}
		buf := make([]byte, s.cfg.ExecChunkBytes)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if serr := send(buf[:n]); serr != nil {
					return serr
				}
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
		}
	})
}
