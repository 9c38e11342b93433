package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

type sseEvent struct {
	ID, Type, Data string
	Comment        bool
}

// sseReader parses a text/event-stream as the HTML standard says.
type sseReader struct {
	r *bufio.Reader
}

func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.Comment || ev.Type != "" || data != nil {
				ev.Data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			ev.Comment = true
		default:
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				ev.ID = v
			case "event":
				ev.Type = v
			case "data":
				data = append(data, v)
			}
		}
	}
}

// nextEvent skips heartbeats and returns the next named event, after
// checking that its unnamed twin (what an onmessage handler receives)
// follows with the same id and data.
func (s *sseReader) nextEvent(t *testing.T) sseEvent {
	t.Helper()
	named := s.nextAny(t)
	if named.Type == "" {
		t.Fatalf("event without a type where a named one was due: %+v", named)
	}
	twin := s.nextAny(t)
	if twin.Type != "" || twin.ID != named.ID || twin.Data != named.Data {
		t.Fatalf("event %+v is followed by %+v, not by the same as a message", named, twin)
	}
	return named
}

// nextAny returns the next event, named or not, skipping heartbeats.
func (s *sseReader) nextAny(t *testing.T) sseEvent {
	t.Helper()
	for {
		ev, err := s.next()
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		if !ev.Comment {
			return ev
		}
	}
}

func openSSE(t *testing.T, url string, hdr map[string]string) (*http.Response, *sseReader) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, &sseReader{r: bufio.NewReader(resp.Body)}
}

// manualRun is a run whose events the test appends.
func manualRun(h *harness, id string, events ...*agentv1.RunEvent) {
	h.agent.addRun(&agentv1.Run{Id: id, SessionId: "s-1", State: agentv1.RunState_RUN_STATE_RUNNING})
	for _, ev := range events {
		h.agent.emit(id, ev)
	}
}

func text(s string) *agentv1.RunEvent {
	return &agentv1.RunEvent{Event: &agentv1.RunEvent_TextDelta{TextDelta: s}}
}

func finished() *agentv1.RunEvent {
	return &agentv1.RunEvent{Event: &agentv1.RunEvent_State{State: agentv1.RunState_RUN_STATE_SUCCEEDED}, Reason: "end_turn"}
}

