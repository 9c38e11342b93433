package imagebuild_test

import (
	"context"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/deskgrid/deskgrid/services/display/capture"
	"github.com/deskgrid/deskgrid/services/display/xauthority"
	"github.com/deskgrid/deskgrid/services/display/xconn"
	"github.com/deskgrid/deskgrid/services/display/xserver"
	"github.com/deskgrid/deskgrid/services/sandbox/imagebuild"
)

// Where the panel's launchers are (deploy/images/desktop/files/etc/xdg/tint2/tint2rc):
// launcher i is centred at x = 18 + 34*i, 18 pixels above the bottom edge.
const (
	browserLauncher = 1
	screenW         = 1280
	screenH         = 800
)

// TestDesktopImageShowsPanelAndOpensBrowser unpacks the default desktop image,
// runs its session program inside the root filesystem in an unprivileged user
// namespace (uid 1000 inside and out) against an X server on the host, and
// checks that the desktop shows a panel on a coloured background and that a
// click on the panel's browser launcher opens a Chromium window.
//
// The image is built by scripts/setup, or by hand:
//
//	deskgrid images build deploy/images/desktop -cache /var/cache/deskgrid/images
//
// DESKGRID_DESKTOP_IMAGE names another OCI layout. DESKGRID_DESKTOP_SCREENSHOTS
// names a directory to keep the screenshots in.
func TestDesktopImageShowsPanelAndOpensBrowser(t *testing.T) {
	dir := imagebuild.DesktopLayout()
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		t.Skipf("the default desktop image is not built (%s): run scripts/setup, or deskgrid images build deploy/images/desktop -cache %s", dir, imagebuild.DefaultCacheDir)
	}
	for _, bin := range []string{"bwrap", "Xvfb", "xdotool", "tar"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is needed (scripts/setup installs it): %v", bin, err)
		}
	}

	// The image and its config.
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		t.Fatalf("layout %s has no image: %v", dir, err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	session := cf.Config.Labels[imagebuild.SessionLabel]
	if session == "" {
		t.Fatalf("image config has no %s label: %v", imagebuild.SessionLabel, cf.Config.Labels)
	}
	if cf.Config.User != "1000:1000" {
		t.Fatalf("image user = %q, want 1000:1000", cf.Config.User)
	}

	// Unpack the root filesystem somewhere uid 1000 can reach.
	work, err := os.MkdirTemp("", "deskgrid-desktop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(work) })
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(work, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	untar(t, mutate.Extract(img), rootfs)
	if _, err := os.Stat(filepath.Join(rootfs, strings.TrimPrefix(session, "/"))); err != nil {
		t.Fatalf("session program %s is not in the image: %v", session, err)
	}

	// The session's X server, outside the image, with its cookie.
	cookie, err := xauthority.NewCookie()
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(work, "Xauthority")
	if err := xauthority.Write(auth, cookie); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(auth, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := xserver.Start(ctx, xserver.Options{Binary: "Xvfb", Width: screenW, Height: screenH, Depth: 24,
		AuthFile: auth, LogFile: filepath.Join(work, "Xvfb.log"), FirstDisplay: 4600, Displays: 50, StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	display := ":" + strconv.Itoa(srv.Display)

	// The session program, as the image's user, in a user namespace.
	args := []string{
		"--unshare-user", "--uid", "1000", "--gid", "1000",
		"--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent",
		"--bind", rootfs, "/",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp",
		"--ro-bind", xserver.SocketDir, xserver.SocketDir,
		"--ro-bind", auth, "/tmp/.Xauthority",
		"--clearenv",
	}
	for _, kv := range cf.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	args = append(args, "--setenv", "DISPLAY", display, "--setenv", "XAUTHORITY", "/tmp/.Xauthority",
		"--setenv", "DESKGRID_SESSION_LOG", "/home/user/session.log",
		"--chdir", cf.Config.WorkingDir, "--", session)
	cmd := exec.Command("bwrap", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}, Setpgid: true}
	out, err := os.Create(filepath.Join(work, "bwrap.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	sessionLog := func() string {
		b, _ := os.ReadFile(filepath.Join(rootfs, "home/user/session.log"))
		o, _ := os.ReadFile(filepath.Join(work, "bwrap.log"))
		return string(o) + string(b)
	}

	xdo := func(args ...string) (string, error) {
		c := exec.Command("xdotool", args...)
		c.Env = append(os.Environ(), "DISPLAY="+display, "XAUTHORITY="+auth)
		b, err := c.Output()
		return strings.TrimSpace(string(b)), err
	}
	waitWindow := func(class string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			if id, err := xdo("search", "--onlyvisible", "--class", class); err == nil && id != "" {
				return
			}
			select {
			case err := <-exited:
				t.Fatalf("session program exited (%v) before a %s window showed:\n%s", err, class, sessionLog())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s window after %s:\n%s", class, d, sessionLog())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// The panel shows, on a background that is not black.
	waitWindow("tint2", 2*time.Minute)
	shot := screenshot(t, ctx, srv.Display, cookie, "desktop.png")
	if black := fraction(shot, shot.Bounds(), isBlack); black > 0.05 {
		t.Errorf("%.0f%% of the desktop is black", black*100)
	}
	panel := image.Rect(0, screenH-36, screenW, screenH)
	if dark := fraction(shot, panel, isPanel); dark < 0.5 {
		t.Errorf("the bottom 36 rows are not the panel (%.0f%% panel colour)", dark*100)
	}
	icon := image.Rect(18+34*browserLauncher-14, screenH-32, 18+34*browserLauncher+14, screenH-4)
	if f := fraction(shot, icon, isPanel); f > 0.9 {
		t.Errorf("no launcher icon drawn at the browser launcher's place %v", icon)
	}

	// A click on the browser launcher opens Chromium.
	x, y := 18+34*browserLauncher, screenH-18
	if _, err := xdo("mousemove", strconv.Itoa(x), strconv.Itoa(y), "click", "1"); err != nil {
		t.Fatal(err)
	}
	waitWindow("chromium", 3*time.Minute)
	screenshot(t, ctx, srv.Display, cookie, "browser.png")

	// The session program is still there: nothing it started took it down.
	select {
	case err := <-exited:
		t.Fatalf("session program exited: %v\n%s", err, sessionLog())
	default:
	}
}

// untar unpacks a flattened image into dir with the system's tar, keeping
// owners and modes (the image is one this machine built).
func untar(t *testing.T, rc io.ReadCloser, dir string) {
	t.Helper()
	defer rc.Close()
	cmd := exec.Command("tar", "-C", dir, "-xpf", "-", "--numeric-owner")
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpack image: %v\n%s", err, out)
	}
}

func screenshot(t *testing.T, ctx context.Context, num int, cookie []byte, name string) *image.RGBA {
	t.Helper()
	c, err := xconn.Dial(ctx, num, cookie)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := capture.ScreenOf(c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := capture.Grab(c, s, capture.Rect{Width: s.Width, Height: s.Height})
	if err != nil {
		t.Fatal(err)
	}
	img, err := f.RGBA()
	if err != nil {
		t.Fatal(err)
	}
	keep := os.Getenv("DESKGRID_DESKTOP_SCREENSHOTS")
	if keep == "" {
		keep = t.TempDir()
	}
	path := filepath.Join(keep, name)
	w, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := png.Encode(w, img); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return img
}

func fraction(img *image.RGBA, r image.Rectangle, match func(r, g, b uint8) bool) float64 {
	n, total := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			i := img.PixOffset(x, y)
			if match(img.Pix[i], img.Pix[i+1], img.Pix[i+2]) {
				n++
			}
			total++
		}
	}
	if total == 0 {
		return 0
	}
	return float64(n) / float64(total)
}

func isBlack(r, g, b uint8) bool { return r < 8 && g < 8 && b < 8 }

// isPanel: the panel's colour, #1f2933.
func isPanel(r, g, b uint8) bool { return near(r, 0x1f) && near(g, 0x29) && near(b, 0x33) }

func near(a, b uint8) bool { return a > b-12 && a < b+12 }
