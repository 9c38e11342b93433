package agent

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// recordingStopTimeout bounds how long a run's end waits for its video to
// be finalised.
const recordingStopTimeout = 30 * time.Second

// startRecording starts recording the run's session, for options.record,
// and puts the recording's id on the run. An error is the run's failure:
// the caller asked for a video and would not get one.
func (r *run) startRecording(ctx context.Context) error {
	resp, err := r.svc.deps.Display.StartRecording(ctx, &displayv1.StartRecordingRequest{SessionId: r.rec.GetSessionId()})
	if err != nil {
		return fmt.Errorf("cannot record the run (options.record): %s", status.Convert(err).Message())
	}
	id := resp.GetRecording().GetId()
	r.mu.Lock()
	r.recording = id
	r.rec.RecordingId = id
	r.rec.UpdateTime = timestamppb.Now()
	rec := proto.Clone(r.rec).(*agentv1.Run)
	r.mu.Unlock()
	r.save(ctx, rec)
	return nil
}

// stopRecording stops the run's recording, if it has one still going, so
// the video is finalised before the run is seen to end. A recording that
// already ended by itself (its session ended, ffmpeg failed) is no error
// for the run; the recording's own state says why.
func (r *run) stopRecording(ctx context.Context) {
	r.mu.Lock()
	id := r.recording
	r.recording = ""
	r.mu.Unlock()
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordingStopTimeout)
	defer cancel()
	if _, err := r.svc.deps.Display.StopRecording(ctx, &displayv1.StopRecordingRequest{SessionId: r.rec.GetSessionId(), RecordingId: id}); err != nil {
		r.svc.logger.Info("stop run recording", "run", r.id, "recording", id, "err", err)
	}
}
