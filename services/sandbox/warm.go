package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// Warm desktops: a node may keep sessions of popular images fully started
// (container, X server, window manager and panel drawn) under ids of their
// own, for no tenant and used by nobody. A CreateSandbox whose caller will
// start a desktop names the display it wants (CreateSandboxRequest.desktop);
// when a warm desktop fits the request, it is given to the new session
// (Rekey here and in the display service) and the answer's desktop_started
// tells the caller the display and the desktop are already there.

// DisplaySpec is the display a warm desktop has or a create asks for.
type DisplaySpec struct{ Width, Height, Depth, DPI int }

func (d DisplaySpec) String() string {
	return fmt.Sprintf("%dx%dx%d@%d", d.Width, d.Height, d.Depth, d.DPI)
}

// displaySpecOf is the display a CreateSandbox asks a desktop on.
func displaySpecOf(d *sandboxv1.DesktopSpec) DisplaySpec {
	return DisplaySpec{Width: int(d.GetWidth()), Height: int(d.GetHeight()), Depth: int(d.GetDepth()), DPI: int(d.GetDpi())}
}

// WarmDesktops hands out desktops started ahead of demand.
type WarmDesktops interface {
	// Claim gives sessionID, for tenant, a started desktop that fits req
	// and display; false when there is none and the caller starts one.
	Claim(ctx context.Context, sessionID, tenant string, req *sandboxv1.CreateSandboxRequest, display DisplaySpec) bool
}

// SetWarmDesktops makes CreateSandbox ask w for a started desktop first.
func (s *Service) SetWarmDesktops(w WarmDesktops) {
	s.mu.Lock()
	s.warm = w
	s.mu.Unlock()
}

// claimWarm answers req with a warm desktop when its caller asked for one
// and one fits; nil otherwise.
func (s *Service) claimWarm(ctx context.Context, req *sandboxv1.CreateSandboxRequest) *box {
	s.mu.Lock()
	w := s.warm
	s.mu.Unlock()
	if w == nil || req.GetImage() == "" || req.GetWorkspace() != "" || req.GetSnapshotId() != "" {
		return nil
	}
	if req.GetDesktop() == nil {
		return nil
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil
	}
	if !w.Claim(ctx, req.GetSessionId(), tenant, req, displaySpecOf(req.GetDesktop())) {
		return nil
	}
	b, err := s.lookup(ctx, req.GetSessionId())
	if err != nil {
		return nil
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs("deskgrid-metric-warm", "true"))
	return b
}

// CreateWarm makes sandbox id from image ref for no tenant, with the node's
// default limits and no network, ahead of the session it will be given to.
func (s *Service) CreateWarm(ctx context.Context, id, ref string) error {
	im, err := s.sandboxImage(ctx, id, ref)
	if err != nil {
		return err
	}
	if im == nil {
		return invalidf("a warm desktop needs an image")
	}
	b, err := s.create(ctx, id, "", Limits{}, "", false, im)
	if err != nil {
		_ = s.images.Unpin(id)
		return err
	}
	s.mu.Lock()
	b.warm = true
	s.mu.Unlock()
	return nil
}

// StartProgram starts argv in sandbox id, as StartProcess does.
func (s *Service) StartProgram(ctx context.Context, id string, argv []string) error {
	_, err := s.startProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: id, Argv: argv})
	return err
}

// DeleteWarm removes sandbox id (a warm desktop's).
func (s *Service) DeleteWarm(ctx context.Context, id string) error {
	if err := s.deleteSandbox(ctx, id); err != nil {
		return err
	}
	if s.images != nil {
		_ = s.images.Unpin(id)
	}
	return nil
}

