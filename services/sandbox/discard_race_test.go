package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// TestDiscardRemovesOnlyBeneathTheLayer discards a file of a session whose
// daemon (one nothing counts on a node without cgroups) keeps swapping the
// file's directory for a link to a node directory: between the listing of
// the changes and the container's end the link may be what is left, and a
// removal by path would follow it and delete the node's file.
func TestDiscardRemovesOnlyBeneathTheLayer(t *testing.T) {
	h, _ := newUncontrolledImageHarness(t)
	node := filepath.Join(t.TempDir(), "node")
	if err := os.MkdirAll(node, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(node, "f")
	h.createFrom(t, "swap", "test/busybox:root")
	ctx := context.Background()
	discarded := 0
	for i := range 40 {
		if err := os.WriteFile(victim, []byte("node's"), 0o600); err != nil {
			t.Fatal(err)
		}
		h.sh(t, "swap", `cd /root && /bin/busybox mkdir -p d && echo s > d/f && `+
			`/bin/busybox setsid sh -c 'while :; do /bin/busybox mv d d.real; /bin/busybox ln -s `+node+` d; /bin/busybox rm d; /bin/busybox mv d.real d; done' </dev/null >/dev/null 2>&1 & echo started`)
		_, err := h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: "swap", Paths: []string{"/root/d/f"}})
		if _, serr := os.Stat(victim); serr != nil {
			t.Fatalf("attempt %d: the node's file is gone (%v); discard: %v", i, serr, err)
		}
		if err == nil {
			discarded++
		}
	}
	if discarded == 0 {
		t.Fatal("no discard went through: the attack was never tried")
	}
	t.Logf("%d of 40 discards went through", discarded)
}
