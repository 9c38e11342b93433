package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// deleteSandbox stops a sandbox's processes, unmounts and removes it.
// Deleting an unknown sandbox succeeds, after removing any leftover of it;
// so does deleting another tenant's, which is left alone.
func (s *Service) deleteSandbox(ctx context.Context, id string) error {
	if err := validateSessionID(id); err != nil {
		return err
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b != nil && !s.tenancy.Sees(ctx, b.tenant) {
		return nil
	}
	if b == nil {
		if m, err := readMeta(filepath.Join(s.sandboxesDir(), id)); err == nil && !s.tenancy.Sees(ctx, m.Tenant) {
			return nil
		}
		return s.removeLeftover(ctx, id)
	}
	select {
	case <-b.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.mu.Lock()
	if s.boxes[id] != b {
		s.mu.Unlock()
		return nil // failed to create, or deleted meanwhile
	}
	if b.deleting {
		s.mu.Unlock()
		select {
		case <-b.deleted:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.deleting = true
	s.mu.Unlock()

	b.cancel() // kills every running command
	b.stopAll()
	b.users.Wait()
	var err error
	if b.img != nil {
		b.stopNetwork()
		err = s.removeContainer(ctx, b.cid, b.dir)
	}
	if err == nil {
		err = s.teardown(ctx, b.dir, b.driver)
	}
	if err == nil && b.cg != nil {
		s.retireLimits(b.cg)
		if err = b.cg.Delete(); err == nil {
			s.limitsDeleted(b.cg)
		}
	}
	s.mu.Lock()
	if err != nil {
		b.deleting = false // let a later delete retry
		s.mu.Unlock()
		return err
	}
	delete(s.boxes, id)
	close(b.deleted)
	s.mu.Unlock()
	if b.img != nil {
		s.releaseSlot(b.img.Slot, b.dir)
	}
	s.log.InfoContext(ctx, "sandbox deleted", "session_id", id)
	return nil
}

// teardown unmounts everything beneath dir and removes it. Files are removed
// only when no mount is left, so a lower layer is never touched.
func (s *Service) teardown(ctx context.Context, dir string, d overlay.Driver) error {
	mounts, err := overlay.Mounts(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		var uerr error
		if d != nil && m.Point == filepath.Join(dir, "merged") {
			uerr = d.Unmount(ctx, m.Point)
		} else {
			uerr = overlay.FUSE{}.Unmount(ctx, m.Point)
		}
		if uerr != nil {
			return uerr
		}
	}
	if left, err := overlay.Mounts(dir); err != nil {
		return err
	} else if len(left) > 0 {
		return fmt.Errorf("%s is still mounted; not removing it", left[0].Point)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sandbox: %w", err)
	}
	return nil
}

// removeLeftover kills the processes, unmounts and removes what a previous
// process left for id.
func (s *Service) removeLeftover(ctx context.Context, id string) error {
	dir := filepath.Join(s.sandboxesDir(), id)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if s.images != nil {
			// A container whose sandbox dir is gone.
			if err := s.removeContainer(ctx, id, dir); err != nil {
				return err
			}
		}
		return nil
	}
	killTagged(dir)
	m, merr := readMeta(dir)
	cid := m.containerID(id)
	if err := s.removeContainer(ctx, cid, dir); err != nil {
		return err
	}
	if err := s.removeCgroup(cid); err != nil {
		return err
	}
	if err := s.teardown(ctx, dir, nil); err != nil {
		return err
	}
	if merr == nil && m.Image != nil {
		s.releaseSlot(m.Image.Slot, dir)
	}
	return nil
}

// removeCgroup kills what runs in a leftover cgroup of id and removes it.
func (s *Service) removeCgroup(id string) error {
	if s.cgroups == nil {
		return nil
	}
	g, err := s.cgroups.Load(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	s.retireLimits(g)
	if err := g.Delete(); err != nil {
		return err
	}
	s.limitsDeleted(g)
	return nil
}

// killTagged kills processes whose command line names dir: the bwrap of
// every command run in a sandbox carries its overlay path, and killing bwrap
// ends its pid namespace.
func killTagged(dir string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	tag := []byte(dir + "/")
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), string(tag)) {
			// A fuse-overlayfs daemon serves the mount and exits when it is
			// unmounted; killing it first would only make unmounting harder.
			if comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm"); strings.TrimSpace(string(comm)) == "fuse-overlayfs" {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}
