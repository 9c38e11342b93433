package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/overlay"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/snapshot"
)

// snapshotMeta is stored beside each archive as <id>.json.
type snapshotMeta struct {
	ID        string `json:"snapshot_id"`
	SessionID string `json:"session_id"`
	// Tenant owns the snapshot: its session's tenant.
	Tenant  string    `json:"tenant,omitempty"`
	Lower   string    `json:"lower"`
	Size    int64     `json:"size_bytes"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`
}

func (m snapshotMeta) proto() *sandboxv1.Snapshot {
	return &sandboxv1.Snapshot{SnapshotId: m.ID, SessionId: m.SessionID, LowerDir: m.Lower, SizeBytes: m.Size, Sha256: m.SHA256, CreateTime: timestamppb.New(m.Created)}
}

func (s *Service) snapshotsDir() string { return filepath.Join(s.cfg.Root, "snapshots") }

func validateSnapshotID(id string) error {
	rest, ok := strings.CutPrefix(id, "snap-")
	if !ok || len(rest) != 24 || strings.Trim(rest, "0123456789abcdef") != "" {
		return invalidf("snapshot_id %q is not a snapshot id (snap- and 24 hex digits)", id)
	}
	return nil
}

// readSnapshot returns a snapshot the caller may see; another tenant's is
// reported missing exactly as one that does not exist.
func (s *Service) readSnapshot(ctx context.Context, id string) (snapshotMeta, error) {
	m, err := s.loadSnapshot(id)
	if err == nil && !s.tenancy.Sees(ctx, m.Tenant) {
		return snapshotMeta{}, errNoSnapshot(id)
	}
	return m, err
}

func errNoSnapshot(id string) error {
	return failf(errNotFound, "snapshot %q does not exist on this node", id)
}

