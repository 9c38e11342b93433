package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
)

// TestImageSessionHostFilesHeld: images that make /etc/hosts a directory,
// /run a link to /etc (with /etc/resolv.conf a link into /run), or /tmp a
// file, and a session's root that tries to unmount, rename over, remove or
// fill its host files, get nothing of the node's and leave nothing behind.
func TestImageSessionHostFilesHeld(t *testing.T) {
	h, store := newImageHarness(t)
	ctx := context.Background()
	importImage(t, store, busyboxImageOf(t, "", []string{"proc", "dev", "sys", "tmp"}, map[string]string{
		"etc/hosts/inside": "dir\n",
		"etc/resolv.conf":  "->/run/resolv.conf",
		"run":              "->etc",
	}), "test/busybox:odd")
	importImage(t, store, busyboxImageOf(t, "", []string{"proc", "dev", "sys", "run"}, map[string]string{
		"tmp": "a file\n",
	}), "test/busybox:tmpfile")

	h.createFrom(t, "odd", "test/busybox:odd")
	// runc mounts /run's tmpfs where the image's link leads, over /etc
	// inside the container: the image hides its own /etc, nothing more.
	if got := h.sh(t, "odd", "cat /etc/resolv.conf /etc/hostname"); got != strings.TrimSpace(container.ResolvConf(false))+"\nsandbox" {
		t.Errorf("an image whose /run is a link to /etc: %q", got)
	}
	empty := func(id string) {
		t.Helper()
		_ = filepath.Walk(h.svc.boxes[id].upper(), func(p string, fi os.FileInfo, err error) error {
			if err == nil && p != h.svc.boxes[id].upper() {
				t.Errorf("session %s's writable layer holds %s (%v)", id, p, fi.Mode())
			}
			return nil
		})
	}
	empty("odd")

	h.createFrom(t, "root", "test/busybox:root")
	for _, script := range []string{
		"umount /etc/hosts",
		"umount -l /etc/resolv.conf",
		"busybox mount --move /etc/hosts /root",
		"busybox mv /etc/passwd /etc/hostname",
		"rm /etc/hostname",
		"cat /etc/hosts > /proc/self/fd/1 && busybox ln /etc/hosts /etc/hosts2",
	} {
		if r := h.mustExec(t, "root", "sh", "-c", script); r.exit.GetExitCode() == 0 {
			t.Errorf("%s succeeded", script)
		}
	}
	if got := h.sh(t, "root", "cat /etc/hostname; echo x 9>>/etc/hostname >/proc/self/fd/9; cat /etc/hostname"); got != "sandbox\nx" {
		t.Errorf("the session's root writes its /etc/hostname: %q", got)
	}
	if got := h.sh(t, "root", "head -c1 /etc/passwd"); got != "r" {
		t.Errorf("/etc/passwd after the attempts: %q", got)
	}
	list, err := h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "root"})
	if err != nil || len(list.GetChanges()) != 0 {
		t.Errorf("changes after the attempts: %v %v", list.GetChanges(), err)
	}

	// An image whose /tmp is a file cannot run, and leaves nothing.
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "tmpfile", Image: "test/busybox:tmpfile"}); err == nil {
		t.Errorf("a session from an image whose /tmp is a file")
	}
	for _, id := range []string{"odd", "root"} {
		if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	assertNoContainerMounts(t, h.cfg.ContainerDir)
}
