package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// A session's autostart programs run on its desktop; it can be frozen and
// thawed, and hibernated (files kept, desktop and memory freed) and resumed.
func TestEndToEndAutostartSuspendResume(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	code, body, _ := p.do("POST", "/v1/sessions", `{"display":{"width":640,"height":480},"autostart":["sleep 1000"]}`)
	var s sessionJSON
	if err := json.Unmarshal(body, &s); err != nil || code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body, _ := p.do("GET", "/v1/sessions/"+s.ID+"/processes", ""); code != 200 || !strings.Contains(string(body), "sleep 1000") {
		t.Fatalf("autostart program not running: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+"/files:write", `{"path":"keep.txt","content":"`+b64("kept")+`"}`); code != 200 {
		t.Fatalf("write: %d %s", code, body)
	}

	state := func(body []byte) string {
		var ss sessionJSON
		_ = json.Unmarshal(body, &ss)
		return ss.State
	}
	// Freeze: commands wait for the thaw.
	code, body, _ = p.do("POST", "/v1/sessions/"+s.ID+":suspend", `{"mode":"SUSPEND_MODE_FREEZE"}`)
	if code != 200 || state(body) != "SESSION_STATE_SUSPENDED" {
		t.Fatalf("freeze: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["true"]}`); code == 200 && !strings.Contains(string(body), "frozen") {
		t.Fatalf("exec in a frozen session: %d %s", code, body)
	}
	code, body, _ = p.do("POST", "/v1/sessions/"+s.ID+":resume", `{}`)
	if code != 200 || state(body) != "SESSION_STATE_RUNNING" {
		t.Fatalf("thaw: %d %s", code, body)
	}
	if code, body, _ := p.do("POST", "/v1/sessions/"+s.ID+":exec", `{"argv":["cat","keep.txt"]}`); code != 200 || !strings.Contains(string(body), b64("kept")) {
		t.Fatalf("exec after thaw: %d %s", code, body)
	}

	// Hibernate: the desktop goes, the files stay.
	ino := socketInode(t, s.XDisplay)
	code, body, _ = p.do("POST", "/v1/sessions/"+s.ID+":suspend", `{"mode":"SUSPEND_MODE_HIBERNATE"}`)
	if code != 200 || state(body) != "SESSION_STATE_SUSPENDED" || !strings.Contains(string(body), "snapshotId") {
		t.Fatalf("hibernate: %d %s", code, body)
	}
	if !socketGone(s.XDisplay, ino) {
		t.Fatal("a hibernated session's X server still runs")
	}
	if code, _, _ := p.do("GET", "/v1/sessions/"+s.ID+"/screenshot", ""); code == 200 {
		t.Fatal("a hibernated session answered a screenshot")
	}
	code, body, _ = p.do("POST", "/v1/sessions/"+s.ID+":resume", `{}`)
	if code != 200 || state(body) != "SESSION_STATE_RUNNING" {
		t.Fatalf("resume: %d %s", code, body)
	}
	p.screenshot(s.ID)
	if code, body, _ := p.do("GET", "/v1/sessions/"+s.ID+"/files:read?path=keep.txt", ""); code != 200 || !strings.Contains(string(body), b64("kept")) {
		t.Fatalf("files after hibernation: %d %s", code, body)
	}
	if code, body, _ := p.do("GET", "/v1/sessions/"+s.ID+"/processes", ""); code != 200 || !strings.Contains(string(body), "sleep 1000") {
		t.Fatalf("autostart program not restarted after hibernation: %d %s", code, body)
	}
}
