package mcpserver

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// addRecordingTools registers the screen recording tools. Videos are
// never returned as bytes: download_recording names the REST path the
// gateway serves the video at, for the host (or its user) to fetch with
// the same key.
func addRecordingTools(s *mcp.Server, t *tools) {
	addTool(s, t, &mcp.Tool{Name: "start_recording", Description: "Start recording a session's screen to a video (mp4, the default, or webm; at most fps frames a second, 1-30, default 5, taken only when the screen changes). One recording at a time per session. Returns the recording."}, t.startRecording)
	addTool(s, t, &mcp.Tool{Name: "stop_recording", Description: "Stop a session's recording and finalise its video; returns the recording once deskgrid keeps it."}, t.stopRecording)
	addTool(s, t, &mcp.Tool{Name: "list_recordings", Description: "List a session's recordings, newest first: id, state, size, frames, whether the video can be downloaded and its REST path."}, t.listRecordings)
	addTool(s, t, &mcp.Tool{Name: "download_recording", Description: "Say where a recording's video can be downloaded: the REST path on the deskgrid gateway (GET it with the same API key as a bearer token), its content type and size. The video itself is not returned."}, t.downloadRecording)
}

// RecordingInfo is what the tools say about a recording.
type RecordingInfo struct {
	ID            string `json:"id"`
	SessionID     string `json:"session_id"`
	State         string `json:"state"`
	Format        string `json:"format"`
	FPS           int32  `json:"fps"`
	Width         int32  `json:"width"`
	Height        int32  `json:"height"`
	Frames        int64  `json:"frames"`
	SizeBytes     int64  `json:"size_bytes,omitempty"`
	StartTime     string `json:"start_time,omitempty"`
	EndTime       string `json:"end_time,omitempty"`
	FailureReason string `json:"failure_reason,omitempty"`
	ContentType   string `json:"content_type,omitempty"`
	DownloadReady bool   `json:"download_ready"`
	// DownloadPath is the gateway's REST path of the video.
	DownloadPath string `json:"download_path"`
}

// downloadPath is the REST path the gateway serves a recording's video at.
func downloadPath(sessionID, recordingID string) string {
	return "/v1/sessions/" + url.PathEscape(sessionID) + "/recordings/" + url.PathEscape(recordingID) + ":download"
}

func recordingInfo(r *displayv1.Recording) RecordingInfo {
	ri := RecordingInfo{
		ID: r.GetId(), SessionID: r.GetSessionId(),
		State:  strings.ToLower(strings.TrimPrefix(r.GetState().String(), "RECORDING_STATE_")),
		Format: strings.ToLower(strings.TrimPrefix(r.GetFormat().String(), "RECORDING_FORMAT_")),
		FPS:    r.GetFps(), Width: r.GetWidth(), Height: r.GetHeight(), Frames: r.GetFrames(), SizeBytes: r.GetSizeBytes(),
		FailureReason: r.GetFailureReason(), ContentType: r.GetContentType(), DownloadReady: r.GetDownloadReady(),
		DownloadPath: downloadPath(r.GetSessionId(), r.GetId()),
	}
	if r.GetFormat() == displayv1.RecordingFormat_RECORDING_FORMAT_UNSPECIFIED {
		ri.Format = "mp4"
	}
	if r.GetStartTime() != nil {
		ri.StartTime = r.GetStartTime().AsTime().Format(time.RFC3339)
	}
	if r.GetEndTime() != nil {
		ri.EndTime = r.GetEndTime().AsTime().Format(time.RFC3339)
	}
	return ri
}

type startRecordingIn struct {
	SessionID string `json:"session_id"`
	Format    string `json:"format,omitempty" jsonschema:"mp4 (H.264, default) or webm (VP9)"`
	FPS       int    `json:"fps,omitempty" jsonschema:"most frames a second, 1-30 (default 5)"`
}

func (t *tools) startRecording(ctx context.Context, _ *mcp.CallToolRequest, in startRecordingIn) (*mcp.CallToolResult, RecordingInfo, error) {
	var f displayv1.RecordingFormat
	switch in.Format {
	case "", "mp4":
		f = displayv1.RecordingFormat_RECORDING_FORMAT_MP4
	case "webm":
		f = displayv1.RecordingFormat_RECORDING_FORMAT_WEBM
	default:
		return nil, RecordingInfo{}, fmt.Errorf("format %q: want mp4 or webm", in.Format)
	}
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	r, err := s.StartRecording(ctx, deskgrid.RecordingOptions{Format: f, FPS: in.FPS})
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	return nil, recordingInfo(r), nil
}

type recordingIn struct {
	SessionID   string `json:"session_id"`
	RecordingID string `json:"recording_id" jsonschema:"the recording's id (rec-...)"`
}

func (t *tools) stopRecording(ctx context.Context, _ *mcp.CallToolRequest, in recordingIn) (*mcp.CallToolResult, RecordingInfo, error) {
	if in.RecordingID == "" {
		return nil, RecordingInfo{}, fmt.Errorf("recording_id is required")
	}
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	r, err := s.StopRecording(ctx, in.RecordingID)
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	return nil, recordingInfo(r), nil
}

type recordingsOut struct {
	Recordings []RecordingInfo `json:"recordings"`
}

func (t *tools) listRecordings(ctx context.Context, _ *mcp.CallToolRequest, in sessionIn) (*mcp.CallToolResult, recordingsOut, error) {
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, recordingsOut{}, err
	}
	rs, err := s.Recordings(ctx)
	if err != nil {
		return nil, recordingsOut{}, err
	}
	out := recordingsOut{Recordings: []RecordingInfo{}}
	for _, r := range rs {
		out.Recordings = append(out.Recordings, recordingInfo(r))
	}
	return nil, out, nil
}

func (t *tools) downloadRecording(ctx context.Context, _ *mcp.CallToolRequest, in recordingIn) (*mcp.CallToolResult, RecordingInfo, error) {
	if in.RecordingID == "" {
		return nil, RecordingInfo{}, fmt.Errorf("recording_id is required")
	}
	s, err := t.session(ctx, in.SessionID)
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	r, err := s.Recording(ctx, in.RecordingID)
	if err != nil {
		return nil, RecordingInfo{}, err
	}
	if !r.GetDownloadReady() {
		return nil, RecordingInfo{}, fmt.Errorf("recording %s is %s and its video is not stored yet; stop it, or try again in a moment", in.RecordingID, recordingInfo(r).State)
	}
	return nil, recordingInfo(r), nil
}
