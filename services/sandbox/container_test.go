package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"google.golang.org/grpc/codes"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/internal/container"
)

// busyboxImage is a small image made of the host's static busybox: a root
// filesystem with a shell, accounts (user 1000), /tmp and a home, run as
// user (the image config's User: "" for root).
func busyboxImage(t testing.TB, user string) v1.Image {
	t.Helper()
	return busyboxImageOf(t, user, []string{"proc", "dev", "sys", "run", "tmp"}, nil)
}

// busyboxImageOf is busyboxImage with only the runtime's mount point
// directories in mounts, and extra entries: a value starting "->" is a
// symbolic link to the rest, another a file of that content.
func busyboxImageOf(t testing.TB, user string, mounts []string, extra map[string]string) v1.Image {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox is required (Debian package busybox-static)")
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(n string, mode int64, uid int) {
		_ = tw.WriteHeader(&tar.Header{Name: n + "/", Typeflag: tar.TypeDir, Mode: mode, Uid: uid, Gid: uid})
	}
	file := func(n string, mode int64, body []byte) {
		_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(body))})
		_, _ = tw.Write(body)
	}
	for _, d := range append([]string{"bin", "usr", "usr/bin", "etc", "root", "home"}, mounts...) {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		dir(d, mode, 0)
	}
	dir("home/user", 0o755, 1000)
	file("bin/busybox", 0o755, data)
	for _, n := range []string{"sh", "id", "cat", "touch", "sleep", "ls", "cp", "chmod", "stat", "echo", "ps", "test", "rm", "true", "tr", "grep"} {
		_ = tw.WriteHeader(&tar.Header{Name: "bin/" + n, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"))
	file("etc/group", 0o644, []byte("root:x:0:\nuser:x:1000:\n"))
	names := slices.Sorted(maps.Keys(extra))
	for _, n := range names {
		if target, ok := strings.CutPrefix(extra[n], "->"); ok {
			_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: target})
		} else {
			file(n, 0o644, []byte(extra[n]))
		}
	}
	_ = tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.User = user
	cf.Config.WorkingDir = "/home/user"
	cf.Config.Env = []string{"PATH=/bin:/usr/bin", "HOME=/home/user"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// importImage puts img into store as ref.
func importImage(t testing.TB, store *image.Store, img v1.Image, ref string) {
	t.Helper()
	var archive bytes.Buffer
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.Write(tag, img, &archive); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(context.Background(), "", &archive, image.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
}

func newImageHarness(t testing.TB) (*harness, *image.Store) {
	t.Helper()
	store, err := image.New(context.Background(), image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, store, busyboxImage(t, "1000:1000"), "test/busybox:user")
	importImage(t, store, busyboxImage(t, ""), "test/busybox:root")
	h := newHarness(t, testConfig(t), Deps{Images: store})
	return h, store
}

func (h *harness) createFrom(t testing.TB, id, ref string) *sandboxv1.Sandbox {
	t.Helper()
	resp, err := h.client.CreateSandbox(context.Background(), &sandboxv1.CreateSandboxRequest{SessionId: id, Image: ref})
	if err != nil {
		t.Fatalf("CreateSandbox(%s from %s): %v", id, ref, err)
	}
	return resp.GetSandbox()
}

func (h *harness) sh(t *testing.T, id, script string) string {
	t.Helper()
	r := h.mustExec(t, id, "sh", "-c", script)
	return strings.TrimSpace(r.stdout)
}

func hostOwner(t *testing.T, p string) (uint32, uint32, os.FileMode) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Lstat(p)
	return st.Uid, st.Gid, fi.Mode()
}

// TestImageSessionIsAContainerInItsOwnRange: a session from an image runs
// on the image's root filesystem as the image's user, root inside its own
// user namespace is an unprivileged host range no other session shares, and
// a setuid file it makes is not host-root-owned.
func TestImageSessionIsAContainerInItsOwnRange(t *testing.T) {
	h, _ := newImageHarness(t)
	h.createFrom(t, "ua", "test/busybox:user")
	h.createFrom(t, "ra", "test/busybox:root")
	h.createFrom(t, "rb", "test/busybox:root")
	ua, ra, rb := h.svc.boxes["ua"], h.svc.boxes["ra"], h.svc.boxes["rb"]
	if ua.img.Range == ra.img.Range || ra.img.Range == rb.img.Range || ua.img.Range == rb.img.Range {
		t.Fatalf("sessions share a range: %v %v %v", ua.img.Range, ra.img.Range, rb.img.Range)
	}

	// The image's root filesystem and user, and pid 1 the init.
	if got := h.sh(t, "ua", "id -u; id -g; pwd; cat /proc/1/cmdline"); !strings.HasPrefix(got, "1000\n1000\n/home/user\n"+container.InitPath) {
		t.Errorf("in the user image: %q", got)
	}
	if got := h.sh(t, "ra", "id -u"); got != "0" {
		t.Errorf("in the root image: id -u = %q", got)
	}
	// The host sees the session's range, in files and in processes.
	h.sh(t, "ua", "touch /home/user/made-by-user")
	if uid, gid, _ := hostOwner(t, filepath.Join(ua.upper(), "home/user/made-by-user")); uid != ua.img.Range.Host(1000) || gid != ua.img.Range.Host(1000) {
		t.Errorf("a file the user made is host %d:%d, want %d", uid, gid, ua.img.Range.Host(1000))
	}
	status := h.sh(t, "ua", "cat /proc/self/status")
	if !strings.Contains(status, "Uid:\t1000\t1000") {
		t.Errorf("inside, the command's status: %q", status)
	}
	pid := h.sh(t, "ra", "sleep 30 >/dev/null 2>&1 & echo $!")
	_ = pid // its host pid is found by its cgroup below
	hostUIDs := map[uint32]bool{}
	pids, err := ra.cg.Pids()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if _, uid, ok := procUID(p); ok {
			hostUIDs[uid] = true
		}
	}
	if len(hostUIDs) == 0 {
		t.Fatal("no process of the session in its cgroup")
	}
	for uid := range hostUIDs {
		if !ra.img.Range.Contains(uid) {
			t.Errorf("a process of the session runs as host uid %d, outside its range %v", uid, ra.img.Range)
		}
	}

	// Root of the session writes the image's /usr/bin and makes a setuid file.
	h.sh(t, "ra", "cp /bin/busybox /usr/bin/suid-shell && chmod 4755 /usr/bin/suid-shell && echo x > /usr/bin/only-in-ra")
	uid, _, mode := hostOwner(t, filepath.Join(ra.upper(), "usr/bin/suid-shell"))
	if mode&os.ModeSetuid == 0 {
		t.Errorf("the setuid bit did not stick: %v", mode)
	}
	if uid == 0 || !ra.img.Range.Contains(uid) {
		t.Errorf("a setuid-root file made in a session is host uid %d, want in %v", uid, ra.img.Range)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(ra.merged(), &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Flags&syscall.MS_NOSUID == 0 || sfs.Flags&syscall.MS_NODEV == 0 {
		t.Errorf("the merged tree is mounted without nosuid,nodev on the host: %#x", sfs.Flags)
	}
	// Inside, the setuid bit works (sudo does): the user becomes root of
	// its own namespace, not of the host.
	h.sh(t, "ra", "chmod 4755 /bin/busybox")
	// Another session sees none of it, nor the first one's processes.
	if got := h.sh(t, "rb", "ls /usr/bin; ls /proc | grep -c '^[0-9]'"); strings.Contains(got, "only-in-ra") || strings.Contains(got, "suid-shell") {
		t.Errorf("session rb sees ra's files: %q", got)
	}
	if got := h.sh(t, "rb", "cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '"); strings.Contains(got, "sleep 30") {
		t.Errorf("session rb sees ra's processes: %q", got)
	}
	// The shared layer on disk is untouched and host-root-owned.
	if _, err := os.Stat(filepath.Join(ra.img.Layers[0], "usr/bin/only-in-ra")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image's layer changed: %v", err)
	}
	if uid, _, _ := hostOwner(t, filepath.Join(ra.img.Layers[0], "bin/busybox")); uid != 0 {
		t.Errorf("the layer's busybox is host uid %d on disk", uid)
	}

	// The changes API sees the session's changes over the whole root.
	ch, err := h.client.ListChanges(context.Background(), &sandboxv1.ListChangesRequest{SessionId: "ra"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range ch.GetChanges() {
		if c.GetPath() == "usr/bin/only-in-ra" {
			found = true
		}
	}
	if !found {
		t.Errorf("changes do not list usr/bin/only-in-ra: %v", ch.GetChanges())
	}
	// The file API reads the container's root filesystem.
	rf, err := h.client.ReadFile(context.Background(), &sandboxv1.ReadFileRequest{SessionId: "ra", Path: "/usr/bin/only-in-ra"})
	if err != nil || string(rf.GetContent()) != "x\n" {
		t.Errorf("ReadFile: %q %v", rf.GetContent(), err)
	}
	// A file written through the API belongs to the image's user inside.
	if _, err := h.client.WriteFile(context.Background(), &sandboxv1.WriteFileRequest{SessionId: "ua", Path: "/home/user/notes/api.txt", Content: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if got := h.sh(t, "ua", "stat -c %u:%g /home/user/notes/api.txt; echo more >> /home/user/notes/api.txt && touch /home/user/notes/new && echo appended"); got != "1000:1000\nappended" {
		t.Errorf("a file written through the API, inside: %q", got)
	}
}

func procUID(pid int) (real, effective uint32, ok bool) {
	data, err := os.ReadFile("/proc/" + itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "Uid:" {
			var r, e uint32
			for i, c := range f[1:3] {
				var n uint32
				for _, d := range c {
					n = n*10 + uint32(d-'0')
				}
				if i == 0 {
					r = n
				} else {
					e = n
				}
			}
			return r, e, true
		}
	}
	return 0, 0, false
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestImageSessionCommitAndDelete: a session's change committed becomes an
// image whose new sessions have it, a setuid-root file with its setuid bit
// (a change to it in such a session is the session's range's on the host,
// never host root's); a deleted session leaves no mount, no runc
// container, no cgroup and no claimed range.
func TestImageSessionCommitAndDelete(t *testing.T) {
	h, _ := newImageHarness(t)
	ctx := context.Background()
	h.createFrom(t, "base", "test/busybox:root")
	h.sh(t, "base", "echo installed > /usr/bin/tool && chmod 755 /usr/bin/tool && echo su > /usr/bin/su-tool && chmod u+s,a+x /usr/bin/su-tool")
	if got := h.sh(t, "base", "stat -c '%a %u:%g' /usr/bin/su-tool"); got != "4755 0:0" {
		t.Fatalf("the setuid file in the session: %q", got)
	}
	if _, err := h.client.CommitSandbox(ctx, &sandboxv1.CommitSandboxRequest{SessionId: "base", Image: "test/busybox:tool"}); err != nil {
		t.Fatal(err)
	}
	h.createFrom(t, "derived", "test/busybox:tool")
	if got := h.sh(t, "derived", "cat /usr/bin/tool; id -u"); got != "installed\n0" {
		t.Errorf("in a session from the committed image: %q", got)
	}
	if got := h.sh(t, "derived", "stat -c '%a %u:%g' /usr/bin/su-tool"); got != "4755 0:0" {
		t.Errorf("the setuid file in a session from the committed image: %q", got)
	}
	d := h.svc.boxes["derived"]
	h.sh(t, "derived", "echo more >> /usr/bin/su-tool && chmod u+s /usr/bin/su-tool")
	if uid, gid, mode := hostOwner(t, filepath.Join(d.upper(), "usr/bin/su-tool")); uid == 0 || gid == 0 || uid != d.img.Range.Host(0) || mode&os.ModeSetuid == 0 {
		t.Errorf("the setuid file changed in a session from the committed image is host %d:%d %v, want the range's %d and setuid", uid, gid, mode, d.img.Range.Host(0))
	}
	// Discarding a change restarts the container on the layer without it.
	if _, err := h.client.DiscardChanges(ctx, &sandboxv1.DiscardChangesRequest{SessionId: "base", Paths: []string{"usr/bin/tool"}}); err != nil {
		t.Fatal(err)
	}
	if got := h.sh(t, "base", "test -e /usr/bin/tool && echo present || echo absent"); got != "absent" {
		t.Errorf("after discard: %q", got)
	}
	b := h.svc.boxes["derived"]
	slot := filepath.Join(h.cfg.IDSlotDir, itoa(b.img.Slot))
	if _, err := os.Stat(slot); err != nil {
		t.Fatalf("the session's range is not claimed: %v", err)
	}
	cgPath := b.cg.Path()
	for _, id := range []string{"base", "derived"} {
		if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := h.svc.runtime().List(ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("runc containers left: %+v %v", list, err)
	}
	if out, _ := exec.Command("runc", "--root", h.svc.runtime().Root, "list", "-q").Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("runc list: %q", out)
	}
	assertNothingLeft(t, h.cfg.Root)
	assertNoContainerMounts(t, h.cfg.ContainerDir)
	if _, err := os.Stat(slot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the range's claim is left: %v", err)
	}
	for _, c := range []string{"memory", "pids", "freezer", "cpuset", "devices"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, cgPath)); err == nil {
			t.Errorf("cgroup %s left in %s", cgPath, c)
		}
	}
}

func assertNoContainerMounts(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			t.Errorf("mount left: %s", f[4])
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "runc" {
			t.Errorf("container dir left: %s", e.Name())
		}
	}
}

// TestImageSessionReconciledAfterCrash: a service killed with its
// containers running leaves them to the next start, which adopts the ones
// it keeps (commands work again, files kept) and removes the rest (runc
// delete, unmount, range released).
func TestImageSessionReconciledAfterCrash(t *testing.T) {
	ctx := context.Background()
	store, err := image.New(ctx, image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, store, busyboxImage(t, ""), "test/busybox:root")
	cfg := testConfig(t)
	crashed, err := New(ctx, cfg, Deps{Logger: quietLogger(), Images: store})
	if err != nil {
		t.Fatal(err)
	}
	im, err := store.Resolve(ctx, "", "test/busybox:root")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"keep", "drop"} {
		if _, err := crashed.create(ctx, id, "", Limits{}, "", false, im); err != nil {
			t.Fatal(err)
		}
	}
	dropSlot := crashed.boxes["drop"].img.Slot
	keepRange := crashed.boxes["keep"].img.Range
	if err := os.WriteFile(filepath.Join(crashed.boxes["keep"].merged(), "root", "kept"), []byte("yes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The process is gone; its containers, mounts and cgroups are not.

	h := newHarness(t, cfg, Deps{Images: store})
	removed, err := h.svc.Reconcile(ctx, func(id string) bool { return id == "keep" })
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "drop" {
		t.Errorf("removed %v, want [drop]", removed)
	}
	if _, err := h.svc.runtime().State(ctx, "drop"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dropped session's container: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.IDSlotDir, itoa(dropSlot))); err == nil {
		if data, _ := os.ReadFile(filepath.Join(cfg.IDSlotDir, itoa(dropSlot), "owner")); strings.HasSuffix(string(data), "/drop") {
			t.Errorf("the dropped session's range is still claimed")
		}
	}
	// Nothing of the dropped session's bundle is left: its host files'
	// tmpfs, its root filesystem's bind, the directory.
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(data), h.svc.bundle("drop")+"/") {
		t.Errorf("the dropped session's bundle has mounts left")
	}
	if _, err := os.Lstat(h.svc.bundle("drop")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dropped session's bundle is left: %v", err)
	}
	if got := h.sh(t, "keep", "cat /etc/hosts; echo; cat /root/kept; id -u"); !strings.HasSuffix(got, "\n\nyes\n0") || !strings.HasPrefix(got, "127.0.0.1") {
		t.Errorf("the adopted session's /etc/hosts and files: %q", got)
	}
	if got := h.sh(t, "keep", "cat /root/kept; id -u"); got != "yes\n0" {
		t.Errorf("in the adopted session: %q", got)
	}
	if h.svc.boxes["keep"].img.Range != keepRange {
		t.Errorf("the adopted session's range changed: %v, was %v", h.svc.boxes["keep"].img.Range, keepRange)
	}
	_ = time.Second
}

// TestImageSessionNetwork: a session from an image with network has the
// user-mode network of bubblewrap sandboxes (tap0, default route through
// slirp4netns); one without has loopback only.
func TestImageSessionNetwork(t *testing.T) {
	h, _ := newImageHarness(t)
	ctx := context.Background()
	if _, err := h.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{SessionId: "net", Image: "test/busybox:root", Network: true}); err != nil {
		t.Fatal(err)
	}
	h.createFrom(t, "nonet", "test/busybox:root")
	if got := h.sh(t, "net", "cat /proc/net/route"); !strings.Contains(got, "tap0\t00000000") {
		t.Errorf("with network, routes: %q", got)
	}
	if got := h.sh(t, "nonet", "cat /proc/net/dev"); strings.Contains(got, "tap0") {
		t.Errorf("without network, devices: %q", got)
	}
}

// BenchmarkExecTrueInContainer is BenchmarkExecTrue in a session from an
// image: a runc exec into its running container.
func BenchmarkExecTrueInContainer(b *testing.B) {
	h, _ := newImageHarness(b)
	h.createFrom(b, "bench", "test/busybox:root")
	for b.Loop() {
		res := h.mustExec(b, "bench", "true")
		if res.exit.GetExitCode() != 0 {
			b.Fatal(res)
		}
	}
}

// BenchmarkCreateDeleteImageSandbox is BenchmarkCreateDeleteSandbox for a
// session from an image: mounts, container start and removal.
func BenchmarkCreateDeleteImageSandbox(b *testing.B) {
	h, _ := newImageHarness(b)
	ctx := context.Background()
	for b.Loop() {
		h.createFrom(b, "bench", "test/busybox:root")
		if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestImageSessionDisplay: a session from an image reaches its display
// through the socket and cookie placed into its running container, as the
// image's user; another session sees neither.
func TestImageSessionDisplay(t *testing.T) {
	store, err := image.New(context.Background(), image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, store, busyboxImage(t, "1000:1000"), "test/busybox:user")
	cfg := testConfig(t)
	cfg.X11SocketDir = t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(cfg.X11SocketDir, "X42"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	cookie := filepath.Join(t.TempDir(), "xauth")
	if err := os.WriteFile(cookie, []byte("cookie"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, Deps{Images: store, DisplayLookup: func(id string) (string, string, bool) {
		return ":42", cookie, id == "gui"
	}})
	h.createFrom(t, "gui", "test/busybox:user")
	h.createFrom(t, "headless", "test/busybox:user")
	// A program started before the display was placed sees it too: the
	// socket arrives in the running container's /tmp/.X11-unix.
	if got := h.sh(t, "gui", `echo $DISPLAY $XAUTHORITY; test -S /tmp/.X11-unix/X42 && echo socket; cat "$XAUTHORITY"; echo; id -u`); got != ":42 /tmp/.X11-unix/.Xauthority-deskgrid\nsocket\ncookie\n1000" {
		t.Fatalf("gui session: %q", got)
	}
	// A command as root gets the display too, and the cookie stays the
	// image user's, who reads it again for every new connection.
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "gui", AsRoot: true, Argv: []string{"sh", "-c", `id -u; cat "$XAUTHORITY"`}})
	if err != nil || res.stdout != "0\ncookie" {
		t.Fatalf("gui session as root: %+v %v", res, err)
	}
	if got := h.sh(t, "gui", `cat "$XAUTHORITY"`); got != "cookie" {
		t.Fatalf("the user's cookie after a command as root: %q", got)
	}
	if got := h.sh(t, "headless", `echo "[$DISPLAY]"; ls -A /tmp/.X11-unix | wc -l`); got != "[]\n0" {
		t.Fatalf("headless session: %q", got)
	}
}

// TestImageSessionXSocketIsTheServers: what a session's programs find at
// /tmp/.X11-unix/X<n> is the X server's socket or nothing: a file left in
// the socket's place (a server that has not made its socket yet, or a
// stale file) is refused instead of bound, and a socket the server made
// again replaces the one bound before.
func TestImageSessionXSocketIsTheServers(t *testing.T) {
	store, err := image.New(context.Background(), image.Deps{Dir: filepath.Join(t.TempDir(), "images"), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, store, busyboxImage(t, "1000:1000"), "test/busybox:user")
	cfg := testConfig(t)
	cfg.X11SocketDir = t.TempDir()
	sock := filepath.Join(cfg.X11SocketDir, "X43")
	h := newHarness(t, cfg, Deps{Images: store, DisplayLookup: func(id string) (string, string, bool) {
		return ":43", "", true
	}})
	h.createFrom(t, "gui", "test/busybox:user")

	// A regular file where the socket will be: no command is given it.
	if err := os.WriteFile(sock, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err = h.exec(t, &sandboxv1.ExecRequest{SessionId: "gui", Argv: []string{"true"}})
	wantCode(t, err, codes.FailedPrecondition)

	listen := func() (net.Listener, uint64) {
		t.Helper()
		_ = os.Remove(sock)
		lis, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(sock, &st); err != nil {
			t.Fatal(err)
		}
		return lis, st.Ino
	}
	inContainer := func() uint64 {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(h.svc.bundle(h.svc.boxes["gui"].cid), "init.pid"))
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/proc", strings.TrimSpace(string(data)), "root/tmp/.X11-unix/X43"), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	lis, ino := listen()
	if got := h.sh(t, "gui", "test -S /tmp/.X11-unix/X43 && echo socket"); got != "socket" {
		t.Fatalf("with the server's socket: %q", got)
	}
	if got := inContainer(); got != ino {
		t.Fatalf("the container sees inode %d, the server's socket is %d", got, ino)
	}
	// The server makes its socket again (a new inode at the same path).
	lis.Close()
	lis, ino = listen()
	defer lis.Close()
	if got := h.sh(t, "gui", "test -S /tmp/.X11-unix/X43 && echo socket"); got != "socket" {
		t.Fatalf("with the server's new socket: %q", got)
	}
	if got := inContainer(); got != ino {
		t.Fatalf("after the socket was made again the container sees inode %d, want %d", got, ino)
	}
}

// TestExecAsRoot: a command (exec, started program) asked to run as root
// runs as uid 0 of the session's own user namespace: it may write /etc (in the session's layer
// only), and what it makes is owned on the host by the first id of the
// session's range, never by the host's root. The image's user cannot; a
// session without an image has no namespace to be root in (nor a root
// shell; TestDesktopImageSession runs one, the test images have no bash).
func TestExecAsRoot(t *testing.T) {
	h, _ := newImageHarness(t)
	ctx := context.Background()
	h.createFrom(t, "user", "test/busybox:user")
	h.createFrom(t, "other", "test/busybox:user")
	b := h.svc.boxes["user"]

	if got := h.sh(t, "user", "id -u; echo x > /etc/by-user 2>/dev/null || echo refused"); got != "1000\nrefused" {
		t.Fatalf("as the image's user: %q", got)
	}
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "user", AsRoot: true, Argv: []string{"sh", "-c",
		"id -u; id -g; echo hi > /etc/by-root && touch /home/user/by-root && chmod 4755 /home/user/by-root && ls -n /etc/by-root | awk '{print $3}'"}})
	if err != nil || res.exit.GetExitCode() != 0 || res.stdout != "0\n0\n0\n" {
		t.Fatalf("as root: %+v %v", res, err)
	}
	for _, p := range []string{"etc/by-root", "home/user/by-root"} {
		uid, gid, mode := hostOwner(t, filepath.Join(b.upper(), p))
		if uid == 0 || gid == 0 || uid != b.img.Range.Host(0) || gid != b.img.Range.Host(0) {
			t.Errorf("%s made by the session's root is host %d:%d, want the range's %d", p, uid, gid, b.img.Range.Host(0))
		}
		if p == "home/user/by-root" && mode&os.ModeSetuid == 0 {
			t.Errorf("%s lost its setuid bit: %v", p, mode)
		}
	}
	// The image's user still works in its home after root did.
	if got := h.sh(t, "user", "cat /etc/by-root; touch ~/still-mine && echo ok"); got != "hi\nok" {
		t.Errorf("the user after root: %q", got)
	}
	if got := h.sh(t, "other", "test -e /etc/by-root && echo leaked || echo absent"); got != "absent" {
		t.Errorf("another session: %q", got)
	}
	// A started program as root too.
	p, err := h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "user", AsRoot: true, Argv: []string{"sh", "-c", "id -u > /etc/started-as"}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return !alive(p.GetProcess().GetPid()) }, "the started program to end")
	if got := h.sh(t, "user", "cat /etc/started-as"); got != "0" {
		t.Errorf("a program started as root ran as %q", got)
	}

	plain := newHarness(t, testConfig(t), Deps{})
	plain.create(t, "plain", "")
	_, err = plain.exec(t, &sandboxv1.ExecRequest{SessionId: "plain", AsRoot: true, Argv: []string{"true"}})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = plain.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: "plain", AsRoot: true, Argv: []string{"true"}})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = plain.client.RunShell(ctx, &sandboxv1.RunShellRequest{SessionId: "plain", AsRoot: true, Command: "true"})
	wantCode(t, err, codes.FailedPrecondition)
}

// A command runc cannot start exits as a shell's would (127: not found),
// with runc's message alone on stderr; a command that exits 255 itself
// keeps its code.
func TestExecNotFoundInAContainer(t *testing.T) {
	h, _ := newImageHarness(t)
	h.createFrom(t, "nf", "test/busybox:user")
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "nf", Argv: []string{"no-such-program"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.exit.GetExitCode() != 127 || !strings.Contains(res.stderr, `"no-such-program": executable file not found`) || strings.Contains(res.stderr, "level=") {
		t.Fatalf("a program that is not there: exit %d, stderr %q", res.exit.GetExitCode(), res.stderr)
	}
	res, err = h.exec(t, &sandboxv1.ExecRequest{SessionId: "nf", Argv: []string{"sh", "-c", "exit 255"}})
	if err != nil || res.exit.GetExitCode() != 255 {
		t.Fatalf("exit 255: %+v %v", res, err)
	}
}

// TestImageUserIsReadInsideTheSession: the image's user is looked up in the
// session's own /etc/passwd, never through a link its root made there to a
// file of the node (which the service would read as host root: a node's
// file, or a FIFO or /dev/zero that hangs or fills the service).
func TestImageUserIsReadInsideTheSession(t *testing.T) {
	h, store := newImageHarness(t)
	importImage(t, store, busyboxImage(t, "user"), "test/busybox:named")
	h.createFrom(t, "s", "test/busybox:named")
	hostPasswd := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(hostPasswd, []byte("user:x:4242:4242::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(hostPasswd), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "s", AsRoot: true, Argv: []string{"sh", "-c",
		"rm /etc/passwd && busybox ln -s " + hostPasswd + " /etc/passwd"}})
	if err != nil || res.exit.GetExitCode() != 0 {
		t.Fatalf("as root: %+v %v", res, err)
	}
	// The link leads nowhere inside: the image's user "user" is unknown.
	if r, err := h.exec(t, &sandboxv1.ExecRequest{SessionId: "s", Argv: []string{"id", "-u"}}); err == nil {
		t.Errorf("the image's user after the session's root linked /etc/passwd to a node's file: uid %q", r.stdout)
	}
	h.createFrom(t, "fifo", "test/busybox:user")
	res, err = h.exec(t, &sandboxv1.ExecRequest{SessionId: "fifo", AsRoot: true, Argv: []string{"sh", "-c",
		"rm /etc/passwd && busybox mkfifo /etc/passwd"}})
	if err != nil || res.exit.GetExitCode() != 0 {
		t.Fatalf("as root: %+v %v", res, err)
	}
	// The service reads the image's user for the file API too: a FIFO
	// there must not hang it (nor the session's delete after it).
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SessionId: "fifo", Path: "home/user/f", Content: []byte("x")})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("writing a file with a FIFO at /etc/passwd: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the file API hangs on the session's /etc/passwd made a FIFO")
	}
	if _, err := h.client.DeleteSandbox(context.Background(), &sandboxv1.DeleteSandboxRequest{SessionId: "fifo"}); err != nil {
		t.Fatal(err)
	}
}
