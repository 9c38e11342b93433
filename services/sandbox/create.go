package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
)

// lowerFor picks and checks the lower layer of a new sandbox.
func (s *Service) lowerFor(workspace string) (string, *overlay.Owner, error) {
	if workspace == "" {
		return s.cfg.BaseDir, nil, nil
	}
	lower, err := s.workspaceLower(workspace)
	if err != nil {
		return "", nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(lower, &st); err != nil {
		return "", nil, fmt.Errorf("stat workspace: %w", err)
	}
	if st.Uid == 0 && st.Gid == 0 {
		return lower, nil, nil
	}
	return lower, &overlay.Owner{UID: int(st.Uid), GID: int(st.Gid)}, nil
}

func (s *Service) workspaceLower(workspace string) (string, error) {
	if !filepath.IsAbs(workspace) {
		return "", invalidf("workspace %q must be an absolute path", workspace)
	}
	real, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", invalidf("workspace %q does not exist", workspace)
		}
		return "", invalidf("workspace %q cannot be resolved: %v", workspace, err)
	}
	inside := false
	for _, r := range s.cfg.WorkspaceRoots {
		if real == r || strings.HasPrefix(real, r+"/") {
			inside = true
			break
		}
	}
	if !inside {
		if len(s.cfg.WorkspaceRoots) == 0 {
			return "", failf(errRefused, "workspace %q refused: this node accepts no workspaces (no workspace roots configured)", workspace)
		}
		return "", failf(errRefused, "workspace %q (resolved to %q) is not beneath an allowed workspace root (%s)", workspace, real, strings.Join(s.cfg.WorkspaceRoots, ", "))
	}
	st, err := os.Stat(real)
	if err != nil || !st.IsDir() {
		return "", invalidf("workspace %q is not a directory", workspace)
	}
	if err := overlay.CheckPath(real); err != nil {
		return "", invalidf("workspace %q: %v", workspace, err)
	}
	return real, nil
}

// createSandbox mounts a new sandbox with the default limits.
func (s *Service) createSandbox(ctx context.Context, id, workspace string) (*box, error) {
	return s.create(ctx, id, workspace, Limits{}, "", false, nil)
}

// create mounts a new sandbox and makes its cgroup. On any failure nothing
// of it remains.
func (s *Service) create(ctx context.Context, id, workspace string, req Limits, snapshotID string, network bool, im *image.Image) (*box, error) {
	if err := validateSessionID(id); err != nil {
		return nil, err
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	if im != nil && workspace != "" {
		return nil, invalidf("a sandbox runs either an image or a workspace, not both")
	}
	if snapshotID != "" {
		// Only a snapshot of the caller's own tenant may seed its sandbox.
		if _, err := s.readSnapshot(ctx, snapshotID); err != nil {
			return nil, err
		}
	}
	limits, err := s.limitsFor(req)
	if err != nil {
		return nil, err
	}
	lower, owner, err := s.lowerFor(workspace)
	if err != nil {
		return nil, err
	}
	kill, cancel := context.WithCancel(context.Background())
	b := &box{
		id:           id,
		cid:          id,
		tenant:       tenant,
		dir:          filepath.Join(s.sandboxesDir(), id),
		lower:        lower,
		owner:        owner,
		limits:       limits,
		procs:        map[string]*proc{},
		created:      time.Now().UTC(),
		ready:        make(chan struct{}),
		deleted:      make(chan struct{}),
		kill:         kill,
		cancel:       cancel,
		fromSnapshot: snapshotID,
		network:      network,
	}
	if im != nil {
		b.image, b.imageDigest = im.Ref, im.Digest
		b.img = &boxImage{Ref: im.Ref, Digest: im.Digest, Layers: im.Layers, Config: im.Config, Slot: -1}
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		cancel()
		return nil, failf(errClosed, "sandbox service is shutting down")
	case s.boxes[id] != nil:
		s.mu.Unlock()
		cancel()
		return nil, failf(errExists, "session %q already has a sandbox on this node", id)
	}
	s.boxes[id] = b
	s.mu.Unlock()

	err = s.build(ctx, b)
	s.mu.Lock()
	if err != nil {
		delete(s.boxes, id)
		cancel()
	}
	b.ok = err == nil
	close(b.ready)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "sandbox created", "session_id", id, "lower", lower, "driver", b.driver.Name(), "network", network)
	return b, nil
}

