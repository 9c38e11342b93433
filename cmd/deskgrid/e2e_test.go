package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
)

// The end-to-end tests build bin/deskgrid, run `deskgrid up` on free ports in
// its own data and runtime directories, and drive the REST API as a user would.

// deskgridBinary is the deskgrid the tests run (built with -race when the
// tests are).
func deskgridBinary(t testing.TB) string { return deskgridtest.Binary(t) }

func freeAddr(t testing.TB) string { return deskgridtest.FreeAddr(t) }

// upProcess is a `deskgrid up` under test, with short names for what the
// tests use most.
type upProcess struct {
	*deskgridtest.Server
	t testing.TB
	// key is the admin API key deskgrid up made (empty with -auth=false).
	key, grpc, httpURL, dataDir string
	logs                        fmt.Stringer
}

// logsOf prints what a process printed so far.
type logsOf struct{ p *deskgridtest.Process }

func (l logsOf) String() string { return l.p.Logs() }

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startUp runs `deskgrid up` in the given dirs and waits for /readyz.
func startUp(t testing.TB, dataDir, runDir string, extra ...string) *upProcess {
	t.Helper()
	// Sessions run on the node's own programs unless a test asks for an
	// image: the default desktop image is tested by TestDesktopImageSession.
	s := deskgridtest.StartIn(t, dataDir, runDir, append([]string{"-log-level", "debug", "-default-image", ""}, extra...)...)
	return &upProcess{Server: s, t: t, key: s.APIKey, grpc: s.GRPCAddr, httpURL: s.HTTPURL, dataDir: dataDir, logs: logsOf{s.Process}}
}

// stop interrupts deskgrid as Ctrl-C would and waits for it.
func (p *upProcess) stop() { p.Stop() }

func (p *upProcess) kill9() { p.Kill() }

func (p *upProcess) do(method, path, body string) (int, []byte, http.Header) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.httpURL+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	if p.key != "" {
		req.Header.Set("Authorization", "Bearer "+p.key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		p.t.Fatalf("%s %s: %v%s", method, path, err, p.state())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatalf("%s %s: reading the answer: %v%s", method, path, err, p.state())
	}
	return resp.StatusCode, b, resp.Header
}

// state tells, for a failed call, whether deskgrid up still runs and the
// end of what it printed.
func (p *upProcess) state() string {
	logs := ""
	if p.logs != nil {
		logs = p.logs.String()
	}
	if len(logs) > 8000 {
		logs = logs[len(logs)-8000:]
	}
	return fmt.Sprintf("\n(deskgrid up running: %v; the end of its output:)\n%s", p.Running(), logs)
}

type sessionJSON struct {
	ID          string `json:"id"`
	State       string `json:"state"`
	StateReason string `json:"stateReason"`
	XDisplay    string `json:"xDisplay"`
	Display     struct {
		Width  int `json:"width"`
		Height int `json:"height"`
	} `json:"display"`
}

func (p *upProcess) createSession(width, height int) sessionJSON {
	p.t.Helper()
	code, body, _ := p.do("POST", "/v1/sessions", fmt.Sprintf(`{"display":{"width":%d,"height":%d}}`, width, height))
	if code != http.StatusOK {
		p.t.Fatalf("create: %d %s\n%s", code, body, p.logs)
	}
	var s sessionJSON
	if err := json.Unmarshal(body, &s); err != nil {
		p.t.Fatalf("create response %s: %v", body, err)
	}
	if s.State != "SESSION_STATE_RUNNING" || s.ID == "" || s.XDisplay == "" {
		p.t.Fatalf("created session %s", body)
	}
	return s
}

func (p *upProcess) screenshot(id string) image.Image {
	p.t.Helper()
	code, body, h := p.do("GET", "/v1/sessions/"+id+"/screenshot", "")
	if code != http.StatusOK {
		p.t.Fatalf("screenshot: %d %s", code, body)
	}
	if ct := h.Get("Content-Type"); ct != "image/png" {
		p.t.Fatalf("screenshot content type %q", ct)
	}
	img, err := png.Decode(bytes.NewReader(body))
	if err != nil {
		p.t.Fatalf("screenshot is not a PNG: %v", err)
	}
	return img
}

// xServersUsing lists X server processes whose arguments name a path under
// dir (the session's X authority file lives in the runtime dir).
func xServersUsing(t testing.TB, dir string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "X") {
			continue
		}
		for _, a := range args[1:] {
			if strings.HasPrefix(a, dir) {
				out = append(out, f)
				break
			}
		}
	}
	return out
}

func socketFor(display string) string { return "/tmp/.X11-unix/X" + strings.TrimPrefix(display, ":") }

