package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/deskgrid/deskgrid/services/sandbox/cgroup"
	"github.com/deskgrid/deskgrid/services/sandbox/container"
	"github.com/deskgrid/deskgrid/services/sandbox/disk"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/jail"
	"github.com/deskgrid/deskgrid/services/sandbox/overlay"
)

// box is one session's sandbox.
type box struct {
	id string
	// cid names the sandbox's container, bundle and cgroup: its id, unless
	// it was made ahead of its session and given to it later (Rekey).
	cid string
	// warm: made ahead of its session (CreateWarm) and not given to one
	// yet; no list shows it. Guarded by the Service's mu.
	warm bool
	// tenant owns the sandbox; "" when it was created for no tenant.
	tenant  string
	dir     string
	lower   string
	owner   *overlay.Owner // set for a workspace of an ordinary host user
	driver  overlay.Driver
	created time.Time
	limits  Limits
	cg      *cgroup.Group // nil on a node without cgroups
	// disk is the backing of a size-limited layer ("ext4", "tmpfs"), or empty.
	disk string
	// fromSnapshot is the snapshot the layer was created from, if any.
	fromSnapshot string
	// network gives its commands outbound network.
	network bool
	// image is the image it runs, as asked, and that image's digest (pinned
	// in the node's image store for the box's life); empty for none.
	image, imageDigest string
	// img is set for a sandbox that runs its image as a container.
	img *boxImage
	// xmu serialises placing the display in the container.
	xmu sync.Mutex
	// slirp serves a container sandbox's network, when it has one.
	slirp *jail.Slirp

	// layer is held for reading by every call using the mounted layer, and
	// for writing while DiscardChanges remounts it.
	layer sync.RWMutex
	// applied records, per path, the lower's ctime after ApplyChanges wrote
	// it, so that the sandbox's own apply is not taken for a conflict.
	applied map[string]int64

	// shellMu serialises the persistent shell's calls.
	shellMu sync.Mutex
	shell   *shell
	// rootShell is the persistent shell as root of the session's own user
	// namespace (RunShell as_root).
	rootShell *shell

	// pmu guards the started programs and the frozen flag.
	pmu      sync.Mutex
	procs    map[string]*proc
	nextProc int
	frozen   bool

	// ready is closed when creation has finished, well or not.
	ready chan struct{}
	ok    bool // set before ready closes

	// kill is cancelled when the sandbox is deleted: it stops every command.
	kill   context.Context
	cancel context.CancelFunc
	// users counts calls working inside the sandbox; deletion waits for them.
	users    sync.WaitGroup
	deleting bool
	deleted  chan struct{}
}

func (b *box) merged() string { return filepath.Join(b.dir, "merged") }

// meta is what a sandbox records about itself on disk, so that a restarted
// node can recognise and adopt or remove it.
type meta struct {
	SessionID string         `json:"session_id"`
	Tenant    string         `json:"tenant,omitempty"`
	Lower     string         `json:"lower"`
	Owner     *overlay.Owner `json:"owner,omitempty"`
	Driver    string         `json:"driver"`
	Created   time.Time      `json:"created"`
	Limits    Limits         `json:"limits"`
	Disk      string         `json:"disk,omitempty"`
	Network   bool           `json:"network,omitempty"`
	// Image is set for a sandbox run as a container of its image.
	Image *boxImage `json:"image,omitempty"`
	// Container names the container and cgroup when not SessionID: the
	// sandbox was made ahead of its session (a warm desktop).
	Container string `json:"container,omitempty"`
}

// containerID is what names m's container and cgroup.
func (m meta) containerID(id string) string {
	if m.Container != "" {
		return m.Container
	}
	return id
}

const maxSessionID = 64

// errNoMeta means a sandbox dir has no usable meta.json: a create crashed
// before finishing it.
var errNoMeta = errors.New("sandbox has no valid meta.json")

