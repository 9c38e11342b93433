package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
	imagestore "github.com/deskgrid/deskgrid/services/sandbox/image"
	"github.com/deskgrid/deskgrid/services/sandbox/imagebuild"
)

// execIn runs argv in a session through REST and returns its stdout and
// exit code.
// sdkSession is the Go SDK's handle on p's session id; its client is
// closed when the test ends.
func (p *upProcess) sdkSession(ctx context.Context, t testing.TB, id string) *deskgrid.Session {
	t.Helper()
	c, err := deskgrid.New(p.grpc, deskgrid.WithAPIKey(p.key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.Sessions.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (p *upProcess) execIn(id string, argv ...string) (string, int) {
	p.t.Helper()
	body, _ := json.Marshal(map[string]any{"argv": argv, "timeout": "120s"})
	code, out, _ := p.do("POST", "/v1/sessions/"+id+":exec", string(body))
	if code != 200 {
		p.t.Fatalf("exec %v: %d %s", argv, code, out)
	}
	var stdout, stderr strings.Builder
	exit := -1
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m struct {
			Result struct {
				Stdout []byte `json:"stdout"`
				Stderr []byte `json:"stderr"`
				Exit   *struct {
					ExitCode int `json:"exitCode"`
				} `json:"exit"`
			} `json:"result"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		stdout.Write(m.Result.Stdout)
		stderr.Write(m.Result.Stderr)
		if m.Result.Exit != nil {
			exit = m.Result.Exit.ExitCode
		}
	}
	if exit != 0 {
		p.t.Logf("exec %v: exit %d, stderr %s", argv, exit, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), exit
}

func (p *upProcess) createWith(body string) sessionJSON {
	p.t.Helper()
	code, out, _ := p.do("POST", "/v1/sessions", body)
	if code != 200 {
		p.t.Fatalf("create %s: %d %s\n%s", body, code, out, p.logs)
	}
	var s sessionJSON
	if err := json.Unmarshal(out, &s); err != nil || s.State != "SESSION_STATE_RUNNING" {
		p.t.Fatalf("created %s: %v", out, err)
	}
	return s
}

// panelShown reports whether a screenshot shows a desktop with its panel:
// not black, and a bottom strip (tint2, 36 px) with launcher icons and a
// clock, many colours unlike the plain background above it.
func panelShown(img image.Image) (bool, string) {
	b := img.Bounds()
	dark := 0
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r+g+bl < 3*0x1000 {
				dark++
			}
		}
	}
	total := (b.Dx() / 4) * (b.Dy() / 4)
	panel := map[color.RGBA]bool{}
	for y := b.Max.Y - 34; y < b.Max.Y-2; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			panel[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 0}] = true
		}
	}
	above := map[color.RGBA]bool{}
	for y := b.Max.Y - 140; y < b.Max.Y-108; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			above[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 0}] = true
		}
	}
	desc := fmt.Sprintf("%d/%d dark samples, %d colours in the panel strip, %d in the strip above", dark, total, len(panel), len(above))
	return dark < total/2 && len(panel) >= 24 && len(panel) > len(above), desc
}

// startUpOnDesktop runs `deskgrid up` whose sessions run on the default
// desktop image (built by scripts/setup), imported into its store first.
func startUpOnDesktop(t testing.TB, dataDir, runDir string, extra ...string) *upProcess {
	t.Helper()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dataDir, "images")); errors.Is(err, fs.ErrNotExist) {
		if err := os.Symlink(desktopImages(t), filepath.Join(dataDir, "images")); err != nil {
			t.Fatal(err)
		}
	}
	p := startUp(t, dataDir, runDir, append([]string{"-default-image", defaultImage}, extra...)...)
	return p
}

var desktopStore struct {
	once sync.Once
	dir  string
	err  error
}

// desktopImages is the image store every desktop test's deskgrid up uses,
// holding the default desktop image: nodes may share a store (it locks
// across processes), and it is kept beside the image cache, so the image's
// gigabytes are unpacked once for every test and run, not once a test.
// Importing images is tested on small images in services/sandbox/image.
func desktopImages(t testing.TB) string {
	t.Helper()
	desktopStore.once.Do(func() {
		layout := imagebuild.DesktopLayout()
		if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
			desktopStore.err = fmt.Errorf("the default desktop image is not built (%s): run scripts/setup (it builds it), or deskgrid images build -cache %s deploy/images/desktop", layout, imagebuild.DefaultCacheDir)
			return
		}
		dir := filepath.Join(filepath.Dir(imagebuild.DefaultCacheDir), "test-images")
		ctx := context.Background()
		// Imported here rather than by up at start, so that the start stays
		// within its readiness wait; up's own import is the same call.
		store, err := imagestore.New(ctx, imagestore.Deps{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			_, err = store.ImportPath(ctx, "", layout, imagestore.ImportOptions{Ref: defaultImage})
		}
		if err == nil {
			err = store.SetPublic(ctx, "", defaultImage, true)
		}
		desktopStore.dir, desktopStore.err = dir, err
	})
	if desktopStore.err != nil {
		t.Fatal(desktopStore.err)
	}
	return desktopStore.dir
}

// TestDesktopImageSession: `deskgrid up` with the default desktop image
// (built by scripts/setup) gives every session that names no image a real
// desktop: the panel on screen, Chromium and a terminal inside, the image's
// user mapped to the session's own host uid range, sudo and dpkg working
// in that session only, commit then create showing the change, and nothing
// left behind by a delete or by a crash of the service. Every session here
// starts cold (no warm desktops: TestDesktopWarmPool covers those).
func TestDesktopImageSession(t *testing.T) {
	dataDir, runDir := t.TempDir(), t.TempDir()
	p := startUpOnDesktop(t, dataDir, runDir, "-warm-desktops", "0")
	root := filepath.Join(dataDir, "sandbox")
	h := sha256.Sum256([]byte(root))
	runcRoot := filepath.Join("/run/deskgrid/containers", hex.EncodeToString(h[:6]), "runc")

	// The create answers once the desktop is drawn: its first screenshot
	// shows the panel, never a black screen.
	a := p.createWith(`{"display":{"width":1280,"height":800}}`)
	if ok, desc := panelShown(p.screenshot(a.ID)); !ok {
		t.Fatalf("the first screenshot after the create shows no panel: %s\n%s", desc, p.logs)
	}

	// The image holds the runtime's mount points: a fresh session's changes
	// are what its desktop wrote, no /dev.
	code, body, _ := p.do("GET", "/v1/sessions/"+a.ID+"/changes", "")
	if code != 200 {
		t.Fatalf("changes: %d %s", code, body)
	}
	var changes struct {
		Changes []struct{ Path string } `json:"changes"`
	}
	if err := json.Unmarshal(body, &changes); err != nil {
		t.Fatal(err)
	}
	for _, c := range changes.Changes {
		if c.Path == "dev" || strings.HasPrefix(c.Path, "dev/") {
			t.Errorf("a fresh session's changes hold %q: %s", c.Path, body)
		}
	}

	if out, code := p.execIn(a.ID, "sh", "-c", "id -u; which chromium lxterminal firefox-esr"); code != 0 || !strings.HasPrefix(out, "1000\n") || !strings.Contains(out, "/usr/bin/chromium") || !strings.Contains(out, "/usr/bin/lxterminal") {
		t.Fatalf("in the session: %q (exit %d)", out, code)
	}
	// The runtime's host files: the session resolves its own name, and sudo
	// does not warn that it cannot.
	if out, code := p.execIn(a.ID, "sh", "-c", "hostname; getent hosts sandbox | tr -s ' \t' ' '; sudo -n true 2>&1"); code != 0 || out != "sandbox\n127.0.1.1 sandbox" {
		t.Errorf("host name and hosts in the session: %q (exit %d)", out, code)
	}
	// sudo makes root of the session's own namespace; a package built and
	// installed with dpkg lands in the session's layer only.
	script := `set -e
touch ~/made-by-user
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/bin
printf 'Package: dg-test\nVersion: 1.0\nArchitecture: all\nMaintainer: deskgrid <t@example.org>\nDescription: test\n' > /tmp/pkg/DEBIAN/control
printf '#!/bin/sh\necho dg-test-ok\n' > /tmp/pkg/usr/bin/dg-test
chmod 755 /tmp/pkg/usr/bin/dg-test
dpkg-deb --root-owner-group --build /tmp/pkg /tmp/dg-test.deb >/dev/null
sudo -n id -u
sudo -n dpkg -i /tmp/dg-test.deb >/dev/null
sudo -n cp /bin/true /usr/local/bin/suid-true
sudo -n chmod 4755 /usr/local/bin/suid-true
dg-test`
	if out, code := p.execIn(a.ID, "sh", "-c", script); code != 0 || out != "0\ndg-test-ok" {
		t.Fatalf("sudo and dpkg in the session: %q (exit %d)", out, code)
	}
	uppers, _ := filepath.Glob(filepath.Join(root, "sandboxes", a.ID, "*upper"))
	uppers2, _ := filepath.Glob(filepath.Join(root, "sandboxes", a.ID, "disk", "upper"))
	uppers = append(uppers, uppers2...)
	if len(uppers) != 1 {
		t.Fatalf("the session's upper layer: %v", uppers)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(uppers[0], "home/user/made-by-user"), &st); err != nil {
		t.Fatal(err)
	}
	base := st.Uid - 1000
	if st.Uid < 1_000_000 || base%65536 != 1_000_000%65536 {
		t.Errorf("a file the session's user made is host uid %d, not in a session range", st.Uid)
	}
	if err := syscall.Lstat(filepath.Join(uppers[0], "usr/local/bin/suid-true"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != base || st.Mode&syscall.S_ISUID == 0 {
		t.Errorf("the setuid file the session's root made: host uid %d mode %o, want uid %d and setuid", st.Uid, st.Mode, base)
	}
	// Without sudo: REST asks for root of the session's namespace, in one
	// exec and in the root shell (a persistent shell of its own); what root
	// makes is the range's first id on the host, never host root.
	if code, out, _ := p.do("POST", "/v1/sessions/"+a.ID+":exec", `{"argv":["sh","-c","id -u; touch /etc/by-root-exec"],"asRoot":true}`); code != 200 || !strings.Contains(string(out), `"stdout":"MAo="`) {
		t.Fatalf("exec as root: %d %s", code, out)
	}
	runShell := func(body string) string {
		t.Helper()
		code, out, _ := p.do("POST", "/v1/sessions/"+a.ID+"/shell:run", body)
		var r struct {
			Output   []byte `json:"output"`
			ExitCode int    `json:"exitCode"`
		}
		if err := json.Unmarshal(out, &r); code != 200 || err != nil || r.ExitCode != 0 {
			t.Fatalf("shell %s: %d %s", body, code, out)
		}
		return strings.TrimSpace(string(r.Output))
	}
	runShell(`{"command":"cd /etc && export R=kept && touch by-root-shell","asRoot":true}`)
	if got := runShell(`{"command":"echo $R $PWD; id -u","asRoot":true}`); got != "kept /etc\n0" {
		t.Errorf("the root shell: %q", got)
	}
	if got := runShell(`{"command":"echo [$R]; id -u"}`); got != "[]\n1000" {
		t.Errorf("the user's shell beside it: %q", got)
	}
	for _, f := range []string{"etc/by-root-exec", "etc/by-root-shell"} {
		if err := syscall.Lstat(filepath.Join(uppers[0], f), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != base || st.Gid != base {
			t.Errorf("%s made as root is host %d:%d, want the range's %d", f, st.Uid, st.Gid, base)
		}
	}
	// The session's processes run in its range on the host.
	if out, _ := exec.Command("ps", "-eo", "uid=,args=").Output(); !strings.Contains(string(out), fmt.Sprint(base+1000)) {
		t.Errorf("no process of host uid %d (the session's user) on the host", base+1000)
	}

	b := p.createWith(`{"display":{"width":640,"height":480}}`)
	if out, code := p.execIn(b.ID, "sh", "-c", "command -v dg-test; ls /usr/local/bin; ls /home/user; id -u"); code != 0 || strings.Contains(out, "dg-test") || strings.Contains(out, "suid-true") || strings.Contains(out, "made-by-user") {
		t.Errorf("another session sees the first one's changes: %q (exit %d)", out, code)
	}

	code, out, _ := p.do("POST", "/v1/sessions/"+a.ID+":commit", `{"image":"team/desk:v1"}`)
	if code != 200 {
		t.Fatalf("commit: %d %s", code, out)
	}
	c := p.createWith(`{"display":{"width":640,"height":480},"image":"team/desk:v1"}`)
	if out, code := p.execIn(c.ID, "dg-test"); code != 0 || out != "dg-test-ok" {
		t.Errorf("a session from the committed image: %q (exit %d)", out, code)
	}
	// Its files belong to the ids the first session gave them, not to that
	// session's host range (which this session would see as nobody): the
	// user's home stays the user's.
	if out, code := p.execIn(c.ID, "sh", "-c", "stat -c '%u:%g %n' /home/user /home/user/made-by-user /usr/local/bin/suid-true && touch /home/user/again"); code != 0 ||
		out != "1000:1000 /home/user\n1000:1000 /home/user/made-by-user\n0:0 /usr/local/bin/suid-true" {
		t.Errorf("owners in a session from the committed image: %q (exit %d)", out, code)
	}

	// Discarding the changes of a session whose desktop runs restarts its
	// container with the desktop in it: the panel shows again, drawn by a
	// new panel process, and the discarded file is gone.
	if out, code := p.execIn(c.ID, "sh", "-c", "touch /home/user/to-discard && pgrep -x tint2"); code != 0 {
		t.Fatalf("before the discard: %q (exit %d)", out, code)
	}
	if code, out, _ := p.do("POST", "/v1/sessions/"+c.ID+"/changes:discard", `{}`); code != 200 {
		t.Fatalf("discard on a running desktop: %d %s", code, out)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, code := p.execIn(c.ID, "sh", "-c", "ls /home/user/to-discard 2>/dev/null; pgrep -x tint2")
		if ok, desc := panelShown(p.screenshot(c.ID)); ok && code == 0 && out != "" && !strings.Contains(out, "to-discard") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after the discard: %s; in the session: %q (exit %d)", desc, out, code)
		}
	}

	for _, id := range []string{a.ID, b.ID, c.ID} {
		if code, out, _ := p.do("DELETE", "/v1/sessions/"+id, ""); code != 200 {
			t.Fatalf("delete: %d %s", code, out)
		}
	}
	waitNoContainers := func(what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			out := runcContainers(runcRoot)
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			if out == "" && !strings.Contains(string(mounts), root+"/sandboxes/") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: containers %q, mounts under %s left", what, out, root)
			}
			time.Sleep(100 * time.Millisecond) // stop runs after the answer
		}
	}
	waitNoContainers("after delete")
	for _, id := range []string{a.ID, b.ID, c.ID} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", "deskgrid-"+shortHash(root), id)); err == nil {
			t.Errorf("the cgroup of %s is left", id)
		}
	}

	// A crash: the service killed with a session running; the next start
	// removes its container, mounts and cgroup.
	d := p.createWith(`{"display":{"width":640,"height":480}}`)
	if out := runcContainers(runcRoot); !strings.Contains(out, d.ID) {
		t.Fatalf("runc list before the crash: %q", out)
	}
	p.kill9()
	startUp(t, dataDir, runDir, "-default-image", defaultImage, "-warm-desktops", "0")
	waitNoContainers("after a crash and a restart")
}

// runcContainers names the containers with state in runc's state root, one
// a line, read from the directory: runc itself (`runc list`) would make the
// root when it is gone, leaving an empty directory behind the service.
func runcContainers(root string) string {
	ents, _ := os.ReadDir(root)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return strings.Join(out, "\n")
}
