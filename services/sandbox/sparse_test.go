package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSparseFilesDoNotHoldTheNode commits and snapshots a session holding a
// file of a terabyte of holes, which costs its disk quota nothing: read
// whole, it kept the node compressing zeros for hours (past the call's
// deadline, the session frozen all along). Both are refused at once,
// naming the bound, and the session runs on.
func TestSparseFilesDoNotHoldTheNode(t *testing.T) {
	h, store := newImageHarness(t)
	h.createFrom(t, "sparse", "test/busybox:root")
	h.sh(t, "sparse", "/bin/busybox dd if=/dev/zero of=/holes bs=1 count=1 seek=1099511627775 2>/dev/null; echo ok")
	// A guard, not a measure: before, these calls ran for hours.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := h.client.CommitSandbox(ctx, &sandboxv1.CommitSandboxRequest{SessionId: "sparse", Image: "test/sparse:v1"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("commit: %v, want InvalidArgument naming sparse files", err)
	}
	if _, err := store.Resolve(ctx, "", "test/sparse:v1"); err == nil {
		t.Fatal("the image was stored")
	}
	_, err = h.client.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: "sparse"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("snapshot: %v, want ResourceExhausted naming sparse files", err)
	}
	if got := h.sh(t, "sparse", "echo alive"); got != "alive" {
		t.Fatalf("the session after: %q", got)
	}
}
