package display

import (
	"context"
	"encoding/json"
	"errors"
	"image"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/platform/auth/authtest"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/platform/testkit"
	"github.com/deskgrid/deskgrid/services/platform/videostore"
)

// recorder is a display service that records, with the NATS it hands
// videos and events to.
type recorder struct {
	s      *Service
	c      displayv1.DisplayServiceClient
	js     jetstream.JetStream
	videos *videostore.Store
}

func newRecorder(t *testing.T, cfg Config) *recorder { return newRecorderCfg(t, cfg) }

func newRecorderB(b *testing.B) *recorder { return newRecorderCfg(b, Config{}) }

func newRecorderCfg(t testing.TB, cfg Config) *recorder {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("no ffmpeg: install Debian's (scripts/setup does)")
	}
	_, _, js := natstest.Start(t)
	ctx := ctxT(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig(1, 0)); err != nil {
		t.Fatal(err)
	}
	videos, err := videostore.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = t.TempDir()
	}
	s, c := testServiceConfig(t, cfg, Deps{Tenancy: authtest.Tenancy, Events: events.NewPublisher(js), Videos: videos})
	return &recorder{s: s, c: c, js: js, videos: videos}
}

// running is the recording of a session in progress, or nil.
func (r *recorder) running(sessionID string) *recording {
	r.s.recMu.Lock()
	defer r.s.recMu.Unlock()
	return r.s.recordings[sessionID]
}

// recordingEvents reads every recording event of a session published so far.
func (r *recorder) recordingEvents(t *testing.T, sessionID string) map[string][]*displayv1.Recording {
	t.Helper()
	ctx := ctxT(t)
	cons, err := r.js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.Subject(sessionID, "display.>")},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*displayv1.Recording{}
	batch, err := cons.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		_, ev, err := events.Decode(ctx, m.Data(), m.Headers())
		if err != nil {
			t.Fatal(err)
		}
		rec := &displayv1.Recording{}
		if err := ev.GetPayload().UnmarshalTo(rec); err != nil {
			t.Fatal(err)
		}
		out[ev.GetType()] = append(out[ev.GetType()], rec)
	}
	return out
}

// video copies a recording's video out of the object store into a file.
func (r *recorder) video(t *testing.T, rec *displayv1.Recording) string {
	t.Helper()
	if rec.GetObject() == "" {
		t.Fatalf("recording %s handed no video over: %v", rec.GetId(), rec)
	}
	rd, err := r.videos.Get(ctxT(t), rec.GetObject())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	path := filepath.Join(t.TempDir(), rec.GetId()+".video")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := io.Copy(f, rd)
	if err != nil {
		t.Fatal(err)
	}
	if n != rec.GetSizeBytes() {
		t.Fatalf("video of %d bytes, the recording says %d", n, rec.GetSizeBytes())
	}
	return path
}

