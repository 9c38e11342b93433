package deskgrid_test

import (
	"bytes"
	"errors"
	"os/exec"
	"testing"

	"google.golang.org/grpc/codes"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// A recording of a real session through the SDK: started, refused twice,
// stopped once the window manager has drawn, downloaded as a WebM video of
// the size asked for, and listed.
func TestRecording(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("no ffmpeg: scripts/setup installs it")
	}
	_, ctx, s := openboxSession(t)
	code := func(err error) codes.Code {
		var e *deskgrid.Error
		if errors.As(err, &e) {
			return e.Code
		}
		return codes.Unknown
	}
	if _, err := s.StartRecording(ctx, deskgrid.RecordingOptions{FPS: 31}); code(err) != codes.InvalidArgument {
		t.Fatalf("fps 31: %v", err)
	}
	rec, err := s.StartRecording(ctx, deskgrid.RecordingOptions{Format: displayv1.RecordingFormat_RECORDING_FORMAT_WEBM, FPS: 10, Width: 400, Height: 300})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartRecording(ctx, deskgrid.RecordingOptions{}); code(err) != codes.AlreadyExists {
		t.Fatalf("second start: %v", err)
	}
	// The screen changes: the session's screen is resized, and back.
	if _, err := s.Resize(ctx, 640, 480); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resize(ctx, 800, 600); err != nil {
		t.Fatal(err)
	}
	done, err := s.StopRecording(ctx, rec.GetId())
	if err != nil || done.GetState() != displayv1.RecordingState_RECORDING_STATE_STOPPED || !done.GetDownloadReady() {
		t.Fatalf("stop: %v, %v", done, err)
	}
	var video bytes.Buffer
	ct, err := s.DownloadRecording(ctx, rec.GetId(), &video)
	if err != nil || ct != "video/webm" || int64(video.Len()) != done.GetSizeBytes() || !bytes.HasPrefix(video.Bytes(), []byte{0x1a, 0x45, 0xdf, 0xa3}) {
		t.Fatalf("download: %q, %d bytes (%d listed), %v", ct, video.Len(), done.GetSizeBytes(), err)
	}
	list, err := s.Recordings(ctx)
	if err != nil || len(list) != 1 || list[0].GetId() != rec.GetId() || list[0].GetWidth() != 400 {
		t.Fatalf("list: %v, %v", list, err)
	}
}
