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

	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/disk"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// errNoMeta means a sandbox dir has no usable meta.json: a create crashed
// before finishing it.
var errNoMeta = errors.New("sandbox has no valid meta.json")

// Reconcile finds what a previous (crashed) process left under Root:
// sandbox dirs and overlay mounts. A leftover keep accepts is adopted
// (mounted again if needed) so that the calls for its session work again;
// every other one has its processes killed, is unmounted and removed, and is
// reported in removed. A nil keep removes every leftover. Sandboxes this
// Service already holds are left alone.
func (s *Service) Reconcile(ctx context.Context, keep func(sessionID string) bool) (removed []string, err error) {
	ids := map[string]bool{}
	entries, err := os.ReadDir(s.sandboxesDir())
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	for _, e := range entries {
		ids[e.Name()] = true
	}
	mounts, err := overlay.Mounts(s.sandboxesDir())
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	prefix := s.sandboxesDir() + "/"
	for _, m := range mounts {
		if rest, ok := strings.CutPrefix(m.Point, prefix); ok {
			id, _, _ := strings.Cut(rest, "/")
			ids[id] = true
		}
	}
	if s.images != nil {
		list, err := s.runtime().List(ctx)
		if err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
		for _, c := range list {
			ids[c.ID] = true
		}
		dirs, err := s.runtime().StateDirs()
		if err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
		for _, id := range dirs {
			ids[id] = true
		}
	}
	if s.cgroups != nil {
		groups, err := s.cgroups.List()
		if err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
		for _, id := range groups {
			ids[id] = true
		}
	}
	// A sandbox given to its session after it was made has a container
	// and cgroup of another name: they go, or stay, with its directory.
	alias := map[string]bool{}
	for _, e := range entries {
		if m, err := readMeta(filepath.Join(s.sandboxesDir(), e.Name())); err == nil && m.Container != "" && m.Container != e.Name() {
			alias[m.Container] = true
		}
	}
	var errs []error
	for id := range ids {
		if alias[id] {
			continue
		}
		s.mu.Lock()
		held := s.boxes[id] != nil
		for _, b := range s.boxes {
			// A sandbox given to its session after it was made keeps the
			// names of its container and cgroup.
			held = held || b.cid == id
		}
		s.mu.Unlock()
		if held {
			continue
		}
		if validateSessionID(id) == nil && keep != nil && keep(id) {
			aerr := s.adopt(ctx, id)
			if aerr == nil {
				continue
			}
			if !errors.Is(aerr, errNoMeta) {
				errs = append(errs, fmt.Errorf("adopt %s: %w", id, aerr))
				continue
			}
			// Half-made by a create that crashed: nothing to keep.
			s.log.WarnContext(ctx, "removing half-made sandbox", "session_id", id, "error", aerr)
		}
		rerr := s.removeLeftover(ctx, id)
		if rerr == nil {
			rerr = s.removeCgroup(id) // a group whose sandbox dir is gone
		}
		if rerr != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", id, rerr))
			continue
		}
		if s.images != nil {
			_ = s.images.Unpin(id) // its image may go now
		}
		removed = append(removed, id)
		s.log.InfoContext(ctx, "removed leftover sandbox", "session_id", id)
	}
	return removed, errors.Join(errs...)
}

// adopt takes over a sandbox a previous process made, mounting it again if
// it is no longer mounted (after a reboot, say).
func (s *Service) adopt(ctx context.Context, id string) error {
	dir := filepath.Join(s.sandboxesDir(), id)
	m, err := readMeta(dir)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoMeta, err)
	}
	if m.SessionID != id {
		return fmt.Errorf("%w: meta.json names session %q", errNoMeta, m.SessionID)
	}
	if m.Image != nil {
		return s.adoptContainer(ctx, id, dir, m)
	}
	var driver overlay.Driver = overlay.FUSE{Binary: s.cfg.FuseOverlayfsPath}
	if m.Driver == (overlay.Kernel{}).Name() {
		driver = overlay.Kernel{}
	}
	for _, d := range s.drivers {
		if d.Name() == m.Driver {
			driver = d
		}
	}
	merged := filepath.Join(dir, "merged")
	mounted, err := overlay.IsMounted(merged)
	if err != nil {
		return err
	}
	lb := &box{dir: dir, disk: m.Disk}
	if !mounted && m.Disk != "" {
		if ok, err := overlay.IsMounted(lb.layerDir()); err != nil {
			return err
		} else if !ok {
			if err := (disk.Backing{Kind: m.Disk, Mkfs: s.disk.Mkfs, Mount: s.disk.Mount}).Remount(ctx, lb.layerDir(), filepath.Join(dir, "disk.img")); err != nil {
				return err
			}
		}
	}
	switch {
	case m.Driver == overlay.CopyName:
		// Completes a copy a crash interrupted; keeps a complete one.
		driver = overlay.Copy{}
		if err := driver.Mount(ctx, overlay.Layers{Lower: m.Lower, Upper: lb.upper(), Work: lb.work(), Merged: merged, Owner: m.Owner}); err != nil {
			return err
		}
	case !mounted:
		d, err := s.drivers.Mount(ctx, overlay.Layers{Lower: m.Lower, Upper: lb.upper(), Work: lb.work(), Merged: merged, Owner: m.Owner})
		if err != nil {
			return err
		}
		driver = d
	}
	var cg *cgroup.Group
	if s.cgroups != nil {
		// Its processes keep running in the group they were in; a sandbox
		// without one (made by a node without cgroups) gets a fresh one.
		if cg, err = s.cgroups.Load(id); errors.Is(err, fs.ErrNotExist) {
			cg, err = s.cgroups.Create(id, m.Limits.cgroup())
		}
		if err != nil {
			return err
		}
	}
	kill, cancel := context.WithCancel(context.Background())
	b := &box{id: id, cid: id, tenant: m.Tenant, dir: dir, lower: m.Lower, owner: m.Owner, driver: driver, created: m.Created,
		limits: m.Limits, cg: cg, disk: m.Disk, network: m.Network, procs: map[string]*proc{}, frozen: cg != nil && cg.Frozen(),
		ready: make(chan struct{}), ok: true, deleted: make(chan struct{}), kill: kill, cancel: cancel}
	if !s.keepAdopted(id, b, cancel) {
		return nil
	}
	s.log.InfoContext(ctx, "adopted sandbox", "session_id", id, "driver", driver.Name())
	return nil
}