// probe is what ffprobe says of a video's first stream.
type probe struct {
	Codec  string `json:"codec_name"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Frames string `json:"nb_read_frames"`
}

func ffprobe(t *testing.T, path string) probe {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=codec_name,width,height,nb_read_frames", "-of", "json", path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("ffprobe %s: %v: %s", path, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct{ Streams []probe }
	if err := json.Unmarshal(out, &res); err != nil || len(res.Streams) != 1 {
		t.Fatalf("ffprobe output %s: %v", out, err)
	}
	return res.Streams[0]
}

func (p probe) frames(t *testing.T) int {
	n, err := strconv.Atoi(p.Frames)
	if err != nil {
		t.Fatalf("ffprobe frames %q", p.Frames)
	}
	return n
}

// changeScreen draws n windows of changing colours, each after the
// recording took a frame of the one before.
func (r *recorder) changeScreen(t *testing.T, sessionID string, n int) {
	t.Helper()
	xc := clientConn(t, r.s, sessionID)
	rec := r.running(sessionID)
	for i := range n {
		before := rec.enc.Frames()
		showWindow(t, xc, 10+i*12, 10+i*8, 60, 40, uint32(0x203040+i*0x302010), 0)
		testkit.Eventually(t, 10*time.Second, func() bool { return rec.enc.Frames() > before }, "a frame of the change")
	}
}

func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// A recording of a screen that changes, stopped, is a valid video of the
// asked codec and size with a frame per change; its start and end are
// events, and ffmpeg is gone.
func TestRecordingMakesAValidVideo(t *testing.T) {
	r := newRecorder(t, Config{})
	for _, tc := range []struct {
		name   string
		format displayv1.RecordingFormat
		codec  string
		size   *displayv1.Size
		w, h   int
	}{
		{"mp4 at the screen's size", displayv1.RecordingFormat_RECORDING_FORMAT_UNSPECIFIED, "h264", nil, 320, 240},
		{"webm scaled", displayv1.RecordingFormat_RECORDING_FORMAT_WEBM, "vp9", &displayv1.Size{Width: 161, Height: 120}, 160, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sid := "rec-" + strings.ReplaceAll(strings.ToLower(tc.codec), " ", "-")
			createDisplay(t, r.c, sid, 320, 240)
			ctx := ctxT(t)
			start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid, Format: tc.format, Fps: 30, Size: tc.size})
			if err != nil {
				t.Fatal(err)
			}
			rec := start.GetRecording()
			if rec.GetState() != displayv1.RecordingState_RECORDING_STATE_RECORDING || int(rec.GetWidth()) != tc.w || int(rec.GetHeight()) != tc.h {
				t.Fatalf("started %v", rec)
			}
			pid := r.running(sid).enc.PID()
			r.changeScreen(t, sid, 4)
			stop, err := r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: rec.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			got := stop.GetRecording()
			if got.GetState() != displayv1.RecordingState_RECORDING_STATE_STOPPED || got.GetFrames() < 5 || got.GetSizeBytes() == 0 || got.GetEndTime() == nil {
				t.Fatalf("stopped %v", got)
			}
			if !processGone(pid) {
				t.Fatalf("ffmpeg (pid %d) still runs after the stop", pid)
			}
			p := ffprobe(t, r.video(t, got))
			// A frame per change; ffmpeg may drop one that comes within
			// its time base's tick of another.
			if p.Codec != tc.codec || p.Width != tc.w || p.Height != tc.h || p.frames(t) < 3 {
				t.Fatalf("video: %+v, want %s %dx%d with 3 frames or more", p, tc.codec, tc.w, tc.h)
			}
			evs := r.recordingEvents(t, sid)
			if len(evs[events.TypeRecordingStarted]) != 1 || len(evs[events.TypeRecordingStopped]) != 1 || len(evs[events.TypeRecordingFailed]) != 0 {
				t.Fatalf("events: %v", evs)
			}
			if e := evs[events.TypeRecordingStopped][0]; e.GetId() != rec.GetId() || e.GetObject() != got.GetObject() {
				t.Fatalf("stopped event %v, the stop returned %v", e, got)
			}
			// Stopped once is stopped: a second stop is refused.
			_, err = r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: rec.GetId()})
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("second stop: %v, want FailedPrecondition", err)
			}
		})
	}
}

// Deleting the display (the session's end) finalises its recording: the
// video holds what was recorded, the end is an event, ffmpeg is reaped.
func TestRecordingEndsWithTheDisplay(t *testing.T) {
	r := newRecorder(t, Config{})
	const sid = "rec-ends"
	createDisplay(t, r.c, sid, 320, 240)
	ctx := ctxT(t)
	start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid, Fps: 30})
	if err != nil {
		t.Fatal(err)
	}
	pid := r.running(sid).enc.PID()
	r.changeScreen(t, sid, 3)
	if _, err := r.c.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: sid}); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Fatalf("ffmpeg (pid %d) still runs after the display was deleted", pid)
	}
	evs := r.recordingEvents(t, sid)
	stopped := evs[events.TypeRecordingStopped]
	if len(stopped) != 1 || stopped[0].GetId() != start.GetRecording().GetId() {
		t.Fatalf("events after the delete: %v", evs)
	}
	if p := ffprobe(t, r.video(t, stopped[0])); p.Codec != "h264" || p.frames(t) < 4 {
		t.Fatalf("video: %+v", p)
	}
	if _, err := r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: start.GetRecording().GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("stop after the delete: %v, want NotFound", err)
	}
	if left, _ := os.ReadDir(r.s.cfg.RecordingDir); len(left) != 0 {
		t.Fatalf("files left in the recording dir: %v", left)
	}
}

// ffmpeg dying ends the recording as failed, with the reason, in an
// event; the session may record again.
func TestRecordingFailsWhenFFmpegDies(t *testing.T) {
	r := newRecorder(t, Config{})
	const sid = "rec-dies"
	createDisplay(t, r.c, sid, 320, 240)
	ctx := ctxT(t)
	start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid, Fps: 30})
	if err != nil {
		t.Fatal(err)
	}
	r.changeScreen(t, sid, 2)
	pid := r.running(sid).enc.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var failed []*displayv1.Recording
	testkit.Eventually(t, 10*time.Second, func() bool {
		failed = r.recordingEvents(t, sid)[events.TypeRecordingFailed]
		return len(failed) == 1
	}, "the failed event")
	if f := failed[0]; f.GetId() != start.GetRecording().GetId() || f.GetState() != displayv1.RecordingState_RECORDING_STATE_FAILED || !strings.Contains(f.GetFailureReason(), "ffmpeg") {
		t.Fatalf("failed event %v", f)
	}
	_, err = r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: start.GetRecording().GetId()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stop of a failed recording: %v, want FailedPrecondition", err)
	}
	again, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid})
	if err != nil {
		t.Fatalf("recording again after a failure: %v", err)
	}
	if _, err := r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: again.GetRecording().GetId()}); err != nil {
		t.Fatal(err)
	}
}

// A disk that fills up stops the recording as failed with the reason,
// in an event; the video up to then is kept.
func TestRecordingStopsOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	// 64 KiB: a few frames of a changing screen fill it.
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	r := newRecorder(t, Config{RecordingDir: dir, RecordingMinFree: 1})
	const sid = "rec-full"
	createDisplay(t, r.c, sid, 320, 240)
	ctx := ctxT(t)
	start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid, Fps: 30})
	if err != nil {
		t.Fatal(err)
	}
	rec := r.running(sid)
	pid := rec.enc.PID()
	xc := clientConn(t, r.s, sid)
	ended := func() bool {
		select {
		case <-rec.done:
			return true
		default:
			return false
		}
	}
	// A change a frame until the disk is full (a few seconds of video).
	for i := 0; !ended(); i++ {
		if i == 3000 {
			t.Fatal("the recording never failed on a full disk")
		}
		before := rec.enc.Frames()
		showWindow(t, xc, (i*37)%280, (i*53)%200, 40, 40, uint32(i*0x10101f), 0)
		testkit.Eventually(t, 10*time.Second, func() bool { return ended() || rec.enc.Frames() > before }, "a frame")
	}
	failed := r.recordingEvents(t, sid)[events.TypeRecordingFailed]
	if len(failed) != 1 {
		t.Fatalf("events: %v", r.recordingEvents(t, sid))
	}
	if f := failed[0]; f.GetId() != start.GetRecording().GetId() || !strings.Contains(strings.ToLower(f.GetFailureReason()), "space") && !strings.Contains(f.GetFailureReason(), "full") {
		t.Fatalf("failed event %v: want the full disk as the reason", f)
	}
	if !processGone(pid) {
		t.Fatalf("ffmpeg (pid %d) still runs", pid)
	}
	// Nothing can start on a disk that full.
	_, err = r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid})
	if c := status.Code(err); c != codes.ResourceExhausted && c != codes.OK {
		t.Fatalf("start on a full disk: %v", err)
	}
}

// Bad requests are refused with the right code and leave nothing running.
func TestRecordingBadInput(t *testing.T) {
	r := newRecorder(t, Config{})
	const sid = "rec-bad"
	if _, err := r.c.CreateDisplay(asTenant(t, "owner"), &displayv1.CreateDisplayRequest{SessionId: sid, Width: 320, Height: 240}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for _, tc := range []struct {
		name string
		req  *displayv1.StartRecordingRequest
		code codes.Code
	}{
		{"no session", &displayv1.StartRecordingRequest{}, codes.InvalidArgument},
		{"unknown session", &displayv1.StartRecordingRequest{SessionId: "no-such"}, codes.NotFound},
		{"fps too high", &displayv1.StartRecordingRequest{SessionId: sid, Fps: 31}, codes.InvalidArgument},
		{"fps negative", &displayv1.StartRecordingRequest{SessionId: sid, Fps: -1}, codes.InvalidArgument},
		{"too wide", &displayv1.StartRecordingRequest{SessionId: sid, Size: &displayv1.Size{Width: 1922, Height: 100}}, codes.InvalidArgument},
		{"too small", &displayv1.StartRecordingRequest{SessionId: sid, Size: &displayv1.Size{Width: 8, Height: 8}}, codes.InvalidArgument},
		{"half a size", &displayv1.StartRecordingRequest{SessionId: sid, Size: &displayv1.Size{Width: 100}}, codes.InvalidArgument},
		{"unknown format", &displayv1.StartRecordingRequest{SessionId: sid, Format: 9}, codes.InvalidArgument},
	} {
		if _, err := r.c.StartRecording(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	if rec := r.running(sid); rec != nil {
		t.Fatalf("a refused start left a recording: %v", rec.id)
	}
	start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	pid := r.running(sid).enc.PID()
	if _, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second recording: %v, want AlreadyExists", err)
	}
	for _, tc := range []struct {
		name string
		req  *displayv1.StopRecordingRequest
		code codes.Code
	}{
		{"bad id", &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: "../x"}, codes.InvalidArgument},
		{"unknown id", &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: "rec-unknown"}, codes.NotFound},
		{"other session", &displayv1.StopRecordingRequest{SessionId: "no-such", RecordingId: start.GetRecording().GetId()}, codes.NotFound},
	} {
		if _, err := r.c.StopRecording(ctx, tc.req); status.Code(err) != tc.code {
			t.Errorf("stop, %s: %v, want %v", tc.name, err, tc.code)
		}
	}
	// The second start and the bad stops left the first running.
	if rec := r.running(sid); rec == nil || rec.id != start.GetRecording().GetId() || processGone(pid) {
		t.Fatal("the recording did not survive bad requests")
	}
	// Another tenant finds no session to record.
	if _, err := r.c.StartRecording(asTenant(t, "other"), &displayv1.StartRecordingRequest{SessionId: sid}); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's start: %v, want NotFound", err)
	}
	if _, err := r.c.StopRecording(asTenant(t, "other"), &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: start.GetRecording().GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("another tenant's stop: %v, want NotFound", err)
	}
	if _, err := r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: start.GetRecording().GetId()}); err != nil {
		t.Fatal(err)
	}
	if !processGone(pid) {
		t.Fatalf("ffmpeg (pid %d) still runs", pid)
	}
}

// A node without an event bus refuses to record, clearly.
func TestRecordingNeedsTheEventBus(t *testing.T) {
	_, c := testService(t, "")
	createDisplay(t, c, "rec-nobus", 320, 240)
	_, err := c.StartRecording(ctxT(t), &displayv1.StartRecordingRequest{SessionId: "rec-nobus"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("start without NATS: %v, want Unavailable", err)
	}
}

var _ = context.Background

// A recording whose node process died is ended when the node starts again:
// its video so far handed over, and a failed event with the reason.
func TestRecordingLeftByADeadProcessIsEnded(t *testing.T) {
	r := newRecorder(t, Config{})
	const sid = "rec-orphan"
	if _, err := r.c.CreateDisplay(asTenant(t, "owner"), &displayv1.CreateDisplayRequest{SessionId: sid, Width: 320, Height: 240}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid, Fps: 30})
	if err != nil {
		t.Fatal(err)
	}
	rec := r.running(sid)
	// Changes for more than a second: ffmpeg has written a fragment.
	xc := clientConn(t, r.s, sid)
	i := 0
	testkit.Eventually(t, 20*time.Second, func() bool {
		i++
		showWindow(t, xc, (i*37)%280, (i*53)%200, 40, 40, uint32(i*0x10101f), 0)
		info, err := os.Stat(rec.path)
		return err == nil && info.Size() > 4096
	}, "a fragment of video on disk")
	// What the process's death leaves: ffmpeg killed, the files on disk.
	// (The recording goroutine here is stopped from handing them over by
	// taking them away first.)
	path := rec.path
	saved := filepath.Join(t.TempDir(), "saved")
	if err := os.MkdirAll(saved, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + metaExt} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(saved, filepath.Base(p)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	syscall.Kill(rec.enc.PID(), syscall.SIGKILL)
	<-rec.done
	// Put back as a dead process would have left them.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + metaExt} {
		b, _ := os.ReadFile(filepath.Join(saved, filepath.Base(p)))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before := len(r.recordingEvents(t, sid)[events.TypeRecordingFailed])
	n, err := r.s.RecoverRecordings(ctx)
	if err != nil || n != 1 {
		t.Fatalf("recovered %d: %v", n, err)
	}
	failed := r.recordingEvents(t, sid)[events.TypeRecordingFailed]
	if len(failed) != before+1 {
		t.Fatalf("failed events: %v", failed)
	}
	f := failed[len(failed)-1]
	if f.GetId() != start.GetRecording().GetId() || !strings.Contains(f.GetFailureReason(), "process ended") {
		t.Fatalf("failed event %v", f)
	}
	if p := ffprobe(t, r.video(t, f)); p.Codec != "h264" || p.frames(t) < 1 {
		t.Fatalf("recovered video: %+v", p)
	}
	if _, err := os.Stat(path + metaExt); !os.IsNotExist(err) {
		t.Fatalf("the meta file is still there: %v", err)
	}
}

// The recording's frames show the pointer, which X keeps outside the
// framebuffer: each opaque pixel of the cursor image is in the frame where
// the pointer is, and moving the pointer moves it.
func TestRecordingDrawsThePointer(t *testing.T) {
	r := newRecorder(t, Config{})
	const sid = "rec-pointer"
	createDisplay(t, r.c, sid, 320, 240)
	ctx := ctxT(t)
	start, err := r.c.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: sid})
	if err != nil {
		t.Fatal(err)
	}
	d := r.running(sid).d
	if !d.cursorOK {
		t.Skip("the X server has no XFIXES")
	}
	for _, at := range []image.Point{{100, 100}, {200, 50}} {
		act(r.c, t, sid, moveTo(int32(at.X), int32(at.Y)))
		d.shotMu.Lock()
		cur, err := capture.CursorOf(d.conn)
		bgrx := d.screen.BGRX()
		d.shotMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if hot := cur.Pos.Add(image.Pt(cur.Image.Rect.Dx(), cur.Image.Rect.Dy())); !at.In(image.Rectangle{Min: cur.Pos, Max: hot}) {
			t.Fatalf("cursor image at %v-%v, the pointer at %v", cur.Pos, hot, at)
		}
		buf := make([]byte, 4*320*240)
		if err := r.s.grabInto(d, buf, 320, 240); err != nil {
			t.Fatal(err)
		}
		opaque := 0
		for y := range cur.Image.Rect.Dy() {
			for x := range cur.Image.Rect.Dx() {
				p := cur.Image.Pix[y*cur.Image.Stride+4*x:]
				if p[3] != 255 {
					continue
				}
				opaque++
				fx, fy := cur.Pos.X+x, cur.Pos.Y+y
				want := [3]byte{p[0], p[1], p[2]}
				if bgrx {
					want = [3]byte{p[2], p[1], p[0]}
				}
				if got := buf[4*(fy*320+fx):][:3]; [3]byte(got) != want {
					t.Fatalf("frame pixel %d,%d = %v, the cursor's is %v", fx, fy, got, want)
				}
			}
		}
		if opaque == 0 {
			t.Fatalf("the cursor image has no opaque pixel: %v", cur.Image.Rect)
		}
	}
	if _, err := r.c.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: sid, RecordingId: start.GetRecording().GetId()}); err != nil {
		t.Fatal(err)
	}
}
