package deskgrid

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
)

// RecordingOptions tune StartRecording; the zero value records MP4 (H.264)
// at most 5 frames a second at the screen's size (fitted in 1920x1920).
type RecordingOptions struct {
	// Format is RECORDING_FORMAT_MP4 or RECORDING_FORMAT_WEBM (VP9).
	Format displayv1.RecordingFormat
	// FPS is the most frames a second, 1-30; frames are taken only when
	// the screen changes.
	FPS int
	// Width and Height size the video, each 16-1920; both 0 keep the
	// screen's.
	Width, Height int
}

// StartRecording starts recording the session's screen to a video. A
// session records one video at a time.
func (s *Session) StartRecording(ctx context.Context, o RecordingOptions) (*displayv1.Recording, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &displayv1.StartRecordingRequest{SessionId: s.GetId(), Format: o.Format, Fps: int32(o.FPS)}
	if o.Width != 0 || o.Height != 0 {
		req.Size = &displayv1.Size{Width: int32(o.Width), Height: int32(o.Height)}
	}
	resp, err := s.c.display.StartRecording(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRecording(), nil
}

// StopRecording ends a recording and finalises its video, and returns once
// the history keeps it (DownloadRecording finds it then), as the history
// describes it.
func (s *Session) StopRecording(ctx context.Context, recordingID string) (*displayv1.Recording, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.display.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: s.GetId(), RecordingId: recordingID})
	if err != nil {
		return nil, wrap(err)
	}
	// The node has published the end; the history stores it moments later.
	for {
		r, err := s.c.history.GetRecording(ctx, &historyv1.GetRecordingRequest{SessionId: s.GetId(), RecordingId: recordingID})
		if err == nil && r.GetRecording().GetState() != displayv1.RecordingState_RECORDING_STATE_RECORDING {
			return r.GetRecording(), nil
		}
		if err != nil && status.Code(err) != codes.NotFound {
			return nil, wrap(err)
		}
		select {
		case <-ctx.Done():
			// The video is finalised; only the history's copy is late.
			return resp.GetRecording(), nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Recordings lists the session's recordings, newest first.
func (s *Session) Recordings(ctx context.Context) ([]*displayv1.Recording, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.history.ListRecordings(ctx, &historyv1.ListRecordingsRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRecordings(), nil
}

// Recording describes one of the session's recordings.
func (s *Session) Recording(ctx context.Context, recordingID string) (*displayv1.Recording, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.history.GetRecording(ctx, &historyv1.GetRecordingRequest{SessionId: s.GetId(), RecordingId: recordingID})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRecording(), nil
}

// DownloadRecording writes a recording's video to w and returns its content
// type ("video/mp4" or "video/webm"). A video stopped moments ago that the
// history has not stored yet is waited for while ctx lasts (without a
// deadline, a minute); ctx bounds the whole download.
func (s *Session) DownloadRecording(ctx context.Context, recordingID string, w io.Writer) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	for {
		st, err := s.c.history.DownloadRecording(ctx, &historyv1.DownloadRecordingRequest{SessionId: s.GetId(), RecordingId: recordingID})
		if err != nil {
			return "", wrap(err)
		}
		first, err := st.Recv()
		if err != nil {
			var e *Error
			if errors.As(wrap(err), &e) && e.Code == codes.FailedPrecondition && strings.Contains(e.Message, "not stored yet") {
				select {
				case <-ctx.Done():
					return "", wrap(err)
				case <-time.After(200 * time.Millisecond):
					continue
				}
			}
			return "", wrap(err)
		}
		var n int64
		for m := first; ; {
			k, err := w.Write(m.GetChunk())
			n += int64(k)
			if err != nil {
				return "", err
			}
			if m, err = st.Recv(); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return "", wrap(err)
			}
		}
		if n != first.GetSizeBytes() {
			return "", fmt.Errorf("deskgrid: download of %s cut short at %d of %d bytes", recordingID, n, first.GetSizeBytes())
		}
		return first.GetContentType(), nil
	}
}
