package history

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/store"
)

// ListSessionHistory implements historyv1.HistoryServiceServer.
func (s *Service) ListSessionHistory(ctx context.Context, req *historyv1.ListSessionHistoryRequest) (*historyv1.ListSessionHistoryResponse, error) {
	if req.GetSessionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id is required")
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = store.DefaultPageSize
	case size < 0 || size > store.MaxPageSize:
		return nil, status.Errorf(codes.InvalidArgument, "page_size must be between 1 and %d (0 means %d), got %d", store.MaxPageSize, store.DefaultPageSize, size)
	}
	if req.GetAfterSequence() < 0 {
		return nil, status.Error(codes.InvalidArgument, "after_sequence must not be negative")
	}
	entries, next, err := s.store.List(ctx, store.Query{
		SessionID:     req.GetSessionId(),
		Types:         req.GetTypes(),
		AfterSequence: req.GetAfterSequence(),
		PageSize:      size,
		PageToken:     req.GetPageToken(),
	})
	switch {
	case errors.Is(err, store.ErrInvalidPageToken):
		return nil, status.Error(codes.InvalidArgument, "page_token is not valid for this query: pass the token of the previous page with the same session_id, types and after_sequence")
	case errors.Is(err, store.ErrInvalidQuery):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		s.log.ErrorContext(ctx, "listing history", "session_id", req.GetSessionId(), "err", err)
		return nil, status.Error(codes.Unavailable, "history is unavailable; retry later")
	}
	resp := &historyv1.ListSessionHistoryResponse{
		Entries:       make([]*historyv1.Entry, 0, len(entries)),
		NextPageToken: next,
	}
	for _, e := range entries {
		data, err := dataStruct(e.Data)
		if err != nil {
			// Keep the entry; a broken payload should not hide the rest.
			s.log.WarnContext(ctx, "entry data is not a JSON object", "id", e.ID, "err", err)
		}
		resp.Entries = append(resp.Entries, &historyv1.Entry{
			Id:        e.ID,
			SessionId: e.SessionID,
			RunId:     e.RunID,
			Sequence:  e.Sequence,
			Type:      e.Type,
			Time:      timestamppb.New(e.Time),
			Data:      data,
		})
	}
	return resp, nil
}

// dataStruct turns stored JSON text into a Struct; empty text is no data.
func dataStruct(data string) (*structpb.Struct, error) {
	if data == "" {
		return nil, nil
	}
	st := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(data), st); err != nil {
		return nil, fmt.Errorf("history: entry data: %w", err)
	}
	return st, nil
}
