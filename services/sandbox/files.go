package sandbox

import (
	"fmt"
	"io/fs"

	"google.golang.org/grpc/codes"

	"github.com/deskgrid/deskgrid/services/sandbox/fsroot"
)

func (s *Service) root(b *box) (*fsroot.Root, error) {
	r, err := fsroot.New(b.merged())
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", b.id, err)
	}
	return r, nil
}

func (s *Service) readFile(id, path string) ([]byte, fs.FileMode, error) {
	if _, err := fsroot.Clean(path); err != nil {
		return nil, 0, err
	}
	if path == "" {
		return nil, 0, coded(codes.InvalidArgument, "path is required")
	}
	b, release, err := s.acquire(id)
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

func (s *Service) writeFile(id, path string, data []byte, mode fs.FileMode) error {
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
	b, release, err := s.acquire(id)
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

func (s *Service) listFiles(id, path string) ([]fs.FileInfo, error) {
	if _, err := fsroot.Clean(path); err != nil {
		return nil, err
	}
	b, release, err := s.acquire(id)
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
