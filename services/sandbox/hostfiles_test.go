package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
)

// TestImageSessionHostFiles: every session from an image has the runtime's
// /etc/hostname, /etc/hosts and /etc/resolv.conf, whatever the image holds
// there (nothing, the build machine's, a link into /run), except what the
// image made a link elsewhere; its root may edit them, and neither they nor
// the mount points runc makes where the image has none (/proc, /dev, /tmp…)
// are changes of the session's or reach a commit.
func TestImageSessionHostFiles(t *testing.T) {
	h, store := newImageHarness(t)
	ctx := context.Background()
	importImage(t, store, busyboxImageOf(t, "", nil, map[string]string{
		"etc/hosts":          "10.9.9.9\tlocalhost\n",
		"etc/resolv.conf":    "->../run/resolvconf/resolv.conf",
		"etc/hostname":       "->/usr/share/hostname",
		"usr/share/hostname": "imagehost\n",
	}), "test/busybox:bare")

	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "net", Image: "test/busybox:bare", Network: true}); err != nil {
		t.Fatal(err)
	}
	if got := h.sh(t, "net", "cat /etc/hosts"); got != strings.TrimSpace(container.HostsFile("sandbox")) {
		t.Errorf("/etc/hosts over the image's: %q", got)
	}
	if got := h.sh(t, "net", "cat /etc/resolv.conf; readlink /etc/resolv.conf"); got != "nameserver "+container.SessionDNS+"\n../run/resolvconf/resolv.conf" {
		t.Errorf("/etc/resolv.conf, a link into /run in the image: %q", got)
	}
	if got := h.sh(t, "net", "cat /etc/hostname"); got != "imagehost" {
		t.Errorf("/etc/hostname, the image's link elsewhere than /run: %q", got)
	}
	if got := h.sh(t, "net", "ls /proc/self/ns >/dev/null && ls -d /dev/pts /tmp /run /sys"); got != "/dev/pts\n/run\n/sys\n/tmp" {
		t.Errorf("the runtime's mounts in an image without their directories: %q", got)
	}
	h.sh(t, "net", "echo '10.1.1.1\tdb' >> /etc/hosts && echo 'search example' >> /etc/resolv.conf && echo tool > /usr/bin/tool")
	if got := h.sh(t, "net", "cat /etc/hosts"); !strings.HasSuffix(got, "10.1.1.1\tdb") {
		t.Errorf("the session's root edits /etc/hosts: %q", got)
	}
	// They are held by a small tmpfs of the session's, not the node's /run.
	r := h.mustExec(t, "net", "sh", "-c",
		"cp /etc/hosts /tmp/hosts; i=0; while [ $i -lt 2000 ]; do echo 0123456789012345678901234567890123456789012345678901234567890 >> /etc/hosts || exit 7; i=$((i+1)); done")
	if r.exit.GetExitCode() != 7 || !strings.Contains(r.stderr, "No space left") {
		t.Errorf("128 KiB written to /etc/hosts: exit %d, %q; want a full tmpfs", r.exit.GetExitCode(), r.stderr)
	}
	h.sh(t, "net", "cat /tmp/hosts > /etc/hosts")
	list, err := h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "net"})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range list.GetChanges() {
		paths = append(paths, c.GetPath())
	}
	if strings.Join(paths, " ") != "usr/bin/tool" {
		t.Errorf("changes: %q, want only usr/bin/tool", paths)
	}
	if _, err := h.client.CommitSandbox(ctx, &sandboxv1.CommitSandboxRequest{SessionId: "net", Image: "test/busybox:bare-tool"}); err != nil {
		t.Fatal(err)
	}

	h.createFrom(t, "nonet", "test/busybox:bare-tool")
	if got := h.sh(t, "nonet", "cat /usr/bin/tool /etc/hosts"); got != "tool\n"+strings.TrimSpace(container.HostsFile("sandbox")) {
		t.Errorf("a session from the commit: %q", got)
	}
	if got := h.sh(t, "nonet", "cat /etc/resolv.conf"); got != strings.TrimSpace(container.ResolvConf(false)) {
		t.Errorf("/etc/resolv.conf without network: %q", got)
	}
	// The committed layer holds none of the runtime's files or mount points:
	// the image below the new session is the first one's plus the tool.
	lower := h.svc.boxes["nonet"].lower
	if data, err := os.ReadFile(filepath.Join(lower, "etc/hosts")); err != nil || string(data) != "10.9.9.9\tlocalhost\n" {
		t.Errorf("the committed image's /etc/hosts: %q %v", data, err)
	}
	for _, p := range []string{"proc", "dev", "sys", "tmp", "run", "etc/resolvconf"} {
		if _, err := os.Lstat(filepath.Join(lower, p)); err == nil {
			t.Errorf("the committed image holds %s", p)
		}
	}
	if fi, err := os.Lstat(filepath.Join(lower, "etc/resolv.conf")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the committed image's /etc/resolv.conf is no longer the image's link: %v %v", fi, err)
	}
	list, err = h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "nonet"})
	if err != nil || len(list.GetChanges()) != 0 {
		t.Errorf("a new session's changes: %v %v", list.GetChanges(), err)
	}

	// An image with none of the files.
	h.createFrom(t, "plain", "test/busybox:root")
	if got := h.sh(t, "plain", "cat /etc/hostname /etc/hosts"); got != "sandbox\n"+strings.TrimSpace(container.HostsFile("sandbox")) {
		t.Errorf("an image without host files: %q", got)
	}
	list, err = h.client.ListChanges(ctx, &sandboxv1.ListChangesRequest{SessionId: "plain"})
	if err != nil || len(list.GetChanges()) != 0 {
		t.Errorf("changes of a session whose image has no host files: %v %v", list.GetChanges(), err)
	}
	for _, id := range []string{"net", "nonet", "plain"} {
		if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	assertNoContainerMounts(t, h.cfg.ContainerDir)
}

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
	// It is refused with the reason, before anything is made.
	_, err = h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "tmpfile", Image: "test/busybox:tmpfile"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "its /tmp is a file") {
		t.Errorf("a session from an image whose /tmp is a file: %v", err)
	}
	for _, id := range []string{"odd", "root"} {
		if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	assertNoContainerMounts(t, h.cfg.ContainerDir)
}
