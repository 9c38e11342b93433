package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
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

// A session's watch carries the end of an autostart program as it happens,
// as an event of its own over server-sent events (and as a message of the
// newline-delimited JSON stream), among the session's changes.
func TestEndToEndWatchCarriesProcessExits(t *testing.T) {
	p := startUp(t, t.TempDir(), t.TempDir())
	defer p.stop()
	s := p.createWith(`{"display":{"width":320,"height":240},"autostart":[` +
		`"while [ ! -e \"$HOME/exit-now\" ]; do sleep 0.1; done; echo leaving; exit 5"]}`)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	open := func(accept string) *bufio.Reader {
		req, _ := http.NewRequestWithContext(ctx, "GET", p.httpURL+"/v1/sessions/"+s.ID+":watch", nil)
		req.Header.Set("Authorization", "Bearer "+p.key)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("watch (%s): %d %s", accept, resp.StatusCode, b)
		}
		return bufio.NewReader(resp.Body)
	}
	sse, ndjson := open("text/event-stream"), open("application/json")
	// Each stream has sent the session as it is now before the program is
	// told to end, so neither subscribed after the end.
	line, err := sse.ReadString('\n')
	for err == nil && !strings.HasPrefix(line, "data:") {
		line, err = sse.ReadString('\n')
	}
	if err != nil || !strings.Contains(line, `"SESSION_STATE_RUNNING"`) {
		t.Fatalf("first SSE data: %q, %v", line, err)
	}
	if first, err := ndjson.ReadString('\n'); err != nil || !strings.Contains(first, `"SESSION_STATE_RUNNING"`) {
		t.Fatalf("first watch line: %q, %v", first, err)
	}
	if out, code := p.execIn(s.ID, "sh", "-c", `touch "$HOME/exit-now"`); code != 0 {
		t.Fatalf("touch: %d %s", code, out)
	}

	type exit struct {
		ProcessExited *struct {
			ProcessID  string `json:"processId"`
			Command    string `json:"command"`
			ExitCode   int    `json:"exitCode"`
			OutputTail string `json:"outputTail"`
			Time       string `json:"time"`
		} `json:"processExited"`
		Session *sessionJSON `json:"session"`
	}
	check := func(how, data string) {
		var e exit
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("%s: %q: %v", how, data, err)
		}
		pe := e.ProcessExited
		if e.Session != nil || pe.ExitCode != 5 || pe.OutputTail != "leaving\n" || !strings.HasPrefix(pe.Command, "while") || pe.ProcessID == "" || pe.Time == "" {
			t.Fatalf("%s: the exit is %s", how, data)
		}
	}
	// Server-sent events: named process_exited, then again unnamed.
	var event string
	named, unnamed := false, false
	for !named || !unnamed {
		line, err := sse.ReadString('\n')
		if err != nil {
			t.Fatalf("SSE ended before the exit (named %v, unnamed %v): %v", named, unnamed, err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			event = ""
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:") && strings.Contains(line, "processExited"):
			check("SSE", strings.TrimSpace(strings.TrimPrefix(line, "data:")))
			switch event {
			case "process_exited":
				named = true
			case "":
				unnamed = true
			default:
				t.Fatalf("an exit named %q", event)
			}
		}
	}
	for {
		line, err := ndjson.ReadString('\n')
		if err != nil {
			t.Fatalf("the watch ended before the exit: %v", err)
		}
		if strings.Contains(line, "processExited") {
			var m struct {
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			check("JSON stream", string(m.Result))
			break
		}
	}
}