// socketInode identifies the X socket of a display, so a check that it is
// gone is not fooled by another X server on this machine reusing the number.
func socketInode(t testing.TB, display string) uint64 {
	t.Helper()
	fi, err := os.Stat(socketFor(display))
	if err != nil {
		t.Fatalf("no X socket for %s: %v", display, err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// socketGone tells whether the socket with that inode no longer exists.
func socketGone(display string, ino uint64) bool {
	fi, err := os.Stat(socketFor(display))
	return os.IsNotExist(err) || (err == nil && fi.Sys().(*syscall.Stat_t).Ino != ino)
}

func overlayMountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir) {
			out = append(out, fields[4])
		}
	}
	return out
}

func TestEndToEndSessionLifecycle(t *testing.T) {
	dataDir, runDir := t.TempDir(), t.TempDir()
	p := startUp(t, dataDir, runDir)

	a := p.createSession(1280, 800)
	b := p.createSession(640, 480)
	if a.XDisplay == b.XDisplay {
		t.Fatalf("two sessions share display %s", a.XDisplay)
	}
	if img := p.screenshot(a.ID); img.Bounds().Dx() != 1280 || img.Bounds().Dy() != 800 {
		t.Fatalf("session a screenshot is %v", img.Bounds())
	}
	if img := p.screenshot(b.ID); img.Bounds().Dx() != 640 || img.Bounds().Dy() != 480 {
		t.Fatalf("session b screenshot is %v", img.Bounds())
	}
	inoA, inoB := socketInode(t, a.XDisplay), socketInode(t, b.XDisplay)

	// Get and list see both.
	code, body, _ := p.do("GET", "/v1/sessions/"+a.ID, "")
	if code != 200 || !strings.Contains(string(body), a.ID) {
		t.Fatalf("get: %d %s", code, body)
	}
	code, body, _ = p.do("GET", "/v1/sessions?page_size=1", "")
	var page struct {
		Sessions      []sessionJSON `json:"sessions"`
		NextPageToken string        `json:"nextPageToken"`
	}
	if err := json.Unmarshal(body, &page); err != nil || code != 200 || len(page.Sessions) != 1 || page.NextPageToken == "" {
		t.Fatalf("list page 1: %d %s", code, body)
	}
	code, body, _ = p.do("GET", "/v1/sessions?page_size=1&page_token="+page.NextPageToken, "")
	var page2 struct {
		Sessions []sessionJSON `json:"sessions"`
	}
	if err := json.Unmarshal(body, &page2); err != nil || code != 200 || len(page2.Sessions) != 1 || page2.Sessions[0].ID == page.Sessions[0].ID {
		t.Fatalf("list page 2: %d %s", code, body)
	}

	// Delete removes the X server and its socket.
	code, body, _ = p.do("DELETE", "/v1/sessions/"+a.ID, "")
	if code != 200 || !strings.Contains(string(body), "SESSION_STATE_STOPPED") {
		t.Fatalf("delete: %d %s", code, body)
	}
	if !socketGone(a.XDisplay, inoA) {
		t.Fatalf("X socket of a deleted session still there")
	}
	if code, body, _ := p.do("GET", "/v1/sessions/"+a.ID+"/screenshot", ""); code != http.StatusNotFound {
		t.Fatalf("screenshot of a deleted session: %d %s", code, body)
	}
	// A second delete returns the stopped session again.
	if code, _, _ := p.do("DELETE", "/v1/sessions/"+a.ID, ""); code != 200 {
		t.Fatalf("second delete: %d", code)
	}

	// The history service recorded the life of the session.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body, _ = p.do("GET", "/v1/sessions/"+a.ID+"/history", "")
		if code == 200 && strings.Count(string(body), "session.state_changed.v1") >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history of %s: %d %s", a.ID, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Ctrl-C stops b and leaves nothing behind.
	p.stop()
	if !socketGone(b.XDisplay, inoB) {
		t.Fatalf("X socket left after shutdown")
	}
	if x := xServersUsing(t, runDir); len(x) != 0 {
		t.Fatalf("X servers left running after shutdown: %v", x)
	}
	if m := overlayMountsUnder(t, dataDir); len(m) != 0 {
		t.Fatalf("mounts left after shutdown: %v", m)
	}
	assertNoSessionFiles(t, dataDir, runDir)
}

// assertNoSessionFiles checks that no per-session directory is left: X
// authority files, warm displays, sandbox layers.
func assertNoSessionFiles(t *testing.T, dataDir, runDir string) {
	t.Helper()
	for _, d := range []string{
		filepath.Join(runDir, "displays"),
		filepath.Join(runDir, "display-pool"),
		filepath.Join(dataDir, "sandbox", "sandboxes"),
	} {
		ents, err := os.ReadDir(d)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range ents {
			t.Errorf("left behind: %s", filepath.Join(d, e.Name()))
		}
	}
}

