package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// onDisplay lists the host's processes whose environment names the X
// display (every program a session's desktop starts inherits DISPLAY).
func onDisplay(t *testing.T, display string) []int {
	t.Helper()
	want := []byte("\x00DISPLAY=" + display + "\x00")
	entries, _ := filepath.Glob("/proc/[0-9]*/environ")
	var pids []int
	for _, f := range entries {
		env, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if bytes.Contains(append([]byte{0}, env...), want) {
			pid, _ := strconv.Atoi(strings.Split(f, "/")[2])
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostProcessOnScreen names a process on the display that runs in the
// host's own user or pid namespace, or as host root: what a program
// reachable from the session's screen must never be.
func hostProcessOnScreen(t *testing.T, display string) (string, bool) {
	t.Helper()
	hostUser, _ := os.Readlink("/proc/self/ns/user")
	hostPid, _ := os.Readlink("/proc/self/ns/pid")
	for _, pid := range onDisplay(t, display) {
		p := fmt.Sprintf("/proc/%d", pid)
		user, err1 := os.Readlink(p + "/ns/user")
		pidns, err2 := os.Readlink(p + "/ns/pid")
		status, err3 := os.ReadFile(p + "/status")
		if err1 != nil || err2 != nil || err3 != nil {
			continue // gone meanwhile
		}
		comm, _ := os.ReadFile(p + "/comm")
		name := fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm)))
		if user == hostUser {
			return name + " runs in the host's user namespace", true
		}
		if pidns == hostPid {
			return name + " runs in the host's pid namespace", true
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "Uid:" && f[2] == "0" {
				return name + " runs as host root", true
			}
		}
	}
	return "", false
}

type windowJSON struct {
	ID      uint32 `json:"id"`
	Class   string `json:"class"`
	Title   string `json:"title"`
	Focused bool   `json:"focused"`
}

func (p *upProcess) windows(id string) []windowJSON {
	p.t.Helper()
	code, body, _ := p.do("GET", "/v1/sessions/"+id+"/windows", "")
	var r struct {
		Windows []windowJSON `json:"windows"`
	}
	if code != 200 || json.Unmarshal(body, &r) != nil {
		p.t.Fatalf("windows: %d %s", code, body)
	}
	return r.Windows
}