func (s *Service) build(ctx context.Context, b *box) (err error) {
	// Mkdir, not MkdirAll: it is the claim on the id across processes too.
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return failf(errExists, "session %q has a sandbox left over from a previous run on this node; delete it or reconcile first", b.id)
		}
		return fmt.Errorf("create sandbox dir: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if b.img != nil {
			if cerr := s.removeContainer(context.WithoutCancel(ctx), b.cid, b.dir); cerr != nil {
				s.log.ErrorContext(ctx, "remove container after failed create", "session_id", b.id, "error", cerr)
			}
		}
		if b.cg != nil {
			s.retireLimits(b.cg)
			if cerr := b.cg.Delete(); cerr != nil {
				s.log.ErrorContext(ctx, "remove cgroup after failed create", "session_id", b.id, "error", cerr)
			} else {
				s.limitsDeleted(b.cg)
			}
		}
		if b.img != nil && b.img.Slot >= 0 {
			defer s.releaseSlot(b.img.Slot, b.dir)
		}
		// Whatever got mounted is unmounted first; files are removed only
		// when no mount is left.
		if terr := s.teardown(context.WithoutCancel(ctx), b.dir, b.driver); terr != nil {
			s.log.ErrorContext(ctx, "clean up after failed create", "session_id", b.id, "error", terr)
		}
	}()
	if b.limits.DiskBytes > 0 {
		dd := filepath.Join(b.dir, "disk")
		if err := os.Mkdir(dd, 0o755); err != nil {
			return fmt.Errorf("create sandbox dir: %w", err)
		}
		if err := s.disk.Create(ctx, dd, filepath.Join(b.dir, "disk.img"), b.limits.DiskBytes); err != nil {
			return fmt.Errorf("sandbox %s disk: %w", b.id, err)
		}
		b.disk = s.disk.Kind
	}
	if b.img != nil {
		return s.buildContainer(ctx, b)
	}
	layers := overlay.Layers{
		Lower:  b.lower,
		Upper:  b.upper(),
		Work:   b.work(),
		Merged: b.merged(),
	}
	layers.Owner = b.owner
	for _, d := range []string{layers.Upper, layers.Work, layers.Merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("create sandbox dir: %w", err)
		}
	}
	if b.fromSnapshot != "" {
		if err := s.extractSnapshot(b.fromSnapshot, b.lowerID(), layers.Upper); err != nil {
			return err
		}
	}
	if b.owner != nil {
		// The upper root is the merged root: it must belong to the owner too.
		if err := os.Chown(layers.Upper, b.owner.UID, b.owner.GID); err != nil {
			return fmt.Errorf("create sandbox dir: %w", err)
		}
	}
	d, err := s.drivers.Mount(ctx, layers)
	if err != nil {
		switch {
		case errors.Is(err, overlay.ErrUnsafePath):
			return invalidf("%v", err)
		case errors.Is(err, overlay.ErrRefused):
			return failf(errPrecondition, "no overlay driver on this node can mount session %q's sandbox: %v", b.id, err)
		}
		return fmt.Errorf("mount sandbox %s: %w", b.id, err)
	}
	b.driver = d
	if d.Name() != s.drivers[0].Name() {
		s.log.WarnContext(ctx, "sandbox made with a fallback driver", "session_id", b.id, "driver", d.Name(), "preferred", s.drivers[0].Name())
	}
	if b.copied() {
		// A copy has no upper layer to seed or to hold in a bounded store.
		switch {
		case b.fromSnapshot != "":
			return failf(errPrecondition, "this node can only copy sandboxes (no overlay driver works here), and a copied sandbox cannot start from a snapshot")
		case b.disk != "":
			return failf(errPrecondition, "this node can only copy sandboxes (no overlay driver works here), and a copied sandbox cannot have a disk limit")
		}
	}
	if s.cgroups != nil {
		cg, err := s.cgroups.Create(b.id, b.limits.cgroup())
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", b.id, err)
		}
		b.cg = cg
	}
	return writeMeta(b.dir, meta{SessionID: b.id, Tenant: b.tenant, Lower: b.lower, Owner: b.owner, Driver: d.Name(), Created: b.created, Limits: b.limits, Disk: b.disk, Network: b.network})
}

// buildContainer makes the rest of a sandbox that runs its image: a host
// id range, the root filesystem, the cgroup and the container.
func (s *Service) buildContainer(ctx context.Context, b *box) error {
	// Made on first use: a node that never runs an image keeps /run clean.
	if err := s.prepareContainers(); err != nil {
		return err
	}
	slot, r, err := s.claimSlot(b.dir)
	if err != nil {
		return err
	}
	b.img.Slot, b.img.Range = slot, r
	for _, d := range []string{b.upper(), b.work(), b.merged()} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("create sandbox dir: %w", err)
		}
	}
	if err := s.mountImage(b); err != nil {
		return err
	}
	b.driver = overlay.Kernel{}
	if s.cgroups != nil {
		cg, err := s.cgroups.Create(b.cid, b.limits.cgroup())
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", b.id, err)
		}
		b.cg = cg
	}
	// Recorded before the container starts: a crash from here on leaves
	// what reconcile needs to find the container, its range and its mounts.
	if err := writeMeta(b.dir, b.meta()); err != nil {
		return err
	}
	return s.startContainer(ctx, b)
}