func TestEndToEndBadRequests(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"width zero", "POST", "/v1/sessions", `{"display":{"width":0,"height":800}}`, 400},
		{"width huge", "POST", "/v1/sessions", `{"display":{"width":100000,"height":800}}`, 400},
		{"unknown field", "POST", "/v1/sessions", `{"display":{"width":800,"height":600},"colour":"blue"}`, 400},
		{"malformed json", "POST", "/v1/sessions", `{"display":`, 400},
		{"wrong type", "POST", "/v1/sessions", `{"display":{"width":"wide"}}`, 400},
		{"unknown session", "GET", "/v1/sessions/s-aaaaaaaaaaaaaaaaaaaa", "", 404},
		{"unknown session screenshot", "GET", "/v1/sessions/s-aaaaaaaaaaaaaaaaaaaa/screenshot", "", 404},
		{"unknown session delete", "DELETE", "/v1/sessions/s-aaaaaaaaaaaaaaaaaaaa", "", 404},
		{"bad page size", "GET", "/v1/sessions?page_size=5000", "", 400},
		{"bad page token", "GET", "/v1/sessions?page_token=garbage", "", 400},
		{"no such path", "GET", "/v1/nothing", "", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, h := p.do(tt.method, tt.path, tt.body)
			if code != tt.want {
				t.Fatalf("%s %s: %d %s, want %d", tt.method, tt.path, code, body, tt.want)
			}
			if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
				t.Fatalf("error content type %q", h.Get("Content-Type"))
			}
			var e struct {
				Message string `json:"message"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Message == "" {
				t.Fatalf("error body %s is not a JSON error with a message", body)
			}
		})
	}
	// None of them created anything.
	code, body, _ := p.do("GET", "/v1/sessions", "")
	if code != 200 || strings.Contains(string(body), `"id"`) {
		t.Fatalf("bad requests left sessions behind: %s", body)
	}
}

func TestEndToEndRecoversAfterKill9(t *testing.T) {
	dataDir, runDir := t.TempDir(), t.TempDir()
	p := startUp(t, dataDir, runDir)
	s := p.createSession(800, 600)
	ino := socketInode(t, s.XDisplay)
	before := xServersUsing(t, runDir)
	if len(before) == 0 {
		t.Fatal("no X server of the running process found")
	}
	p.kill9()

	// What the killed process left behind may still be there; a new start finds and removes it.
	p2 := startUp(t, dataDir, runDir)
	if !socketGone(s.XDisplay, ino) {
		t.Fatalf("X socket of the killed process's session still there after restart")
	}
	// The new process may run X servers of its own; none of the old ones may remain.
	for _, old := range xServersUsing(t, runDir) {
		for _, b := range before {
			if old == b {
				t.Fatalf("X server %s of the killed process still running after restart", old)
			}
		}
	}
	if m := overlayMountsUnder(t, dataDir); len(m) != 0 {
		t.Fatalf("mounts left after restart: %v", m)
	}
	code, body, _ := p2.do("GET", "/v1/sessions/"+s.ID, "")
	var got sessionJSON
	if err := json.Unmarshal(body, &got); err != nil || code != 200 {
		t.Fatalf("get after restart: %d %s", code, body)
	}
	if got.State != "SESSION_STATE_LOST" && got.State != "SESSION_STATE_STOPPED" {
		t.Fatalf("session of the killed process is %s, want LOST or STOPPED", got.State)
	}
	// New sessions work after the restart.
	n := p2.createSession(640, 480)
	p2.screenshot(n.ID)
	p2.stop()
	assertNoSessionFiles(t, dataDir, runDir)
}

func TestEndToEndCLI(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(deskgridBinary(t), args...)
		cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := cli("sessions", "create", "-width", "800", "-height", "600", "-o", "json")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	var s sessionJSON
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &s); err != nil || s.State != "SESSION_STATE_RUNNING" {
		t.Fatalf("create output %q: %v", out, err)
	}
	out, err = cli("sessions", "list")
	if err != nil || !strings.Contains(out, s.ID) || !strings.Contains(out, "running") || !strings.Contains(out, "800x600") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	if out, err := cli("screenshot", s.ID, "-o", shot); err != nil {
		t.Fatalf("screenshot: %v\n%s", err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil || img.Bounds().Dx() != 800 || img.Bounds().Dy() != 600 {
		t.Fatalf("screenshot file: %v %v", err, img)
	}
	out, err = cli("sessions", "get", "s-aaaaaaaaaaaaaaaaaaaa")
	if err == nil || !strings.Contains(out, "notfound") {
		t.Fatalf("get of an unknown session: %v\n%s", err, out)
	}
	if out, err := cli("sessions", "delete", s.ID); err != nil || !strings.Contains(out, "stopped") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if out, err := cli("sessions", "frobnicate"); err == nil || cliExit(err) != 2 {
		t.Fatalf("unknown subcommand: %v\n%s", err, out)
	}
}

func cliExit(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
