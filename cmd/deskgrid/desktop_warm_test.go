package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// warmReady counts the warm desktops deskgrid logged ready so far.
func warmReady(p *upProcess) int { return strings.Count(p.logs.String(), "warm desktop ready") }

// waitWarmReady waits until n warm desktops were logged ready in all.
func waitWarmReady(t *testing.T, p *upProcess, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for warmReady(p) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d warm desktops ready, want %d\n%s", warmReady(p), n, p.logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// containerOf is the name of a session's container, from its sandbox's
// meta.json: a warm desktop's own id when the session was given one.
func containerOf(t *testing.T, root, id string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "sandboxes", id, "meta.json"))
	if err != nil {
		t.Fatalf("sandbox meta of %s: %v", id, err)
	}
	var m struct {
		SessionID string `json:"session_id"`
		Container string `json:"container"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.SessionID != id {
		t.Fatalf("sandbox meta of %s names session %q", id, m.SessionID)
	}
	if m.Container == "" {
		return id
	}
	return m.Container
}

// TestDesktopWarmPool: `deskgrid up -warm-desktops 2` keeps two desktops of
// the default image started; a create that fits is given one, whose very
// first screenshot shows the panel; concurrent creates never share one;
// the pool refills; a create with another display size or another image
// starts its own desktop; the members are removed at shutdown and after a
// crash.
func TestDesktopWarmPool(t *testing.T) {
	dataDir, runDir := t.TempDir(), t.TempDir()
	p := startUpOnDesktop(t, dataDir, runDir, "-warm-desktops", "2")
	root := filepath.Join(dataDir, "sandbox")
	h := sha256.Sum256([]byte(root))
	runcRoot := filepath.Join("/run/deskgrid/containers", hex.EncodeToString(h[:6]), "runc")
	waitWarmReady(t, p, 2)
	img := labels{"image": defaultImage}
	if m := p.scrape(); m.value("deskgrid_warm_desktops", img) != 2 ||
		len(m.labelValues("deskgrid_warm_desktop_claims_total", "outcome")) != 2 || m.value("deskgrid_warm_desktop_claims_total", nil) != 0 {
		t.Fatalf("with the pool full: %v warm desktops, claims by outcome %v (total %v); want 2, hit and miss at 0",
			m.value("deskgrid_warm_desktops", img), m.labelValues("deskgrid_warm_desktop_claims_total", "outcome"), m.value("deskgrid_warm_desktop_claims_total", nil))
	}

	// Given a warm desktop: the panel is on the first screenshot.
	a := p.createWith(`{}`)
	if c := containerOf(t, root, a.ID); !strings.HasPrefix(c, warmDesktopPrefix) {
		t.Fatalf("session %s was not given a warm desktop (container %s)\n%s", a.ID, c, p.logs)
	}
	if ok, desc := panelShown(p.screenshot(a.ID)); !ok {
		t.Fatalf("the first screenshot of a session from the pool shows no panel: %s", desc)
	}
	// The session is its own: its user, the image's programs, a home of its own.
	if out, code := p.execIn(a.ID, "sh", "-c", "id -u; which tint2; touch ~/mine; pgrep -c openbox"); code != 0 || !strings.HasPrefix(out, "1000\n/usr/bin/tint2\n") {
		t.Fatalf("in the session from the pool: %q (exit %d)", out, code)
	}

	// Concurrent creates: each gets a desktop of its own.
	var wg sync.WaitGroup
	got := make([]sessionJSON, 3)
	bodies := make([][]byte, 3)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, bodies[i], _ = p.do("POST", "/v1/sessions", `{"display":{"width":1280,"height":800}}`)
		}()
	}
	wg.Wait()
	for i, body := range bodies {
		if err := json.Unmarshal(body, &got[i]); err != nil || got[i].State != "SESSION_STATE_RUNNING" {
			t.Fatalf("concurrent create: %s (%v)\n%s", body, err, p.logs)
		}
	}
	all := append([]sessionJSON{a}, got...)
	displays, containers := map[string]string{}, map[string]string{}
	warm := 1
	for _, s := range all {
		c := containerOf(t, root, s.ID)
		if prev, ok := containers[c]; ok {
			t.Fatalf("sessions %s and %s share container %s", prev, s.ID, c)
		}
		containers[c] = s.ID
		if prev, ok := displays[s.XDisplay]; ok {
			t.Fatalf("sessions %s and %s share X display %s", prev, s.ID, s.XDisplay)
		}
		displays[s.XDisplay] = s.ID
		if s.ID != a.ID && strings.HasPrefix(c, warmDesktopPrefix) {
			warm++
		}
		// Another session's file is not there.
		if s.ID != a.ID {
			if out, code := p.execIn(s.ID, "sh", "-c", "ls ~"); code != 0 || strings.Contains(out, "mine") {
				t.Errorf("session %s sees another session's home: %q (exit %d)", s.ID, out, code)
			}
		}
	}
	if warm < 2 {
		t.Errorf("only %d of 4 creates were given a warm desktop, want at least 2 (the pool held 2)", warm)
	}

	// The pool refills: the next create that fits is given a desktop again.
	waitWarmReady(t, p, 2+warm)
	b := p.createWith(`{}`)
	if c := containerOf(t, root, b.ID); !strings.HasPrefix(c, warmDesktopPrefix) {
		t.Fatalf("after the refill, session %s was not given a warm desktop (container %s)", b.ID, c)
	}
	if ok, desc := panelShown(p.screenshot(b.ID)); !ok {
		t.Fatalf("the first screenshot of a session from the refilled pool shows no panel: %s", desc)
	}
	all = append(all, b)

	// Another display size, or another image, starts its own desktop.
	small := p.createWith(`{"display":{"width":640,"height":480}}`)
	if c := containerOf(t, root, small.ID); c != small.ID {
		t.Errorf("a 640x480 session was given a warm desktop of the default size (container %s)", c)
	}
	if code, out, _ := p.do("POST", "/v1/sessions/"+a.ID+":commit", `{"image":"team/warm:v1"}`); code != 200 {
		t.Fatalf("commit: %d %s", code, out)
	}
	other := p.createWith(`{"image":"team/warm:v1"}`)
	if c := containerOf(t, root, other.ID); c != other.ID {
		t.Errorf("a session of another image was given a warm desktop of the default image (container %s)", c)
	}
	if out, code := p.execIn(other.ID, "sh", "-c", "ls ~"); code != 0 || !strings.Contains(out, "mine") {
		t.Errorf("the session of the committed image: %q (exit %d)", out, code)
	}
	all = append(all, small, other)
	// Each create asked once: a hit for each desktop given, a miss for each
	// other create; the committed image is kept by no pool.
	m := p.scrape()
	if hits := m.value("deskgrid_warm_desktop_claims_total", labels{"image": defaultImage, "outcome": "hit"}); hits != float64(warm+1) {
		t.Errorf("warm desktop hits = %v, want %d", hits, warm+1)
	}
	if miss := m.value("deskgrid_warm_desktop_claims_total", labels{"image": defaultImage, "outcome": "miss"}); miss != float64(4-warm+1) {
		t.Errorf("warm desktop misses of the default image = %v, want %d", miss, 4-warm+1)
	}
	if miss := m.value("deskgrid_warm_desktop_claims_total", labels{"image": "other", "outcome": "miss"}); miss != 1 {
		t.Errorf("warm desktop misses of an image no pool keeps = %v, want 1", miss)
	}
	for _, s := range all {
		if code, out, _ := p.do("DELETE", "/v1/sessions/"+s.ID, ""); code != 200 {
			t.Fatalf("delete %s: %d %s", s.ID, code, out)
		}
	}

	waitNone := func(what string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			out := runcContainers(runcRoot)
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			dirs, _ := os.ReadDir(filepath.Join(root, "sandboxes"))
			if out == "" && !strings.Contains(string(mounts), root+"/sandboxes/") && len(dirs) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: containers %q, %d sandbox dirs, mounts under %s left", what, out, len(dirs), root)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Shutdown removes the members still in the pool.
	waitWarmReady(t, p, 3+warm)
	p.stop()
	waitNone("after shutdown")

	// A crash leaves members (ready or starting); the next start removes them.
	p = startUp(t, dataDir, runDir, "-default-image", defaultImage, "-warm-desktops", "1")
	waitWarmReady(t, p, 1)
	c := p.createWith(`{}`)
	if cn := containerOf(t, root, c.ID); !strings.HasPrefix(cn, warmDesktopPrefix) {
		t.Fatalf("session %s was not given a warm desktop (container %s)", c.ID, cn)
	}
	p.kill9()
	startUp(t, dataDir, runDir, "-default-image", defaultImage, "-warm-desktops", "0")
	waitNone("after a crash and a restart")
}

// TestWarmImagesFlag: -warm-images names pools as ref=count; what is not
// that is refused before anything starts, with a usage error (exit 2).
func TestWarmImagesFlag(t *testing.T) {
	got, err := warmImages(1, "deskgrid/desktop:latest", " team/qa:v3=2, registry.example:5000/x/y@sha256:"+strings.Repeat("a", 64)+"=1 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []warmImage{{"deskgrid/desktop:latest", 1}, {"team/qa:v3", 2}, {"registry.example:5000/x/y@sha256:" + strings.Repeat("a", 64), 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pools %v, want %v", got, want)
	}
	if got, err := warmImages(0, "deskgrid/desktop:latest", ""); err != nil || len(got) != 0 {
		t.Fatalf("-warm-desktops 0 and no -warm-images: %v %v", got, err)
	}
	for _, bad := range []string{"team/qa:v3", "team/qa:v3=0", "team/qa:v3=-1", "team/qa:v3=x", "team/qa:v3=65", "=2", "Bad Ref=1",
		"team/qa:v3=1,team/qa:v3=1", "docker.io/deskgrid/desktop:latest=1"} {
		_, _, err := parseServerFlags("up", []string{"-default-image", "deskgrid/desktop:latest", "-warm-images", bad}, io.Discard)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "-warm-images") {
			t.Errorf("-warm-images %q: %v (exit %d), want a usage error naming the flag", bad, err, exitCode(err))
		}
	}
}

// A miss is counted under the pool keeping the create's image (the same
// normalised ref),
// or "other": what a create names is never a label value.
func TestWarmDesktopImageLabel(t *testing.T) {
	ps := desktopPools{{image: "deskgrid/desktop:latest"}, {image: "team/qa:v3"}}
	for image, want := range map[string]string{
		"deskgrid/desktop:latest":           "deskgrid/desktop:latest",
		"docker.io/deskgrid/desktop:latest": "deskgrid/desktop:latest",
		"team/qa:v3":                        "team/qa:v3",
		"team/qa:v4":                        "other",
		"team/secret-name:v1":               "other",
		"Not A Ref":                         "other",
		"":                                  "other",
	} {
		if got := ps.imageLabel(image); got != want {
			t.Errorf("imageLabel(%q) = %q, want %q", image, got, want)
		}
	}
}

// TestDesktopWarmPoolPerImage: -warm-images keeps desktops of other images
// started too. A session's commit, made public, is kept warm after a
// restart: a create of it is given a started desktop holding what was
// committed, whose first screenshot shows the panel; the default image,
// with -warm-desktops 0, has no pool; nothing is left after shutdown.
func TestDesktopWarmPoolPerImage(t *testing.T) {
	dataDir, runDir := t.TempDir(), t.TempDir()
	p := startUpOnDesktop(t, dataDir, runDir, "-warm-desktops", "0")
	root := filepath.Join(dataDir, "sandbox")
	a := p.createWith(`{}`)
	if out, code := p.execIn(a.ID, "sh", "-c", "echo committed > ~/qa-marker"); code != 0 {
		t.Fatalf("write the marker: %q (exit %d)", out, code)
	}
	// The test image store is shared by every run: a name of this run's.
	ref := fmt.Sprintf("team/qa-%d:v1", time.Now().UnixNano())
	if code, out, _ := p.do("POST", "/v1/sessions/"+a.ID+":commit", `{"image":"`+ref+`"}`); code != 200 {
		t.Fatalf("commit: %d %s", code, out)
	}
	if code, out, _ := p.do("POST", "/v1/images:setPublic", `{"ref":"`+ref+`","public":true}`); code != 200 {
		t.Fatalf("make %s public: %d %s", ref, code, out)
	}
	p.deleteSession(t, a.ID)
	p.stop()

	t.Cleanup(func() {
		p := startUp(t, dataDir, runDir, "-default-image", defaultImage, "-warm-desktops", "0")
		if code, out, _ := p.do("DELETE", "/v1/images?ref="+ref, ""); code != 200 {
			t.Errorf("delete %s: %d %s", ref, code, out)
		}
		p.stop()
	})
	p = startUp(t, dataDir, runDir, "-default-image", defaultImage, "-warm-desktops", "0", "-warm-images", ref+"=1")
	waitWarmReady(t, p, 1)
	s := p.createWith(`{"image":"` + ref + `"}`)
	if c := containerOf(t, root, s.ID); !strings.HasPrefix(c, warmDesktopPrefix) {
		t.Fatalf("a session of %s was not given a warm desktop (container %s)\n%s", ref, c, p.logs)
	}
	if ok, desc := panelShown(p.screenshot(s.ID)); !ok {
		t.Fatalf("the first screenshot of a warm %s desktop shows no panel: %s", ref, desc)
	}
	if out, code := p.execIn(s.ID, "cat", "qa-marker"); code != 0 || strings.TrimSpace(out) != "committed" {
		t.Fatalf("the committed file in the warm desktop: %q (exit %d)", out, code)
	}
	d := p.createWith(`{}`)
	if c := containerOf(t, root, d.ID); c != d.ID {
		t.Errorf("a session of the default image was given a warm desktop with -warm-desktops 0 (container %s)", c)
	}
	p.deleteSession(t, s.ID)
	p.deleteSession(t, d.ID)
	// Shut down while the pool refills: the member being started is
	// removed too.
	p.stop()
	dirs, _ := os.ReadDir(filepath.Join(root, "sandboxes"))
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if len(dirs) != 0 || strings.Contains(string(mounts), root+"/sandboxes/") {
		var names []string
		for _, d := range dirs {
			names = append(names, d.Name())
		}
		t.Fatalf("after shutdown: sandboxes %v left (mounted: %v)\n%s", names, strings.Contains(string(mounts), root+"/sandboxes/"), p.logs)
	}
}
