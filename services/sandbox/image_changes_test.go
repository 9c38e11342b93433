package sandbox

import (
	"context"
	"strings"
	"testing"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// In a session from an image, a change's path is the one its programs see:
// "/etc/added" names the same change as "etc/added", in list, diff and
// discard alike.
func TestImageSessionChangesTakeAbsolutePaths(t *testing.T) {
	h, _ := newImageHarness(t)
	ctx := context.Background()
	h.createFrom(t, "abs", "test/busybox:root")
	h.sh(t, "abs", "echo x > /etc/added")
	list, err := h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "abs", Path: "/etc"})
	if err != nil {
		t.Fatalf("list /etc: %v", err)
	}
	found := false
	for _, c := range list.GetChanges() {
		found = found || c.GetPath() == "etc/added"
	}
	if !found {
		t.Fatalf("list /etc: %v, want etc/added", list.GetChanges())
	}
	d, err := h.client.DiffFile(ctx, &sandboxv1.DiffFileRequest{SessionId: "abs", Path: "/etc/added"})
	if err != nil {
		t.Fatalf("diff /etc/added: %v", err)
	}
	if !strings.Contains(d.GetDiff(), "+x") {
		t.Errorf("diff /etc/added: %q, want the added line", d.GetDiff())
	}
	if _, err := h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: "abs", Paths: []string{"/etc/added"}}); err != nil {
		t.Fatalf("discard /etc/added: %v", err)
	}
	if got := h.sh(t, "abs", "test -e /etc/added && echo present || echo absent"); got != "absent" {
		t.Errorf("after discard: %q", got)
	}
	if _, err := h.client.DiffFile(ctx, &sandboxv1.DiffFileRequest{SessionId: "abs", Path: "/etc/../etc/passwd"}); err == nil {
		t.Errorf("diff of a path with \"..\" was accepted")
	}
}