// WarmFits reports whether sandbox id, made by CreateWarm, is what req of
// tenant would have made: the same image (as the tenant resolves it now),
// limits and network.
func (s *Service) WarmFits(ctx context.Context, id, tenant string, req *sandboxv1.CreateSandboxRequest) bool {
	if s.images == nil || req.GetWorkspace() != "" || req.GetSnapshotId() != "" || req.GetImage() == "" {
		return false
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil || b.img == nil {
		return false
	}
	select {
	case <-b.ready:
	default:
		return false
	}
	if !b.ok || b.network != req.GetNetwork() {
		return false
	}
	limits, err := s.limitsFor(Limits{MemoryBytes: req.GetMemoryBytes(), CPUMillis: req.GetCpuMillis(), Pids: req.GetPids(), DiskBytes: req.GetDiskBytes()})
	if err != nil || limits != b.limits {
		return false
	}
	im, err := s.images.Resolve(ctx, tenant, req.GetImage())
	return err == nil && im.Digest == b.imageDigest
}

// Rekey gives sandbox from, made by CreateWarm and never used, to session
// to, owned by tenant: its directory moves to the session's, its image is
// pinned for the session; its container and cgroup keep their names.
func (s *Service) Rekey(ctx context.Context, from, to, tenant string) error {
	if err := validateSessionID(to); err != nil {
		return err
	}
	s.mu.Lock()
	b := s.boxes[from]
	switch {
	case s.closed:
		s.mu.Unlock()
		return failf(errClosed, "sandbox service is shutting down")
	case b == nil || b.img == nil:
		s.mu.Unlock()
		return fmt.Errorf("no warm sandbox %q", from)
	case s.boxes[to] != nil:
		s.mu.Unlock()
		return failf(errExists, "session %q already has a sandbox on this node", to)
	case b.deleting:
		s.mu.Unlock()
		return fmt.Errorf("warm sandbox %q is being deleted", from)
	}
	select {
	case <-b.ready:
	default:
		s.mu.Unlock()
		return fmt.Errorf("warm sandbox %q is still being made", from)
	}
	// Both names lead to it while it moves; calls for the session wait on
	// layer, held for writing.
	s.boxes[to] = b
	b.deleting = true // no delete of the old name meanwhile
	s.mu.Unlock()
	b.layer.Lock()
	err := s.move(b, to, tenant)
	b.layer.Unlock()
	s.mu.Lock()
	b.deleting = false
	if err != nil {
		delete(s.boxes, to)
		s.mu.Unlock()
		return err
	}
	b.warm = false
	delete(s.boxes, from)
	s.mu.Unlock()
	if err := s.images.Pin(to, b.imageDigest); err != nil {
		s.log.WarnContext(ctx, "pin the image of a warm sandbox", "session_id", to, "error", err)
	} else {
		_ = s.images.Unpin(from)
	}
	s.log.InfoContext(ctx, "warm sandbox given to its session", "session_id", to, "container", b.cid)
	return nil
}

// move renames b's directory for session to. The new directory is made
// first (the claim on the id, and what keeps b's id slot owned while the
// rename replaces it).
func (s *Service) move(b *box, to, tenant string) error {
	dir := filepath.Join(s.sandboxesDir(), to)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return failf(errExists, "session %q has a sandbox left over from a previous run on this node", to)
		}
		return fmt.Errorf("warm sandbox: %w", err)
	}
	slotOwner := filepath.Join(s.cfg.IDSlotDir, strconv.Itoa(b.img.Slot), "owner")
	if err := os.WriteFile(slotOwner, []byte(dir), 0o600); err != nil {
		_ = os.Remove(dir)
		return fmt.Errorf("warm sandbox: %w", err)
	}
	// rename(2) itself: os.Rename refuses to replace a directory.
	if err := unix.Rename(b.dir, dir); err != nil {
		_ = os.WriteFile(slotOwner, []byte(b.dir), 0o600)
		_ = os.Remove(dir)
		return fmt.Errorf("warm sandbox: move it to its session: %w", err)
	}
	b.id, b.tenant, b.dir = to, tenant, dir
	b.lower = b.lowerView()
	b.created = time.Now().UTC()
	return writeMeta(b.dir, b.meta())
}
