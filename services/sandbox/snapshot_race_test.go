package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
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
