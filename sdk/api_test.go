package deskgrid_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

// eventually polls check until it is true, failing after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !check(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
	}
}

// The calls beyond sessions, screenshots and exec, through the SDK against
// a real deskgrid: nodes, processes, input leases, the display, changes
// against a workspace, snapshots, the shell, files and history.
func TestAPIs(t *testing.T) {
	roots := t.TempDir()
	srv := deskgridtest.Start(t, "-workspace-roots", roots)
	c, err := deskgrid.New(srv.GRPCAddr, deskgrid.WithAPIKey(srv.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	t.Run("nodes", func(t *testing.T) {
		// deskgrid up is one node, shown and drained like a cluster's.
		nodes, err := c.Nodes.List(ctx)
		if err != nil || len(nodes) != 1 || nodes[0].GetId() != "local" || nodes[0].GetState() != sessionv1.NodeState_NODE_STATE_READY {
			t.Fatalf("list: %v, %v", nodes, err)
		}
		if n, err := c.Nodes.Get(ctx, "local"); err != nil || n.GetId() != "local" {
			t.Fatalf("get: %v, %v", n, err)
		}
		if n, err := c.Nodes.Drain(ctx, "local"); err != nil || n.GetState() != sessionv1.NodeState_NODE_STATE_DRAINING {
			t.Fatalf("drain: %v, %v", n, err)
		}
		if _, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 320, Height: 240}); !errors.Is(err, deskgrid.ErrResourceExhausted) {
			t.Fatalf("create on a draining node: %v", err)
		}
		if n, err := c.Nodes.Undrain(ctx, "local"); err != nil || n.GetState() != sessionv1.NodeState_NODE_STATE_READY {
			t.Fatalf("undrain: %v, %v", n, err)
		}
		if _, err := c.Nodes.Get(ctx, "elsewhere"); !errors.Is(err, deskgrid.ErrNotFound) {
			t.Fatalf("get of an unknown node: %v", err)
		}
	})

	t.Run("desktop", func(t *testing.T) {
		s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 640, Height: 480, Autostart: []string{"exec xmessage -name dggo hello"}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Delete(context.WithoutCancel(ctx))

		procs, err := s.Processes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(procs, func(p *sandboxv1.Process) bool {
			return strings.Contains(strings.Join(p.GetArgv(), " "), "xmessage -name dggo hello")
		})
		if i < 0 || procs[i].GetState() != sandboxv1.ProcessState_PROCESS_STATE_RUNNING {
			t.Fatalf("processes: %v", procs)
		}
		var win *displayv1.Window
		eventually(t, 30*time.Second, "xmessage's window", func() bool {
			ws, err := s.Windows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				if w.GetInstance() == "dggo" {
					win = w
				}
			}
			return win != nil
		})
		if d, err := s.Display(ctx); err != nil || d.GetWidth() != 640 || d.GetHeight() != 480 {
			t.Fatalf("display: %v %v", d, err)
		}
		if w, err := s.MoveWindow(ctx, win.GetId(), 30, 40, 300, 120); err != nil || w.GetGeometry().GetX() != 30 || w.GetGeometry().GetWidth() != 300 {
			t.Fatalf("move: %v %v", w, err)
		}
		if d, err := s.Resize(ctx, 800, 600); err != nil || d.GetWidth() != 800 {
			t.Fatalf("resize: %v %v", d, err)
		}

		lease, err := s.AcquireInputLease(ctx, "go-a", time.Minute, 0)
		if err != nil || lease.GetLeaseId() == "" || lease.GetHolder() != "go-a" {
			t.Fatalf("acquire: %v %v", lease, err)
		}
		// Anyone may ask who holds it; its id stays with the holder.
		if held, waiting, err := s.InputLease(ctx); err != nil || held.GetHolder() != "go-a" || held.GetToken() != lease.GetToken() || held.GetLeaseId() != "" || waiting != 0 ||
			!held.GetExpireTime().AsTime().Equal(lease.GetExpireTime().AsTime()) {
			t.Fatalf("input lease: %v, %d waiting, %v", held, waiting, err)
		}
		if _, err := s.AcquireInputLease(ctx, "go-b", time.Minute, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, &deskgrid.Error{Code: codes.DeadlineExceeded}) {
			t.Fatalf("a second holder waiting while the first holds the lease: %v", err)
		}
		renewed, err := s.RenewInputLease(ctx, lease, 2*time.Minute)
		if err != nil || renewed.GetToken() != lease.GetToken() || !renewed.GetExpireTime().AsTime().After(lease.GetExpireTime().AsTime()) {
			t.Fatalf("renew: %v %v", renewed, err)
		}
		if err := s.ReleaseInputLease(ctx, lease); err != nil {
			t.Fatal(err)
		}
		if held, waiting, err := s.InputLease(ctx); err != nil || held != nil || waiting != 0 {
			t.Fatalf("input lease after release: %v, %d waiting, %v", held, waiting, err)
		}
		other, err := s.AcquireInputLease(ctx, "go-b", time.Minute, 10*time.Second)
		if err != nil || other.GetToken() <= lease.GetToken() {
			t.Fatalf("acquire after release: %v %v", other, err)
		}
		move := func(token int64) error {
			_, err := s.ActWith(ctx, &displayv1.PerformActionsRequest{LeaseToken: token, Actions: []*displayv1.Action{
				{Action: &displayv1.Action_MouseMove{MouseMove: &displayv1.MouseMove{To: &displayv1.Point{X: 7, Y: 8}}}},
			}})
			return err
		}
		if err := move(other.GetToken()); err != nil {
			t.Fatal(err)
		}
		// The old holder's token is fenced off once a newer one was used.
		if err := move(lease.GetToken()); !errors.Is(err, deskgrid.ErrFailedPrecondition) {
			t.Fatalf("act with a stale lease token: %v", err)
		}
		if err := s.ReleaseInputLease(ctx, other); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("sandbox", func(t *testing.T) {
		ws := filepath.Join(roots, "ws")
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "kept.txt"), []byte("one\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 320, Height: 240, Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Delete(context.WithoutCancel(ctx))
		f := s.Files()
		if err := f.Write(ctx, "kept.txt", []byte("one\ntwo\n"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Write(ctx, "new.txt", []byte("fresh"), 0); err != nil {
			t.Fatal(err)
		}
		changes, err := s.Changes(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, ch := range changes {
			paths = append(paths, ch.GetPath())
		}
		if !slices.Contains(paths, "kept.txt") || !slices.Contains(paths, "new.txt") {
			t.Fatalf("changes: %v", paths)
		}
		if d, err := s.Diff(ctx, "kept.txt"); err != nil || !strings.Contains(d.GetDiff(), "+two") {
			t.Fatalf("diff: %v %v", d, err)
		}
		if r, err := s.ApplyChanges(ctx, "new.txt"); err != nil || !slices.Equal(r.GetApplied(), []string{"new.txt"}) {
			t.Fatalf("apply: %v %v", r, err)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "new.txt")); err != nil || string(b) != "fresh" {
			t.Fatalf("applied file: %q %v", b, err)
		}
		if d, err := s.DiscardChanges(ctx, "kept.txt"); err != nil || !slices.Equal(d, []string{"kept.txt"}) {
			t.Fatalf("discard: %v %v", d, err)
		}
		if b, err := f.Read(ctx, "kept.txt"); err != nil || string(b) != "one\n" {
			t.Fatalf("after discard: %q %v", b, err)
		}

		if err := f.Mkdir(ctx, "a/b", 0, true); err != nil {
			t.Fatal(err)
		}
		if err := f.Write(ctx, "a/b/x.txt", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Move(ctx, "a/b/x.txt", "a/y.txt", false); err != nil {
			t.Fatal(err)
		}
		if fi, err := f.Stat(ctx, "a/y.txt"); err != nil || fi.GetSize() != 1 {
			t.Fatalf("stat: %v %v", fi, err)
		}
		var buf bytes.Buffer
		if fi, err := f.Download(ctx, "a/y.txt", &buf); err != nil || fi.GetName() != "y.txt" || buf.String() != "x" {
			t.Fatalf("download: %v %q %v", fi, buf.String(), err)
		}

		snap, err := s.CreateSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Write(ctx, "a/y.txt", []byte("changed"), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.RestoreSnapshot(ctx, snap.GetSnapshotId()); err != nil {
			t.Fatal(err)
		}
		if b, err := f.Read(ctx, "a/y.txt"); err != nil || string(b) != "x" {
			t.Fatalf("after restore: %q %v", b, err)
		}
		if err := s.DeleteSnapshot(ctx, snap.GetSnapshotId()); err != nil {
			t.Fatal(err)
		}
		if snaps, err := s.Snapshots(ctx); err != nil || len(snaps) != 0 {
			t.Fatalf("snapshots after delete: %v %v", snaps, err)
		}
		if err := f.Delete(ctx, "a", true); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Stat(ctx, "a"); !errors.Is(err, deskgrid.ErrNotFound) {
			t.Fatalf("stat deleted: %v", err)
		}

		if _, err := s.Shell(ctx, "export KEEP=1", 0); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Shell(ctx, "echo ${KEEP:-gone}", 10*time.Second); err != nil || string(r.Output) != "1\n" {
			t.Fatalf("shell: %+v %v", r, err)
		}
		if err := s.RestartShell(ctx); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Shell(ctx, "echo ${KEEP:-gone}", 0); err != nil || string(r.Output) != "gone\n" {
			t.Fatalf("shell after restart: %+v %v", r, err)
		}
		if sb, err := s.Sandbox(ctx); err != nil || sb.GetSessionId() != s.GetId() {
			t.Fatalf("sandbox: %v %v", sb, err)
		}
	})

	t.Run("suspend", func(t *testing.T) {
		s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 320, Height: 240})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Delete(context.WithoutCancel(ctx))
		if err := s.Suspend(ctx, sessionv1.SuspendMode_SUSPEND_MODE_FREEZE); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "SUSPENDED", func() bool {
			if err := s.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			return s.GetState() == sessionv1.SessionState_SESSION_STATE_SUSPENDED
		})
		if sb, err := s.Sandbox(ctx); err != nil || !sb.GetFrozen() {
			t.Fatalf("sandbox of a frozen session: %v %v", sb, err)
		}
		if err := s.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "RUNNING again", func() bool {
			if err := s.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			return s.GetState() == sessionv1.SessionState_SESSION_STATE_RUNNING
		})
		if r, err := s.Exec(ctx, "echo", "back"); err != nil || string(r.Stdout) != "back\n" {
			t.Fatalf("exec after resume: %+v %v", r, err)
		}
	})

	t.Run("history", func(t *testing.T) {
		s, err := c.Sessions.Create(ctx, deskgrid.CreateOptions{Width: 320, Height: 240})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Exec(ctx, "true"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx); err != nil {
			t.Fatal(err)
		}
		// History is recorded as events arrive: once the session's end is
		// in it, nothing more comes.
		var export bytes.Buffer
		eventually(t, 60*time.Second, "the session's end in its history", func() bool {
			export.Reset()
			if err := s.ExportHistory(ctx, &export, false); err != nil {
				t.Fatal(err)
			}
			return bytes.Contains(export.Bytes(), []byte("SESSION_STATE_STOPPED"))
		})
		n := int64(bytes.Count(export.Bytes(), []byte("\n")))
		if d, err := c.History.Delete(ctx, s.GetId()); err != nil || d != n {
			t.Fatalf("delete: %d of %d, %v", d, n, err)
		}
		for e, err := range s.History(ctx, deskgrid.HistoryOptions{}) {
			if !errors.Is(err, deskgrid.ErrNotFound) {
				t.Fatalf("after delete: %v %v", e, err)
			}
		}
		r, err := c.History.Import(ctx, s.GetId(), bytes.NewReader(export.Bytes()))
		if err != nil || r.GetImported() != n {
			t.Fatalf("import: %v %v", r, err)
		}
		got := int64(0)
		for _, err := range s.History(ctx, deskgrid.HistoryOptions{PageSize: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			got++
		}
		if got != n {
			t.Fatalf("history after import: %d entries, want %d", got, n)
		}
		if r, err := c.History.Import(ctx, s.GetId(), bytes.NewReader(export.Bytes())); err != nil || r.GetSkipped() != n || r.GetImported() != 0 {
			t.Fatalf("import again: %v %v", r, err)
		}
		if _, err := c.History.Import(ctx, s.GetId(), strings.NewReader("not json\n")); !errors.Is(err, deskgrid.ErrInvalidArgument) {
			t.Fatalf("import of a malformed line: %v", err)
		}
	})
}
