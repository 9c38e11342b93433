package history

import (
	"context"
	"errors"
	"io"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/store"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// downloadChunk is the size of one DownloadRecording message.
const downloadChunk = 256 << 10

// recordingTypes are the events a recording is told by.
var recordingTypes = []string{events.TypeRecordingStarted, events.TypeRecordingStopped, events.TypeRecordingFailed}

// sessionRecordings folds a session's recording events into recordings,
// newest first. The events are the caller's tenant's only; a session with
// no entry of that tenant is NotFound.
func (s *Service) sessionRecordings(ctx context.Context, sessionID string) ([]*displayv1.Recording, error) {
	if err := checkID("session_id", sessionID); err != nil {
		return nil, err
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]*displayv1.Recording{}
	q := store.Query{SessionID: sessionID, Tenant: tenant, Types: recordingTypes, PageSize: store.MaxPageSize}
	for {
		entries, next, err := s.store.List(ctx, q)
		if err != nil {
			return nil, s.storeError(ctx, err, "listing recordings")
		}
		for _, e := range entries {
			r := decodeRecording(e.Data)
			if r == nil || r.GetId() == "" {
				continue
			}
			if e.Type == events.TypeRecordingStarted {
				if _, ok := byID[r.GetId()]; !ok {
					byID[r.GetId()] = r
				}
				continue
			}
			r.BlobHash = e.BlobHash
			r.DownloadReady = e.BlobHash != ""
			byID[r.GetId()] = r
		}
		if next == "" {
			break
		}
		q.PageToken = next
	}
	out := make([]*displayv1.Recording, 0, len(byID))
	for _, r := range byID {
		// The node's hand-over name means nothing to a caller.
		r.Object = ""
		r.SessionId = sessionID
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].GetStartTime().AsTime(), out[j].GetStartTime().AsTime()
		if !a.Equal(b) {
			return a.After(b)
		}
		return out[i].GetId() > out[j].GetId()
	})
	return out, nil
}

// decodeRecording reads a recording event's payload as stored (protojson
// of an Any), or nil.
func decodeRecording(data string) *displayv1.Recording {
	var a anypb.Any
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(data), &a); err != nil {
		return nil
	}
	r := &displayv1.Recording{}
	if err := a.UnmarshalTo(r); err != nil {
		return nil
	}
	return r
}

// ListRecordings implements historyv1.HistoryServiceServer.
func (s *Service) ListRecordings(ctx context.Context, req *historyv1.ListRecordingsRequest) (*historyv1.ListRecordingsResponse, error) {
	recs, err := s.sessionRecordings(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	return &historyv1.ListRecordingsResponse{Recordings: recs}, nil
}

func (s *Service) recording(ctx context.Context, sessionID, id string) (*displayv1.Recording, error) {
	if err := checkID("recording_id", id); err != nil {
		return nil, err
	}
	recs, err := s.sessionRecordings(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.GetId() == id {
			return r, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "session %s has no recording %s", sessionID, id)
}

// GetRecording implements historyv1.HistoryServiceServer.
func (s *Service) GetRecording(ctx context.Context, req *historyv1.GetRecordingRequest) (*historyv1.GetRecordingResponse, error) {
	r, err := s.recording(ctx, req.GetSessionId(), req.GetRecordingId())
	if err != nil {
		return nil, err
	}
	return &historyv1.GetRecordingResponse{Recording: r}, nil
}

// DownloadRecording implements historyv1.HistoryServiceServer.
func (s *Service) DownloadRecording(req *historyv1.DownloadRecordingRequest, stream historyv1.HistoryService_DownloadRecordingServer) error {
	ctx := stream.Context()
	r, err := s.recording(ctx, req.GetSessionId(), req.GetRecordingId())
	if err != nil {
		return err
	}
	if !r.GetDownloadReady() {
		switch r.GetState() {
		case displayv1.RecordingState_RECORDING_STATE_RECORDING:
			return status.Errorf(codes.FailedPrecondition, "recording %s is still recording (or was stopped a moment ago and its end is not stored yet); stop it first, or try again shortly", r.GetId())
		case displayv1.RecordingState_RECORDING_STATE_FAILED:
			return status.Errorf(codes.FailedPrecondition, "recording %s failed with no video kept: %s", r.GetId(), r.GetFailureReason())
		default:
			return status.Errorf(codes.FailedPrecondition, "the video of recording %s is not stored yet; try again shortly", r.GetId())
		}
	}
	if s.blobs == nil {
		return status.Error(codes.FailedPrecondition, "this history keeps no blobs")
	}
	f, size, err := s.blobs.Open(ctx, r.GetBlobHash())
	if errors.Is(err, blob.ErrNotFound) {
		return status.Errorf(codes.NotFound, "the video of recording %s is gone", r.GetId())
	}
	if err != nil {
		s.log.ErrorContext(ctx, "opening a recording", "recording_id", r.GetId(), "err", err)
		return status.Error(codes.Unavailable, "history is unavailable; retry later")
	}
	defer f.Close()
	buf := make([]byte, downloadChunk)
	first := true
	for {
		n, rerr := io.ReadFull(f, buf)
		if n > 0 || first {
			m := &historyv1.DownloadRecordingResponse{Chunk: buf[:n]}
			if first {
				m.ContentType, m.SizeBytes, first = r.GetContentType(), size, false
			}
			if err := stream.Send(m); err != nil {
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return nil
		}
		if rerr != nil {
			s.log.ErrorContext(ctx, "reading a recording", "recording_id", r.GetId(), "err", rerr)
			return status.Error(codes.Unavailable, "reading the video failed; retry later")
		}
	}
}