func validateSessionID(id string) error {
	if id == "" {
		return coded(codes.InvalidArgument, "session_id is required")
	}
	if len(id) > maxSessionID {
		return coded(codes.InvalidArgument, "session_id is %d characters; at most %d are allowed", len(id), maxSessionID)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return coded(codes.InvalidArgument, "session_id %q may contain only a-z, 0-9 and '-'", id)
		}
	}
	return nil
}

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
		return "", coded(codes.InvalidArgument, "workspace %q must be an absolute path", workspace)
	}
	real, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", coded(codes.InvalidArgument, "workspace %q does not exist", workspace)
		}
		return "", coded(codes.InvalidArgument, "workspace %q cannot be resolved: %v", workspace, err)
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
			return "", coded(codes.PermissionDenied, "workspace %q refused: this node accepts no workspaces (no workspace roots configured)", workspace)
		}
		return "", coded(codes.PermissionDenied, "workspace %q (resolved to %q) is not beneath an allowed workspace root (%s)", workspace, real, strings.Join(s.cfg.WorkspaceRoots, ", "))
	}
	st, err := os.Stat(real)
	if err != nil || !st.IsDir() {
		return "", coded(codes.InvalidArgument, "workspace %q is not a directory", workspace)
	}
	if err := overlay.CheckPath(real); err != nil {
		return "", coded(codes.InvalidArgument, "workspace %q: %v", workspace, err)
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
		return nil, coded(codes.InvalidArgument, "a sandbox runs either an image or a workspace, not both")
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
		return nil, coded(codes.Unavailable, "sandbox service is shutting down")
	case s.boxes[id] != nil:
		s.mu.Unlock()
		cancel()
		return nil, coded(codes.AlreadyExists, "session %q already has a sandbox on this node", id)
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
			return coded(codes.AlreadyExists, "session %q has a sandbox left over from a previous run on this node; delete it or reconcile first", b.id)
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
			return coded(codes.InvalidArgument, "%v", err)
		case errors.Is(err, overlay.ErrRefused):
			return coded(codes.FailedPrecondition, "no overlay driver on this node can mount session %q's sandbox: %v", b.id, err)
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
			return coded(codes.FailedPrecondition, "this node can only copy sandboxes (no overlay driver works here), and a copied sandbox cannot start from a snapshot")
		case b.disk != "":
			return coded(codes.FailedPrecondition, "this node can only copy sandboxes (no overlay driver works here), and a copied sandbox cannot have a disk limit")
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

func writeMeta(dir string, m meta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "meta.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write sandbox meta: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "meta.json")); err != nil {
		return fmt.Errorf("write sandbox meta: %w", err)
	}
	return nil
}

func readMeta(dir string) (meta, error) {
	var m meta
	data, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("parse %s: %w", filepath.Join(dir, "meta.json"), err)
	}
	return m, nil
}

// lookup returns a ready sandbox. It is the one place a session's sandbox
// is found for a caller: another tenant's is reported missing exactly as
// an unknown one, so the answer tells nothing of whether it exists.
func (s *Service) lookup(ctx context.Context, id string) (*box, error) {
	if err := validateSessionID(id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil || !s.tenancy.Sees(ctx, b.tenant) {
		return nil, coded(codes.NotFound, "session %q has no sandbox on this node", id)
	}
	<-b.ready // creation is bounded by its own mount call
	if !b.ok {
		return nil, coded(codes.NotFound, "session %q has no sandbox on this node", id)
	}
	return b, nil
}

// acquire returns a ready sandbox that will not be unmounted before release
// is called.
func (s *Service) acquire(ctx context.Context, id string) (*box, func(), error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if b.deleting || s.boxes[id] != b {
		s.mu.Unlock()
		return nil, nil, coded(codes.NotFound, "session %q's sandbox is being deleted", id)
	}
	b.users.Add(1)
	s.mu.Unlock()
	// Waits out a DiscardChanges or RestoreSnapshot remounting the layer.
	b.layer.RLock()
	return b, func() { b.layer.RUnlock(); b.users.Done() }, nil
}

// list returns the ready sandboxes the caller may see.
func (s *Service) list(ctx context.Context) []*box {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		if !s.tenancy.Sees(ctx, b.tenant) {
			continue
		}
		select {
		case <-b.ready:
			if b.ok && !b.deleting && !b.warm {
				out = append(out, b)
			}
		default:
		}
	}
	return out
}

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

func (b *box) meta() meta {
	m := meta{SessionID: b.id, Tenant: b.tenant, Lower: b.lower, Owner: b.owner, Created: b.created, Limits: b.limits, Disk: b.disk, Network: b.network, Image: b.img}
	if b.cid != b.id {
		m.Container = b.cid
	}
	if b.driver != nil {
		m.Driver = b.driver.Name()
	}
	return m
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
	close(b.ready)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[id] != nil {
		cancel()
		return nil
	}
	s.boxes[id] = b
	s.log.InfoContext(ctx, "adopted sandbox", "session_id", id, "driver", driver.Name())
	return nil
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
	close(b.ready)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes[id] != nil {
		cancel()
		return nil
	}
	s.boxes[id] = b
	s.log.InfoContext(ctx, "adopted container sandbox", "session_id", id, "restarted", !running)
	return nil
}
