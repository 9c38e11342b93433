package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSnapshotHoldsTheSessionFrozen resumes a suspended session while its
// snapshot is being written: the resume waits until the archive is whole,
// since a session running meanwhile could swap its directories for links to
// the node's files under the archiver.
func TestSnapshotHoldsTheSessionFrozen(t *testing.T) {
	h, _ := newImageHarness(t)
	ctx := context.Background()
	h.createFrom(t, "snap", "test/busybox:root")
	h.sh(t, "snap", "dd if=/dev/urandom of=/big bs=1M count=192 2>/dev/null; echo ok")
	if _, err := h.client.FreezeSandbox(ctx, &sandboxv1.FreezeSandboxRequest{SessionId: "snap"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_, err := h.client.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: "snap"})
		if err != nil {
			t.Error(err)
		}
		close(done)
	}()
	// Wait until the archive is being written.
	deadline := time.Now().Add(30 * time.Second)
	for {
		entries, _ := os.ReadDir(h.svc.snapshotsDir())
		writing := false
		for _, e := range entries {
			writing = writing || strings.HasSuffix(e.Name(), ".tmp")
		}
		if writing {
			break
		}
		select {
		case <-done:
			t.Fatal("the snapshot was written before the test could resume the session midway: give it more to archive")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot being written in %s", filepath.Clean(h.svc.snapshotsDir()))
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := h.client.ThawSandbox(ctx, &sandboxv1.ThawSandboxRequest{SessionId: "snap"}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(h.svc.snapshotsDir())
	var names []string
	whole := false
	for _, e := range entries {
		names = append(names, e.Name())
		whole = whole || strings.HasSuffix(e.Name(), ".json")
	}
	if !whole {
		t.Fatalf("the session was thawed before its snapshot was written (%v)", names)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the snapshot did not finish")
	}
}

// TestCommitNeedsAFrozenSession commits a session on a node without
// cgroups, where nothing can freeze it: its programs would run while the
// commit reads its layer by path, free to swap a directory for a link to
// the node's files, which would land in the image. The commit is refused.
func TestCommitNeedsAFrozenSession(t *testing.T) {
	h, store := newUncontrolledImageHarness(t)
	h.createFrom(t, "unfrozen", "test/busybox:root")
	h.sh(t, "unfrozen", "echo x > /made; echo ok")
	_, err := h.client.CommitSandbox(context.Background(), &sandboxv1.CommitSandboxRequest{SessionId: "unfrozen", Image: "test/unfrozen:v1"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "cgroups") {
		t.Fatalf("commit without cgroups: %v, want FailedPrecondition naming cgroups", err)
	}
	if _, err := store.Resolve(context.Background(), "", "test/unfrozen:v1"); err == nil {
		t.Fatal("the image was stored")
	}
}

// newUncontrolledImageHarness is a sandbox service on a node without
// cgroups (nothing can freeze a session there) with the image
// test/busybox:root.
func newUncontrolledImageHarness(t *testing.T) (*harness, *image.Store) {
	t.Helper()
	store, err := image.New(context.Background(), image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, store, busyboxImage(t, ""), "test/busybox:root")
	cfg := testConfig(t)
	cfg.Cgroups = CgroupsOff
	return newHarness(t, cfg, Deps{Images: store}), store
}
