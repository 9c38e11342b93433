package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"google.golang.org/grpc/codes"

	"github.com/deskgrid/deskgrid/services/sandbox/fsroot"
)

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
		return r.Owned(int(b.img.Range.Host(uint32(uid))), int(b.img.Range.Host(uint32(gid)))), nil
	}
	return r, nil
}

func (s *Service) readFile(ctx context.Context, id, path string) ([]byte, fs.FileMode, error) {
	if _, err := fsroot.Clean(path); err != nil {
		return nil, 0, err
	}
	if path == "" {
		return nil, 0, coded(codes.InvalidArgument, "path is required")
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
	return r.ReadFile(path, s.cfg.MaxFileBytes)
}

func (s *Service) writeFile(ctx context.Context, id, path string, data []byte, mode fs.FileMode) error {
	if _, err := fsroot.Clean(path); err != nil {
		return err
	}
	if path == "" {
		return coded(codes.InvalidArgument, "path is required")
	}
	if int64(len(data)) > s.cfg.MaxFileBytes {
		return fmt.Errorf("%w: content is %d bytes, over the limit of %d", fsroot.ErrTooLarge, len(data), s.cfg.MaxFileBytes)
	}
	if mode&^fs.ModePerm != 0 {
		return coded(codes.InvalidArgument, "mode %#o: only permission bits (0777) are allowed", uint32(mode))
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
	return r.WriteFile(path, data, mode)
}

func (s *Service) listFiles(ctx context.Context, id, path string) ([]fs.FileInfo, error) {
	if _, err := fsroot.Clean(path); err != nil {
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
	return r.List(path)
}

// withRoot runs fn on a sandbox's root while holding the sandbox.
func (s *Service) withRoot(ctx context.Context, id string, fn func(*fsroot.Root) error) error {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	r, err := s.root(b)
	if err != nil {
		return err
	}
	return fn(r)
}

func requirePath(p string) error {
	c, err := fsroot.Clean(p)
	if err != nil {
		return err
	}
	if c == "." {
		return coded(codes.InvalidArgument, "path is required")
	}
	return nil
}

func (s *Service) statFile(ctx context.Context, id, p string) (fs.FileInfo, error) {
	if _, err := fsroot.Clean(p); err != nil {
		return nil, err
	}
	var fi fs.FileInfo
	err := s.withRoot(ctx, id, func(r *fsroot.Root) (err error) {
		fi, err = r.Stat(p)
		return err
	})
	return fi, err
}

func (s *Service) makeDirectory(ctx context.Context, id, p string, mode fs.FileMode, parents bool) error {
	if err := requirePath(p); err != nil {
		return err
	}
	if mode&^fs.ModePerm != 0 {
		return coded(codes.InvalidArgument, "mode %#o: only permission bits (0777) are allowed", uint32(mode))
	}
	if mode == 0 {
		mode = 0o755
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root) error { return r.Mkdir(p, mode, parents) })
}

func (s *Service) moveFile(ctx context.Context, id, from, to string, overwrite bool) error {
	if err := requirePath(from); err != nil {
		return err
	}
	if err := requirePath(to); err != nil {
		return err
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root) error { return r.Rename(from, to, overwrite) })
}

func (s *Service) deleteFile(ctx context.Context, id, p string, recursive bool) error {
	if err := requirePath(p); err != nil {
		return err
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root) error { return r.Remove(p, recursive) })
}

// upload writes a streamed file: next returns its chunks, then io.EOF.
func (s *Service) upload(ctx context.Context, id, p string, mode fs.FileMode, next func() ([]byte, error)) (fs.FileInfo, error) {
	if err := requirePath(p); err != nil {
		return nil, err
	}
	if mode&^fs.ModePerm != 0 {
		return nil, coded(codes.InvalidArgument, "mode %#o: only permission bits (0777) are allowed", uint32(mode))
	}
	if mode == 0 {
		mode = 0o644
	}
	var fi fs.FileInfo
	err := s.withRoot(ctx, id, func(r *fsroot.Root) error {
		w, err := r.Create(p, mode)
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
		fi, err = r.Stat(p)
		return err
	})
	return fi, err
}

// download streams a regular file to send, info first.
func (s *Service) download(ctx context.Context, id, p string, info func(fs.FileInfo) error, send func([]byte) error) error {
	if err := requirePath(p); err != nil {
		return err
	}
	return s.withRoot(ctx, id, func(r *fsroot.Root) error {
		f, fi, err := r.Open(p)
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