func TestRunEventsAsSSE(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	manualRun(h, "r-done", text("one"), text("two\nlines"),
		&agentv1.RunEvent{Event: &agentv1.RunEvent_ToolCall{ToolCall: &agentv1.ToolCall{Id: "c1", Tool: "bash", InputJson: `{"command":"ls"}`}}},
		finished())

	resp, sse := openSSE(t, h.srv.URL+"/v1/runs/r-done/events", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("%d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
	}
	want := []struct{ id, typ, contains string }{
		{"1", "text_delta", `"textDelta":"one"`},
		{"2", "text_delta", `"textDelta":"two\nlines"`},
		{"3", "tool_call", `"tool":"bash"`},
		{"4", "state", `"state":"RUN_STATE_SUCCEEDED"`},
		{"", "end", `{"code":0,"message":""}`},
	}
	for _, w := range want {
		ev := sse.nextEvent(t)
		if ev.ID != w.id || ev.Type != w.typ || !strings.Contains(ev.Data, w.contains) {
			t.Fatalf("got %+v, want id %s type %s with %s", ev, w.id, w.typ, w.contains)
		}
		if w.typ != "end" {
			var m struct {
				Event struct {
					Sequence string `json:"sequence"`
					RunID    string `json:"runId"`
				} `json:"event"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &m); err != nil || m.Event.Sequence != w.id || m.Event.RunID != "r-done" {
				t.Fatalf("data %s: %v", ev.Data, err)
			}
		}
	}
	if _, err := sse.next(); err != io.EOF {
		t.Fatalf("after end: %v", err)
	}

	t.Run("resume", func(t *testing.T) {
		for _, hdr := range []map[string]string{{"Last-Event-ID": "2"}} {
			_, sse := openSSE(t, h.srv.URL+"/v1/runs/r-done/events", hdr)
			if ev := sse.nextEvent(t); ev.ID != "3" {
				t.Fatalf("resumed at %+v", ev)
			}
		}
		_, sse := openSSE(t, h.srv.URL+"/v1/runs/r-done/events?after_sequence=3", nil)
		if ev := sse.nextEvent(t); ev.ID != "4" {
			t.Fatalf("after_sequence=3 started at %+v", ev)
		}
		// The header a reconnecting EventSource sends wins over the URL it reuses.
		_, sse = openSSE(t, h.srv.URL+"/v1/runs/r-done/events?after_sequence=1", map[string]string{"Last-Event-ID": "3"})
		if ev := sse.nextEvent(t); ev.ID != "4" {
			t.Fatalf("Last-Event-ID 3 started at %+v", ev)
		}
	})

	t.Run("refusals are HTTP errors", func(t *testing.T) {
		tests := []struct {
			path, lastID string
			want         int
			msg          string
		}{
			{"/v1/runs/r-nope/events", "", 404, "run r-nope not found"},
			{"/v1/runs/r-done/events", "x", 400, "Last-Event-ID must be a non-negative integer"},
			{"/v1/runs/r-done/events?after_sequence=-1", "", 400, "after_sequence must be a non-negative integer"},
			{"/v1/sessions/s-nope:watch", "", 404, "session s-nope not found"},
		}
		for _, tt := range tests {
			hdr := map[string]string{}
			if tt.lastID != "" {
				hdr["Last-Event-ID"] = tt.lastID
			}
			resp, _ := openSSE(t, h.srv.URL+tt.path, hdr)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !strings.Contains(string(b), tt.msg) {
				t.Errorf("%s: %d %q %s", tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
		}
	})

	t.Run("other clients keep newline-delimited JSON", func(t *testing.T) {
		resp, body := get(t, h.srv.URL+"/v1/runs/r-done/events?after_sequence=2", "application/json")
		lines := strings.Split(strings.TrimSpace(body), "\n")
		if resp.StatusCode != 200 || len(lines) != 2 || !strings.Contains(lines[0], `"result":{"event":{"sequence":"3"`) {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	})
}

// A live run: heartbeats while nothing happens, each event as it comes.
// An EventSource's onmessage handler sees only events without a type (or
// typed "message"): it must see every event of a run, the end included.
func TestRunEventsSSEReachOnmessage(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	manualRun(h, "r-msg", text("a"), text("b"), finished())
	_, sse := openSSE(t, h.srv.URL+"/v1/runs/r-msg/events", nil)
	var messages []sseEvent
	for len(messages) < 4 {
		if ev := sse.nextAny(t); ev.Type == "" || ev.Type == "message" {
			messages = append(messages, ev)
		}
	}
	for i, want := range []string{`"textDelta":"a"`, `"textDelta":"b"`, "RUN_STATE_SUCCEEDED", `"code":0`} {
		if !strings.Contains(messages[i].Data, want) {
			t.Errorf("message %d = %+v, want it to hold %s", i, messages[i], want)
		}
	}
}

func TestRunEventsSSELive(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SSEHeartbeat = 20 * time.Millisecond
	h := newHarness(t, cfg, Deps{})
	manualRun(h, "r-live")
	resp, sse := openSSE(t, h.srv.URL+"/v1/runs/r-live/events", nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	for range 2 {
		if ev, err := sse.next(); err != nil || !ev.Comment {
			t.Fatalf("want a heartbeat, got %+v %v", ev, err)
		}
	}
	for i := 1; i <= 3; i++ {
		h.agent.emit("r-live", text(strconv.Itoa(i)))
		if ev := sse.nextEvent(t); ev.ID != strconv.Itoa(i) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	h.agent.emit("r-live", finished())
	if ev := sse.nextEvent(t); ev.Type != "state" {
		t.Fatalf("%+v", ev)
	}
	if ev := sse.nextEvent(t); ev.Type != "end" {
		t.Fatalf("%+v", ev)
	}
}

// A client that stops reading holds the run's stream back; it never piles up
// in the gateway. The bound allows for socket buffers and gRPC's windows.
func TestRunEventsSSEBackpressure(t *testing.T) {
	const n, size, bound = 6000, 4 << 10, 16 << 20 // 24 MiB of events
	h := newHarness(t, DefaultConfig(), Deps{})
	manualRun(h, "r-big")
	payload := strings.Repeat("x", size)
	for range n {
		h.agent.emit("r-big", text(payload))
	}
	h.agent.emit("r-big", finished())
	resp, sse := openSSE(t, h.srv.URL+"/v1/runs/r-big/events", nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	held := settle(t, h.agent.sentBytes.Load)
	if held >= bound {
		t.Fatalf("the run sent %d MiB to a client that read nothing", held>>20)
	}
	for i := 1; i <= n; i++ {
		if ev := sse.nextEvent(t); ev.ID != strconv.Itoa(i) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	t.Logf("held back at %d MiB of %d", held>>20, n*size>>20)
}

func TestWatchSessionAsSSE(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	_, sse := openSSE(t, h.srv.URL+"/v1/sessions/s-1:watch", nil)
	ev := sse.nextEvent(t)
	if ev.ID != "1" || ev.Type != "session" || !strings.Contains(ev.Data, `"state":"SESSION_STATE_RUNNING"`) {
		t.Fatalf("%+v", ev)
	}
	h.sessions.setState("s-1", sessionv1.SessionState_SESSION_STATE_SUSPENDED)
	if ev := sse.nextEvent(t); ev.ID != "2" || !strings.Contains(ev.Data, "SUSPENDED") {
		t.Fatalf("%+v", ev)
	}

	// A reconnecting client does not get the generation it has again.
	_, again := openSSE(t, h.srv.URL+"/v1/sessions/s-1:watch", map[string]string{"Last-Event-ID": "2"})
	h.sessions.setState("s-1", sessionv1.SessionState_SESSION_STATE_RUNNING)
	if ev := again.nextEvent(t); ev.ID != "3" {
		t.Fatalf("resumed with %+v", ev)
	}
	if ev := sse.nextEvent(t); ev.ID != "3" {
		t.Fatalf("%+v", ev)
	}

	if _, err := h.sessions.DeleteSession(context.Background(), &sessionv1.DeleteSessionRequest{SessionId: "s-1"}); err != nil {
		t.Fatal(err)
	}
	if ev := sse.nextEvent(t); !strings.Contains(ev.Data, "SESSION_STATE_STOPPED") {
		t.Fatalf("%+v", ev)
	}
	if ev := sse.nextEvent(t); ev.Type != "end" || ev.Data != `{"code":0,"message":""}` {
		t.Fatalf("%+v", ev)
	}
}

// Closing the gateway ends its event streams (so the HTTP server's Shutdown
// can finish), without the end event: the client reconnects elsewhere.
func TestCloseEndsEventStreams(t *testing.T) {
	h := newHarness(t, DefaultConfig(), Deps{})
	manualRun(h, "r-open", text("hi"))
	_, sse := openSSE(t, h.srv.URL+"/v1/runs/r-open/events", nil)
	if ev := sse.nextEvent(t); ev.ID != "1" {
		t.Fatalf("%+v", ev)
	}
	if err := h.gw.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := sse.next()
		if err != nil {
			break
		}
		if ev.Type == "end" {
			t.Fatalf("an end event on shutdown: %+v", ev)
		}
	}
	resp, _ := openSSE(t, h.srv.URL+"/v1/runs/r-open/events", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream opened after Close: %d", resp.StatusCode)
	}
}

// A client that stops reading for the write timeout is dropped, which frees
// the run's stream; it resumes later from its Last-Event-ID.
func TestRunEventsSSEDropsAStalledClient(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SSEWriteTimeout = 200 * time.Millisecond
	h := newHarness(t, cfg, Deps{})
	manualRun(h, "r-big")
	payload := strings.Repeat("x", 4<<10)
	for range 6000 {
		h.agent.emit("r-big", text(payload))
	}
	resp, sse := openSSE(t, h.srv.URL+"/v1/runs/r-big/events", nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	testkit.Eventually(t, 20*time.Second, func() bool { return h.agent.streamsEnded.Load() == 1 }, "the stalled stream to be dropped")
	// What was sent before the drop still arrives, in order, then the end.
	last := 0
	for {
		ev, err := sse.next()
		if err != nil {
			break
		}
		if ev.Comment || ev.Type == "" {
			continue // a heartbeat, or an event's unnamed twin
		}
		if n, _ := strconv.Atoi(ev.ID); n != last+1 {
			t.Fatalf("event %s after %d", ev.ID, last)
		}
		last++
	}
	if last == 0 || last >= 6000 {
		t.Fatalf("read %d events before the drop", last)
	}
	_, again := openSSE(t, h.srv.URL+"/v1/runs/r-big/events", map[string]string{"Last-Event-ID": strconv.Itoa(last)})
	if ev := again.nextEvent(t); ev.ID != strconv.Itoa(last+1) {
		t.Fatalf("resumed at %+v", ev)
	}
}

// BenchmarkRunEventsSSE is events from a run's stream to an SSE client
// through the gateway.
func BenchmarkRunEventsSSE(b *testing.B) {
	const n = 20000
	h := newHarness(b, DefaultConfig(), Deps{})
	h.agent.addRun(&agentv1.Run{Id: "r-bench", SessionId: "s-1"})
	for i := range n {
		h.agent.emit("r-bench", text("delta "+strconv.Itoa(i)))
	}
	h.agent.emit("r-bench", finished())
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("GET", h.srv.URL+"/v1/runs/r-bench/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		sse := &sseReader{r: bufio.NewReader(resp.Body)}
		got := 0
		for {
			ev, err := sse.next()
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == "end" {
				break
			}
			got++
		}
		resp.Body.Close()
		if got != n+1 {
			b.Fatalf("%d events", got)
		}
	}
	b.ReportMetric(float64(n+1)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
