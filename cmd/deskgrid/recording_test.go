package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskgrid/deskgrid/services/platform/testkit"
)

type recordingJSON struct {
	ID            string `json:"id"`
	State         string `json:"state"`
	Frames        string `json:"frames"`
	Width         int    `json:"width"`
	Height        int    `json:"height"`
	DownloadReady bool   `json:"downloadReady"`
}

// download fetches a recording's video over REST: status, content type, body.
func (a *authedUp) download(key, session, id string) (int, string, []byte) {
	a.t.Helper()
	req, err := http.NewRequest("GET", a.httpURL+"/v1/sessions/"+session+"/recordings/"+id+":download", nil)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// ffmpegsUnder lists the ffmpeg processes writing under dir.
func ffmpegsUnder(t *testing.T, dir string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.HasPrefix(cmd, "ffmpeg ") && strings.Contains(cmd, dir) {
			out = append(out, cmd)
		}
	}
	return out
}

// A session's screen recorded through the REST API while a window comes
// and goes: the video downloads as itself, is valid H.264 of the screen's
// size with several frames, and no other tenant can start, list, stop or
// download it. Deleting the session finalises a recording in progress and
// leaves no ffmpeg behind.
func TestRecordingEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("no ffmpeg: scripts/setup installs it")
	}
	a := startAuthedUp(t)
	victim := a.admin
	sid := a.create(victim)
	a.cli("tenants", "create", "mallory")
	attacker := a.cli("keys", "create", "-tenant", "mallory", "-scopes", "read,write")
	const ghost = "s-aaaaaaaaaaaaaaaaaaaa"

	code, body := a.call(victim, "POST", "/v1/sessions/"+sid+"/recordings", `{"fps":10}`)
	var started struct{ Recording recordingJSON }
	if err := json.Unmarshal(body, &started); code != 200 || err != nil || started.Recording.State != "RECORDING_STATE_RECORDING" {
		t.Fatalf("start: %d %s", code, body)
	}
	rec := started.Recording
	if code, body := a.call(victim, "POST", "/v1/sessions/"+sid+"/recordings", `{}`); code != http.StatusConflict {
		t.Fatalf("a second recording: %d %s, want 409", code, body)
	}
	for _, bad := range []string{`{"fps":31}`, `{"size":{"width":4000,"height":100}}`} {
		if code, body := a.call(victim, "POST", "/v1/sessions/"+sid+"/recordings", bad); code != http.StatusBadRequest {
			t.Fatalf("start %s: %d %s, want 400", bad, code, body)
		}
	}
	// Something happens on screen: a window opens, then closes.
	if code, body := a.call(victim, "POST", "/v1/sessions/"+sid+":exec", `{"argv":["timeout","2","xmessage","-geometry","300x100+50+50","recorded"]}`); code != 200 {
		t.Fatalf("exec: %d %s", code, body)
	}
	// Another tenant finds nothing to record, stop, list or download.
	for _, at := range []struct{ method, path, body string }{
		{"POST", "/v1/sessions/%s/recordings", `{}`},
		{"POST", "/v1/sessions/%s/recordings/" + rec.ID + ":stop", `{}`},
		{"GET", "/v1/sessions/%s/recordings", ""},
		{"GET", "/v1/sessions/%s/recordings/" + rec.ID, ""},
	} {
		code, body := a.call(attacker, at.method, strings.Replace(at.path, "%s", sid, 1), at.body)
		gcode, _ := a.call(attacker, at.method, strings.Replace(at.path, "%s", ghost, 1), at.body)
		if code != gcode || code != http.StatusNotFound {
			t.Errorf("%s %s as another tenant: %d %s (a missing session: %d)", at.method, at.path, code, body, gcode)
		}
	}
	code, body = a.call(victim, "POST", "/v1/sessions/"+sid+"/recordings/"+rec.ID+":stop", `{}`)
	var stopped struct{ Recording recordingJSON }
	if err := json.Unmarshal(body, &stopped); code != 200 || err != nil || stopped.Recording.State != "RECORDING_STATE_STOPPED" {
		t.Fatalf("stop: %d %s", code, body)
	}
	var video []byte
	var ctype string
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, ctype, video = a.download(victim, sid, rec.ID)
		return code == 200
	}, "the video stored")
	if ctype != "video/mp4" {
		t.Fatalf("content type %q", ctype)
	}
	if code, _, _ := a.download(attacker, sid, rec.ID); code != http.StatusNotFound {
		t.Fatalf("another tenant's download: %d", code)
	}
	path := filepath.Join(t.TempDir(), "screen.mp4")
	if err := os.WriteFile(path, video, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames", "-of", "csv=p=0", path).CombinedOutput()
	f := strings.Split(strings.TrimSpace(string(out)), ",")
	if err != nil || len(f) != 4 || f[0] != "h264" || f[1] != "640" || f[2] != "480" {
		t.Fatalf("ffprobe: %v %s", err, out)
	}
	if n, _ := strconv.Atoi(f[3]); n < 2 {
		t.Fatalf("the video has %d frames", n)
	}
	code, body = a.call(victim, "GET", "/v1/sessions/"+sid+"/recordings", "")
	if code != 200 || !strings.Contains(string(body), rec.ID) || !strings.Contains(string(body), `"downloadReady":true`) {
		t.Fatalf("list: %d %s", code, body)
	}

	// Deleting the session ends a recording in progress with a whole video.
	code, body = a.call(victim, "POST", "/v1/sessions/"+sid+"/recordings", `{"format":"RECORDING_FORMAT_WEBM"}`)
	if err := json.Unmarshal(body, &started); code != 200 || err != nil {
		t.Fatalf("second start: %d %s", code, body)
	}
	if len(ffmpegsUnder(t, a.dataDir)) != 1 {
		t.Fatalf("ffmpeg processes while recording: %v", ffmpegsUnder(t, a.dataDir))
	}
	if code, body := a.call(victim, "DELETE", "/v1/sessions/"+sid, ""); code != 200 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if left := ffmpegsUnder(t, a.dataDir); len(left) != 0 {
		t.Fatalf("ffmpeg left after the session's delete: %v", left)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, ctype, video = a.download(victim, sid, started.Recording.ID)
		return code == 200
	}, "the second video stored")
	if ctype != "video/webm" || len(video) == 0 {
		t.Fatalf("second video: %q, %d bytes", ctype, len(video))
	}
}
