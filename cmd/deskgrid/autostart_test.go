package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An autostart program that ends at once leaves a trace: its exit code and
// last output lines are in the session's history (a
// "session.process_exited.v1" event), in its process list and in
// deskgrid's log; one that keeps running is listed as running.
func TestEndToEndAutostartExitsAreRecorded(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	defer p.stop()
	s := p.createWith(`{"display":{"width":320,"height":240},"autostart":[` +
		`"echo starting up; echo 'No usable sandbox!' >&2; exit 3",` +
		`"sleep 600"]}`)

	got := p.waitHistory(s.ID, "session.process_exited.v1")
	code, body, _ := p.do("GET", "/v1/sessions/"+s.ID+"/history?page_size=1000", "")
	if code != http.StatusOK {
		t.Fatalf("history: %d %s", code, body)
	}
	var hist struct {
		Entries []struct {
			Type string `json:"type"`
			Data struct {
				Command    string `json:"command"`
				ExitCode   int    `json:"exitCode"`
				OutputTail string `json:"outputTail"`
			} `json:"data"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(body, &hist); err != nil {
		t.Fatal(err)
	}
	exits := 0
	for _, e := range hist.Entries {
		if e.Type != "session.process_exited.v1" {
			continue
		}
		exits++
		if e.Data.ExitCode != 3 || !strings.HasPrefix(e.Data.Command, "echo starting up") ||
			e.Data.OutputTail != "starting up\nNo usable sandbox!\n" {
			t.Fatalf("the exit in the history: %+v", e.Data)
		}
	}
	if exits != 1 {
		t.Fatalf("%d exits in the history, want 1: %v", exits, got)
	}

	// The process list says it too, and the one still running is there.
	code, body, _ = p.do("GET", "/v1/sessions/"+s.ID+"/processes", "")
	if code != http.StatusOK || !strings.Contains(string(body), `"outputTail":"starting up\nNo usable sandbox!\n"`) ||
		!strings.Contains(string(body), `"PROCESS_STATE_RUNNING"`) {
		t.Fatalf("processes: %d %s", code, body)
	}
	// And deskgrid's log.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.logs.String(), "autostart program exited") || !strings.Contains(p.logs.String(), "No usable sandbox!") {
		if time.Now().After(deadline) {
			t.Fatalf("no autostart exit in the log:\n%s", p.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