// loadSnapshot reads a snapshot's record whoever owns it.
func (s *Service) loadSnapshot(id string) (snapshotMeta, error) {
	var m snapshotMeta
	if err := validateSnapshotID(id); err != nil {
		return m, err
	}
	data, err := os.ReadFile(filepath.Join(s.snapshotsDir(), id+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return m, errNoSnapshot(id)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return m, nil
}

// createSnapshot archives a sandbox's upper layer. Its processes are frozen
// meanwhile (when they are not already) so the archive is one moment's.
func (s *Service) createSnapshot(ctx context.Context, id string) (snapshotMeta, error) {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return snapshotMeta{}, err
	}
	defer release()
	if b.copied() {
		return snapshotMeta{}, errCopiedSnapshot(id)
	}
	if b.cg != nil {
		// Held until the archive is written: a resume meanwhile would let
		// the session change the layer under it.
		b.pmu.Lock()
		defer b.pmu.Unlock()
		if !b.frozen {
			if err := b.cg.Freeze(); err != nil {
				return snapshotMeta{}, err
			}
			defer func() { _ = b.cg.Thaw() }()
		}
	}
	if err := os.MkdirAll(s.snapshotsDir(), 0o700); err != nil {
		return snapshotMeta{}, err
	}
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	m := snapshotMeta{ID: "snap-" + hex.EncodeToString(raw[:]), SessionID: id, Tenant: b.tenant, Lower: b.lowerID(), Created: time.Now().UTC()}
	archive := filepath.Join(s.snapshotsDir(), m.ID+".tar.zst")
	tmp := archive + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return m, err
	}
	defer os.Remove(tmp) // gone after the rename; cleans up a failure
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	err = snapshot.Write(cw, b.upper(), b.layerBytes())
	if errors.Is(err, snapshot.ErrTooLarge) {
		err = failf(errNoRoom, "%v", err)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return m, fmt.Errorf("snapshot session %s: %w", id, err)
	}
	m.Size, m.SHA256 = cw.n, hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(tmp, archive); err != nil {
		return m, err
	}
	data, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(s.snapshotsDir(), m.ID+".json.tmp"), data, 0o600); err != nil {
		_ = os.Remove(archive)
		return m, err
	}
	if err := os.Rename(filepath.Join(s.snapshotsDir(), m.ID+".json.tmp"), filepath.Join(s.snapshotsDir(), m.ID+".json")); err != nil {
		_ = os.Remove(archive)
		return m, err
	}
	s.log.InfoContext(ctx, "snapshot created", "session_id", id, "snapshot_id", m.ID, "bytes", m.Size)
	return m, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (s *Service) listSnapshots(ctx context.Context, sessionID string) ([]snapshotMeta, error) {
	if sessionID != "-" {
		if err := validateSessionID(sessionID); err != nil {
			return nil, err
		}
	}
	entries, err := os.ReadDir(s.snapshotsDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []snapshotMeta
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		m, err := s.readSnapshot(ctx, id)
		if err != nil {
			continue
		}
		if sessionID == "-" || m.SessionID == sessionID {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (s *Service) deleteSnapshot(ctx context.Context, sessionID, id string) error {
	m, err := s.readSnapshot(ctx, id)
	if err != nil {
		return err
	}
	if sessionID != "-" && m.SessionID != sessionID {
		return failf(errNotFound, "session %q has no snapshot %q", sessionID, id)
	}
	if err := os.Remove(filepath.Join(s.snapshotsDir(), id+".json")); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.snapshotsDir(), id+".tar.zst")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	s.log.InfoContext(ctx, "snapshot deleted", "snapshot_id", id)
	return nil
}

// extractSnapshot checks a snapshot against a lower layer and unpacks it
// into an empty upper dir, verifying its checksum as it reads.
func (s *Service) extractSnapshot(id, lower, upper string) error {
	m, err := s.loadSnapshot(id)
	if err != nil {
		return err
	}
	if m.Lower != lower {
		return failf(errPrecondition, "snapshot %q was taken over %s, not %s", id, m.Lower, lower)
	}
	f, err := os.Open(filepath.Join(s.snapshotsDir(), id+".tar.zst"))
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if err := snapshot.Extract(io.TeeReader(f, h), upper); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", id, err)
	}
	_, _ = io.Copy(h, f) // the tail after the compressed stream's end, if any
	if got := hex.EncodeToString(h.Sum(nil)); got != m.SHA256 {
		return failf(errCorrupt, "snapshot %q is corrupt: checksum %s, recorded %s", id, got, m.SHA256)
	}
	return nil
}

// restoreSnapshot replaces a sandbox's upper layer with a snapshot's; as
// with discarding changes, the layer is unmounted while it is replaced.
func (s *Service) restoreSnapshot(ctx context.Context, sessionID, id string) error {
	// Both must be the caller's: its own session, and a snapshot of its own
	// tenant's.
	if _, err := s.readSnapshot(ctx, id); err != nil {
		return err
	}
	b, unlock, err := s.exclusive(ctx, sessionID, "restore a snapshot")
	if err != nil {
		return err
	}
	defer unlock()
	if b.copied() {
		return errCopiedSnapshot(sessionID)
	}
	if err := s.unmountRoot(ctx, b); err != nil {
		return err
	}
	fresh := b.upper() + ".restore"
	_ = os.RemoveAll(fresh)
	err = os.Mkdir(fresh, 0o755)
	if err == nil {
		err = s.extractSnapshot(id, b.lowerID(), fresh)
	}
	if err == nil && b.img != nil {
		err = shiftOwners(fresh, s.cfg.IDRangeBase, b.img.Range)
	}
	if err == nil {
		err = os.RemoveAll(b.upper())
	}
	if err == nil {
		err = os.Rename(fresh, b.upper())
	}
	if err == nil {
		// The work dir may hold state of the old layer.
		err = os.RemoveAll(b.work())
		if err == nil {
			err = os.Mkdir(b.work(), 0o755)
		}
	}
	_ = os.RemoveAll(fresh)
	if merr := s.remount(ctx, b); merr != nil {
		return errors.Join(err, merr)
	}
	if err == nil {
		s.log.InfoContext(ctx, "snapshot restored", "session_id", sessionID, "snapshot_id", id)
	}
	return err
}

func (s *Service) remount(ctx context.Context, b *box) error {
	if b.img != nil {
		return s.remountContainer(ctx, b)
	}
	if err := b.driver.Mount(ctx, overlay.Layers{Lower: b.lower, Upper: b.upper(), Work: b.work(), Merged: b.merged(), Owner: b.owner}); err != nil {
		return fmt.Errorf("remount session %s: %w", b.id, err)
	}
	return nil
}

// exclusive returns a sandbox no call is using and, but in a session on an
// image, no process runs in, held so until unlock.
func (s *Service) exclusive(ctx context.Context, id, what string) (*box, func(), error) {
	b, err := s.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if !b.layer.TryLock() {
		return nil, nil, failf(errBusy, "session %q has commands or file calls running; %s when it is idle", id, what)
	}
	s.mu.Lock()
	deleting := b.deleting
	s.mu.Unlock()
	if deleting {
		b.layer.Unlock()
		return nil, nil, failf(errNoSandbox, "session %q's sandbox is being deleted", id)
	}
	n := b.running()
	if n > 0 && !b.programsRunning() && b.hasShell() {
		// The persistent shells (and what they left running) are all that
		// runs: they do not outlive a discard or restore anyway (a session
		// on an image restarts its container), so they end now rather than
		// refuse it; the next shell call starts a fresh one.
		b.stopShell()
		n = b.settle()
	}
	if n > 0 && b.img == nil {
		b.layer.Unlock()
		return nil, nil, failf(errBusy, "session %q has %d processes running; stop them to %s", id, n, what)
	}
	// A session on an image runs in its container, which the call restarts
	// (unmountRoot, remount): what runs ends with it, and the programs
	// started in it (its desktop, autostart) start again once it is back.
	return b, func() {
		b.pmu.Lock()
		progs := b.restart
		b.restart = nil
		b.pmu.Unlock()
		b.layer.Unlock()
		s.restartPrograms(context.WithoutCancel(ctx), b, progs)
	}, nil
}

// programsRunning reports whether a program started in b (StartProcess: its
// desktop, autostart programs) is still running.
func (b *box) programsRunning() bool {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	for _, p := range b.procs {
		select {
		case <-p.p.Done():
		default:
			return true
		}
	}
	return false
}

// hasShell reports whether b has a persistent shell started.
func (b *box) hasShell() bool {
	b.shellMu.Lock()
	defer b.shellMu.Unlock()
	return b.shell != nil || b.rootShell != nil
}

// settle returns b.running() once it is 0, or what it still is after a
// second: the processes of a killed shell leave their cgroup as they are
// reaped.
func (b *box) settle() int {
	deadline := time.Now().Add(time.Second)
	for {
		n := b.running()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func errCopiedSnapshot(id string) error {
	return failf(errPrecondition, "session %q's sandbox is a plain copy (no overlay driver works on this node): it has no layer to snapshot or restore", id)
}