// keepAdopted marks the adopted box b ready and keeps it as id's, unless a
// box of that id is already kept, when it releases b (cancel) and reports
// false.
func (s *Service) keepAdopted(id string, b *box, cancel context.CancelFunc) bool {
	close(b.ready)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[id] != nil {
		cancel()
		return false
	}
	s.boxes[id] = b
	return true
}

// adoptContainer takes over a container sandbox a previous process made:
// its mounts and container are made again when gone (after a reboot), a
// running container is kept with its processes.
func (s *Service) adoptContainer(ctx context.Context, id, dir string, m meta) error {
	if s.images == nil {
		return fmt.Errorf("sandbox %s runs an image, and this node keeps none", id)
	}
	if err := s.prepareContainers(); err != nil {
		return err
	}
	kill, cancel := context.WithCancel(context.Background())
	cid := m.containerID(id)
	b := &box{id: id, cid: cid, tenant: m.Tenant, dir: dir, lower: m.Lower, driver: overlay.Kernel{}, created: m.Created,
		limits: m.Limits, disk: m.Disk, network: m.Network, procs: map[string]*proc{}, img: m.Image,
		image: m.Image.Ref, imageDigest: m.Image.Digest,
		ready: make(chan struct{}), ok: true, deleted: make(chan struct{}), kill: kill, cancel: cancel}
	fail := func(err error) error { cancel(); return err }
	// The slot stays this sandbox's: claim it again if a reboot cleared /run.
	p := filepath.Join(s.cfg.IDSlotDir, strconv.Itoa(m.Image.Slot))
	if err := os.Mkdir(p, 0o700); err == nil {
		_ = os.WriteFile(filepath.Join(p, "owner"), []byte(dir), 0o600)
	}
	st, serr := s.runtime().State(ctx, cid)
	// A paused container is a suspended session's: it keeps its processes.
	running := serr == nil && (st.Status == "running" || st.Status == "paused")
	if m.Disk != "" {
		if ok, err := overlay.IsMounted(b.layerDir()); err != nil {
			return fail(err)
		} else if !ok {
			if err := (disk.Backing{Kind: m.Disk, Mkfs: s.disk.Mkfs, Mount: s.disk.Mount}).Remount(ctx, b.layerDir(), filepath.Join(dir, "disk.img")); err != nil {
				return fail(err)
			}
		}
	}
	if mounted, err := overlay.IsMounted(b.merged()); err != nil {
		return fail(err)
	} else if !mounted {
		if running {
			_ = s.runtime().Delete(ctx, cid)
			running = false
		}
		if err := s.mountImage(b); err != nil {
			return fail(err)
		}
	}
	if s.cgroups != nil {
		cg, err := s.cgroups.Load(cid)
		if errors.Is(err, fs.ErrNotExist) {
			cg, err = s.cgroups.Create(cid, m.Limits.cgroup())
		}
		if err != nil {
			return fail(err)
		}
		if !running {
			// What is left in the group is a dead container's (runc's init,
			// frozen when runc was killed while it froze the group to kill
			// it), and runc refuses to start in a frozen group: the new
			// container gets the group made anew.
			if err := cg.Delete(); err != nil {
				return fail(err)
			}
			if cg, err = s.cgroups.Create(cid, m.Limits.cgroup()); err != nil {
				return fail(err)
			}
		}
		b.cg = cg
		b.frozen = cg.Frozen()
	}
	if !running {
		_ = s.runtime().Delete(ctx, cid)
		_ = container.Cleanup(s.bundle(cid))
		_ = cleanupX11(s.bundle(cid) + ".x11")
		if err := s.startContainer(ctx, b); err != nil {
			return fail(err)
		}
	} else if b.network {
		// slirp4netns died with the previous process.
		if err := s.attachNetwork(ctx, b); err != nil {
			return fail(err)
		}
	}
	if !s.keepAdopted(id, b, cancel) {
		return nil
	}
	s.log.InfoContext(ctx, "adopted container sandbox", "session_id", id, "restarted", !running)
	return nil
}