// Every entry of the desktop's menu, opened from the session's screen with
// input through the API, starts its program inside the session: none of
// them is a host process, and the terminal it opens cannot read the node's
// keys. (A window manager once ran on the host, where its menu's terminal
// was a root shell on the node.)
func TestEndToEndDesktopMenuNeverReachesTheHost(t *testing.T) {
	dataDir := t.TempDir()
	p := startUpOnDesktop(t, dataDir, t.TempDir())
	s := p.createSession(1024, 768)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, desc := panelShown(p.screenshot(s.ID))
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the desktop's panel never showed: %s", desc)
		}
		time.Sleep(500 * time.Millisecond)
	}
	act := func(actions string) {
		t.Helper()
		code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/actions", `{"actions":[`+actions+`]}`)
		if code != 200 {
			t.Fatalf("actions %s: %d %s", actions, code, body)
		}
	}
	check := func(after string) {
		t.Helper()
		if what, bad := hostProcessOnScreen(t, s.XDisplay); bad {
			t.Fatalf("after %s: %s", after, what)
		}
	}
	check("create")
	started, opened := 0, map[string]bool{}
	if len(onDisplay(t, s.XDisplay)) == 0 {
		t.Fatalf("no process of the desktop found on %s", s.XDisplay)
	}
	// First the terminal (the menu's third entry), told to read the node's admin key.
	act(`{"key":{"chord":"Escape"}},{"click":{"at":{"x":900,"y":300},"button":"MOUSE_BUTTON_RIGHT","clicks":1}},{"wait":{"duration":"0.4s"}},` +
		`{"key":{"chord":"Down"}},{"key":{"chord":"Down"}},{"key":{"chord":"Down"}},{"key":{"chord":"Return"}}`)
	var term windowJSON
	deadline = time.Now().Add(60 * time.Second)
	for term.ID == 0 {
		for _, w := range p.windows(s.ID) {
			if strings.EqualFold(w.Class, "lxterminal") {
				term = w
			}
		}
		if term.ID == 0 {
			if time.Now().After(deadline) {
				_, shot, _ := p.do("GET", "/v1/sessions/"+s.ID+"/screenshot", "")
				_ = os.WriteFile(filepath.Join(os.TempDir(), "deskgrid-menu-failure.png"), shot, 0o644)
				_, o, _ := p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["sh","-c","timeout 5 lxterminal 2>&1; echo rc=$?"]}`)
				t.Logf("lxterminal run by exec: %s", execStdout(o))
				t.Fatalf("no terminal window from the menu (screen in %s): %v", filepath.Join(os.TempDir(), "deskgrid-menu-failure.png"), p.windows(s.ID))
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	if code, body, _ := p.do("POST", fmt.Sprintf("/v1/sessions/%s/windows/%d:activate", s.ID, term.ID), "{}"); code != 200 {
		t.Fatalf("activate the terminal: %d %s", code, body)
	}
	keyFile := filepath.Join(dataDir, adminKeyFile)
	cmd := fmt.Sprintf("id > ~/menu-terminal.txt; cat %s >> ~/menu-terminal.txt 2>&1; echo done >> ~/menu-terminal.txt\n", keyFile)
	act(`{"type":{"text":` + jsonString(cmd) + `}},{"wait":{"duration":"1s"}}`)
	var out string
	deadline = time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["sh","-c","cat ~/menu-terminal.txt"]}`)
		if code == 200 {
			out = execStdout(body)
			if strings.Contains(out, "done") {
				break
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if !strings.Contains(out, "done") {
		t.Fatalf("the menu's terminal did not run the typed command; it wrote %q\n%s", out, p.logs)
	}
	admin, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, strings.TrimSpace(string(admin))) {
		t.Fatalf("the menu's terminal read the node's admin key:\n%s", out)
	}
	check("the terminal's command")

	// The desktop's root menu, entry by entry: right-click on the
	// background, walk down to the entry, start it. Windows still open
	// (the terminal above) go first, so each entry is credited only with
	// what it opened and the right-click lands on the desktop.
	closeAll := func(k int, record bool) bool {
		any := false
		for _, w := range p.windows(s.ID) {
			if !strings.EqualFold(w.Class, "tint2") {
				any = true
				if record {
					started++
					opened[strings.ToLower(w.Class)] = true
					t.Logf("menu entry %d opened %s", k, w.Class)
				}
				p.do("POST", fmt.Sprintf("/v1/sessions/%s/windows/%d:close", s.ID, w.ID), `{"force":true}`)
			}
		}
		return any
	}
	closeAll(0, false)
	const entries = 7
	for k := 1; k <= entries; k++ {
		// A loaded machine may draw the menu late, and keys sent before it
		// is open go nowhere: an entry that opened nothing is tried again,
		// waiting longer for the menu, as a person would.
		for attempt := 1; attempt <= 3; attempt++ {
			act(fmt.Sprintf(`{"key":{"chord":"Escape"}},{"click":{"at":{"x":900,"y":300},"button":"MOUSE_BUTTON_RIGHT","clicks":1}},{"wait":{"duration":"%.1fs"}}`, 0.4*float64(attempt*attempt)))
			var keys []string
			for range k {
				keys = append(keys, `{"key":{"chord":"Down"}}`)
			}
			act(strings.Join(keys, ",") + `,{"key":{"chord":"Return"}},{"wait":{"duration":"1s"}}`)
			check(fmt.Sprintf("menu entry %d", k))
			got := false
			for end := time.Now().Add(time.Duration(attempt) * 2 * time.Second); !got && time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
				got = closeAll(k, true)
			}
			if got {
				break
			}
		}
	}
	if started < 3 || !opened["chromium"] {
		t.Fatalf("the menu's entries opened %d windows (%v); want Chromium, the terminal, the file manager...", started, opened)
	}

	// The terminal the menu opened (entry 3), told to read the node's admin key.
}

// execStdout joins the stdout chunks of a streamed :exec answer (JSON lines).
func execStdout(body []byte) string {
	var out strings.Builder
	for _, line := range bytes.Split(body, []byte("\n")) {
		var r struct {
			Result struct {
				Stdout []byte `json:"stdout"`
			} `json:"result"`
		}
		if json.Unmarshal(line, &r) == nil {
			out.Write(r.Result.Stdout)
		}
	}
	return out.String()
}
