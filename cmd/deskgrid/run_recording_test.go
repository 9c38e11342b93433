package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

// fakeAnthropicTool is a provider speaking Anthropic's wire format whose
// model runs one bash command and then says it is done.
func fakeAnthropicTool(t *testing.T, command string) *httptest.Server {
	var turns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		turn := turns.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name string, data any) {
			b, _ := json.Marshal(data)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		}
		ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": fmt.Sprintf("msg_%d", turn), "type": "message", "role": "assistant", "model": "claude-test", "content": []any{}, "usage": map[string]any{"input_tokens": 10, "output_tokens": 1}}})
		stop := "end_turn"
		if turn == 1 {
			stop = "tool_use"
			input, _ := json.Marshal(map[string]string{"command": command})
			ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": map[string]any{}}})
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
		} else {
			ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "Done."}})
		}
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop}, "usage": map[string]any{"output_tokens": 2}})
		ev("message_stop", map[string]any{"type": "message_stop"})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A run created with `deskgrid runs create -record` records its session
// while it runs: the run names the recording, which has stopped by the
// time the run has ended, and its video downloads as valid H.264 of the
// screen with the window the model opened.
func TestEndToEndRecordedRun(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("no ffmpeg: scripts/setup installs it")
	}
	model := fakeAnthropicTool(t, "timeout 2 xmessage -geometry 300x100+50+50 recorded; true")
	p := startUp(t, t.TempDir(), t.TempDir(), "-anthropic-api-key", "sk-test", "-anthropic-base-url", model.URL)
	defer p.stop()
	s := p.createSession(640, 480)
	cmd := exec.Command(deskgridBinary(t), "runs", "create", s.ID, "-prompt", "show a window", "-record", "-o", "json")
	cmd.Env = append(os.Environ(), "DESKGRID_ADDR="+p.grpc, "DESKGRID_DATA_DIR="+p.dataDir)
	out, err := cmd.CombinedOutput()
	var created struct {
		ID string `json:"id"`
	}
	if err != nil || json.Unmarshal(out, &created) != nil || created.ID == "" {
		t.Fatalf("runs create -record: %v\n%s", err, out)
	}
	var run struct {
		State, StateReason, RecordingID string
	}
	testkit.Eventually(t, 60*time.Second, func() bool {
		code, body, _ := p.do("GET", "/v1/runs/"+created.ID, "")
		var r struct {
			State       string `json:"state"`
			StateReason string `json:"stateReason"`
			RecordingID string `json:"recordingId"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &r) != nil {
			t.Fatalf("get run: %d %s", code, body)
		}
		run.State, run.StateReason, run.RecordingID = r.State, r.StateReason, r.RecordingID
		return r.State != "RUN_STATE_QUEUED" && r.State != "RUN_STATE_RUNNING"
	}, "the run's end")
	if run.State != "RUN_STATE_SUCCEEDED" || !strings.HasPrefix(run.RecordingID, "rec-") {
		t.Fatalf("run: %+v\n%s", run, p.logs)
	}
	var video []byte
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, v, ct := p.downloadRecording(s.ID, run.RecordingID)
		video = v
		return code == http.StatusOK && ct == "video/mp4"
	}, "the run's video stored")
	// The history holds it as stopped, not failed, by the run's end.
	code, body, _ := p.do("GET", "/v1/sessions/"+s.ID+"/recordings/"+run.RecordingID, "")
	var got struct{ Recording recordingJSON }
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil || got.Recording.State != "RECORDING_STATE_STOPPED" {
		t.Fatalf("the run's recording after the run: %d %s", code, body)
	}
	path := filepath.Join(t.TempDir(), "run.mp4")
	if err := os.WriteFile(path, video, 0o600); err != nil {
		t.Fatal(err)
	}
	probe, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames", "-of", "csv=p=0", path).CombinedOutput()
	f := strings.Split(strings.TrimSpace(string(probe)), ",")
	if err != nil || len(f) != 4 || f[0] != "h264" || f[1] != "640" || f[2] != "480" {
		t.Fatalf("ffprobe: %v %s", err, probe)
	}
	// The window coming and going is in it.
	if n, _ := strconv.Atoi(f[3]); n < 2 {
		t.Fatalf("the run's video has %d frames", n)
	}
}

// downloadRecording fetches a recording's video: status, body, content type.
func (p *upProcess) downloadRecording(session, id string) (int, []byte, string) {
	code, body, h := p.do("GET", "/v1/sessions/"+session+"/recordings/"+id+":download", "")
	return code, body, h.Get("Content-Type")
}
