package mcpserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/sdk/deskgridtest"
	"github.com/deskgrid/deskgrid/sdk/mcpserver"
)

// start_run with record records the run: its result names the recording,
// which the session's recordings list and which has stopped once the run
// has ended; without record a run names none.
func TestStartRunRecords(t *testing.T) {
	model := deskgridtest.DoneModel(t)
	_, c, cs := inMemory(t, "-anthropic-api-key", "sk-test", "-anthropic-base-url", model.URL)
	ctx := context.Background()

	res := call(t, cs, "create_session", map[string]any{"width": 640, "height": 480})
	s := structured[mcpserver.SessionInfo](t, res)
	if res.IsError || s.ID == "" {
		t.Fatalf("create_session: %v", textOf(res))
	}
	type started struct {
		RunID       string `json:"run_id"`
		State       string `json:"state"`
		RecordingID string `json:"recording_id"`
	}
	res = call(t, cs, "start_run", map[string]any{"session_id": s.ID, "prompt": "say done", "provider": "anthropic", "record": true, "accessibility_tree": true})
	run := structured[started](t, res)
	if res.IsError || run.RunID == "" || !strings.HasPrefix(run.RecordingID, "rec-") {
		t.Fatalf("start_run with record: %+v %v", run, textOf(res))
	}
	// The run ends (the model is done at once) and its recording with it.
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := c.Runs.Get(ctx, run.RunID)
		if err != nil {
			t.Fatal(err)
		}
		if r.GetRecordingId() != run.RecordingID {
			t.Fatalf("the run names recording %q, start_run said %q", r.GetRecordingId(), run.RecordingID)
		}
		if st := r.GetState().String(); st == "RUN_STATE_SUCCEEDED" {
			break
		} else if st == "RUN_STATE_FAILED" || st == "RUN_STATE_CANCELLED" {
			t.Fatalf("the recorded run ended %s: %s", st, r.GetStateReason())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recorded run is still %s", r.GetState())
		}
		time.Sleep(100 * time.Millisecond) // polled: the run's loop runs on its own
	}
	var recs []mcpserver.RecordingInfo
	deadline = time.Now().Add(30 * time.Second)
	for {
		res = call(t, cs, "list_recordings", map[string]any{"session_id": s.ID})
		recs = structured[struct {
			Recordings []mcpserver.RecordingInfo `json:"recordings"`
		}](t, res).Recordings
		if !res.IsError && len(recs) == 1 && recs[0].ID == run.RecordingID && recs[0].State == "stopped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list_recordings after the recorded run: %+v %v", recs, textOf(res))
		}
		time.Sleep(100 * time.Millisecond) // polled: history stores the stop as it hears of it
	}

	res = call(t, cs, "start_run", map[string]any{"session_id": s.ID, "prompt": "say done", "provider": "anthropic"})
	if run := structured[started](t, res); res.IsError || run.RunID == "" || run.RecordingID != "" {
		t.Fatalf("start_run without record: %+v %v", run, textOf(res))
	}
}
