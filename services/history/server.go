package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/store"
)

// maxTranscriptEntries bounds what GetRunTranscript returns at once.
const maxTranscriptEntries = 10_000

// listFilter is what ListSessionHistory and ListRunEntries share.
type listFilter interface {
	GetPageSize() int32
	GetPageToken() string
	GetTypes() []string
	GetAfterSequence() int64
	GetKinds() []historyv1.EntryKind
	GetStartTime() *timestamppb.Timestamp
	GetEndTime() *timestamppb.Timestamp
}

// query checks a list request's filters and turns them into a store query.
func query(req listFilter) (store.Query, error) {
	size, err := checkPageSize(req.GetPageSize())
	if err != nil {
		return store.Query{}, err
	}
	if req.GetAfterSequence() < 0 {
		return store.Query{}, status.Error(codes.InvalidArgument, "after_sequence must not be negative")
	}
	kinds, err := storeKinds(req.GetKinds())
	if err != nil {
		return store.Query{}, err
	}
	q := store.Query{
		Types:         req.GetTypes(),
		Kinds:         kinds,
		AfterSequence: req.GetAfterSequence(),
		PageSize:      size,
		PageToken:     req.GetPageToken(),
	}
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
		dst  *time.Time
	}{{"start_time", req.GetStartTime(), &q.Since}, {"end_time", req.GetEndTime(), &q.Until}} {
		if t.ts == nil {
			continue
		}
		if err := t.ts.CheckValid(); err != nil {
			return store.Query{}, status.Errorf(codes.InvalidArgument, "%s is not a valid time: %v", t.name, err)
		}
		*t.dst = t.ts.AsTime()
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return store.Query{}, status.Error(codes.InvalidArgument, "end_time must be after start_time")
	}
	return q, nil
}

func checkPageSize(n int32) (int, error) {
	size := int(n)
	switch {
	case size == 0:
		return store.DefaultPageSize, nil
	case size < 0 || size > store.MaxPageSize:
		return 0, status.Errorf(codes.InvalidArgument, "page_size must be between 1 and %d (0 means %d), got %d", store.MaxPageSize, store.DefaultPageSize, size)
	}
	return size, nil
}

func storeKinds(kinds []historyv1.EntryKind) ([]store.Kind, error) {
	out := make([]store.Kind, 0, len(kinds))
	for _, k := range kinds {
		if k <= historyv1.EntryKind_ENTRY_KIND_UNSPECIFIED || k > historyv1.EntryKind_ENTRY_KIND_OTHER {
			return nil, status.Errorf(codes.InvalidArgument, "kinds: %v is not an entry kind", k)
		}
		out = append(out, store.Kind(k))
	}
	return out, nil
}

// storeError turns a store error into a status, once, at the edge.
func (s *Service) storeError(ctx context.Context, err error, what string) error {
	switch {
	case errors.Is(err, store.ErrInvalidPageToken):
		return status.Error(codes.InvalidArgument, "page_token is not valid for this query: pass the token of the previous page with the same filters")
	case errors.Is(err, store.ErrInvalidQuery), errors.Is(err, store.ErrNotFound):
		code := codes.InvalidArgument
		if errors.Is(err, store.ErrNotFound) {
			code = codes.NotFound
		}
		return status.Error(code, err.Error())
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	default:
		s.log.ErrorContext(ctx, what, "err", err)
		return status.Error(codes.Unavailable, "history is unavailable; retry later")
	}
}

// Bounds on identifiers and search text: longer ones are bad input, refused
// before they reach the store.
const (
	maxIDBytes    = 128
	maxQueryBytes = 1024
)

// checkID refuses a missing or oversized session or run id.
func checkID(field, v string) error {
	if v == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if len(v) > maxIDBytes {
		return status.Errorf(codes.InvalidArgument, "%s is %d bytes; at most %d are allowed", field, len(v), maxIDBytes)
	}
	return nil
}

// ListSessionHistory implements historyv1.HistoryServiceServer.
func (s *Service) ListSessionHistory(ctx context.Context, req *historyv1.ListSessionHistoryRequest) (*historyv1.ListSessionHistoryResponse, error) {
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	q, err := query(req)
	if err != nil {
		return nil, err
	}
	q.SessionID = req.GetSessionId()
	if q.Tenant, err = s.tenancy.Scope(ctx); err != nil {
		return nil, err
	}
	entries, next, err := s.store.List(ctx, q)
	if err != nil {
		return nil, s.storeError(ctx, err, "listing history")
	}
	return &historyv1.ListSessionHistoryResponse{Entries: s.toProtos(ctx, entries), NextPageToken: next}, nil
}

// ListRunEntries implements historyv1.HistoryServiceServer.
func (s *Service) ListRunEntries(ctx context.Context, req *historyv1.ListRunEntriesRequest) (*historyv1.ListRunEntriesResponse, error) {
	if err := checkID("run_id", req.GetRunId()); err != nil {
		return nil, err
	}
	q, err := query(req)
	if err != nil {
		return nil, err
	}
	q.RunID = req.GetRunId()
	if q.Tenant, err = s.tenancy.Scope(ctx); err != nil {
		return nil, err
	}
	entries, next, err := s.store.List(ctx, q)
	if err != nil {
		return nil, s.storeError(ctx, err, "listing run entries")
	}
	return &historyv1.ListRunEntriesResponse{Entries: s.toProtos(ctx, entries), NextPageToken: next}, nil
}

// GetRunTranscript implements historyv1.HistoryServiceServer.
func (s *Service) GetRunTranscript(ctx context.Context, req *historyv1.GetRunTranscriptRequest) (*historyv1.GetRunTranscriptResponse, error) {
	if err := checkID("run_id", req.GetRunId()); err != nil {
		return nil, err
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	resp := &historyv1.GetRunTranscriptResponse{RunId: req.GetRunId(), Usage: &historyv1.RunUsage{}}
	q := store.Query{RunID: req.GetRunId(), Tenant: tenant, PageSize: store.MaxPageSize}
	for {
		entries, next, err := s.store.List(ctx, q)
		if err != nil {
			return nil, s.storeError(ctx, err, "reading a transcript")
		}
		for _, e := range entries {
			if len(resp.Entries) == maxTranscriptEntries {
				resp.Truncated = true
				return resp, nil
			}
			if resp.SessionId == "" {
				resp.SessionId = e.SessionID
			}
			if e.Kind == store.KindUsage {
				addUsage(resp.Usage, e.Data)
			}
			resp.Entries = append(resp.Entries, s.toProto(ctx, e))
		}
		if next == "" {
			return resp, nil
		}
		q.PageToken = next
	}
}

// SearchHistory implements historyv1.HistoryServiceServer. A caller acting
// for a tenant searches that tenant's entries only; naming another tenant
// is PermissionDenied, whether that tenant exists or not.
func (s *Service) SearchHistory(ctx context.Context, req *historyv1.SearchHistoryRequest) (*historyv1.SearchHistoryResponse, error) {
	if req.GetQuery() == "" {
		return nil, status.Error(codes.InvalidArgument, "query is required")
	}
	if n := len(req.GetQuery()); n > maxQueryBytes {
		return nil, status.Errorf(codes.InvalidArgument, "query is %d bytes; at most %d are allowed", n, maxQueryBytes)
	}
	t, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	tenant := req.GetTenant()
	if t != "" {
		if tenant != "" && tenant != t {
			return nil, status.Error(codes.PermissionDenied, "a search covers only your own tenant's history: leave tenant empty or name your own")
		}
		tenant = t
	}
	size, err := checkPageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	entries, next, err := s.store.Search(ctx, store.SearchQuery{
		Text:      req.GetQuery(),
		Tenant:    tenant,
		SessionID: req.GetSessionId(),
		PageSize:  size,
		PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, s.storeError(ctx, err, "searching history")
	}
	return &historyv1.SearchHistoryResponse{Entries: s.toProtos(ctx, entries), NextPageToken: next}, nil
}

// DeleteSessionHistory implements historyv1.HistoryServiceServer. The blobs
// only its entries referred to go at the next sweep.
func (s *Service) DeleteSessionHistory(ctx context.Context, req *historyv1.DeleteSessionHistoryRequest) (*historyv1.DeleteSessionHistoryResponse, error) {
	if err := checkID("session_id", req.GetSessionId()); err != nil {
		return nil, err
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	n, err := s.store.DeleteSession(ctx, tenant, req.GetSessionId())
	if err != nil {
		return nil, s.storeError(ctx, err, "deleting history")
	}
	if n == 0 {
		return nil, status.Errorf(codes.NotFound, "no history for session %q", req.GetSessionId())
	}
	s.log.InfoContext(ctx, "history deleted", "session_id", req.GetSessionId(), "entries", n)
	return &historyv1.DeleteSessionHistoryResponse{DeletedEntries: n}, nil
}

func (s *Service) toProtos(ctx context.Context, entries []store.Entry) []*historyv1.Entry {
	out := make([]*historyv1.Entry, 0, len(entries))
	for _, e := range entries {
		out = append(out, s.toProto(ctx, e))
	}
	return out
}

func (s *Service) toProto(ctx context.Context, e store.Entry) *historyv1.Entry {
	data, err := dataStruct(e.Data)
	if err != nil {
		// Keep the entry; a broken payload should not hide the rest.
		s.log.WarnContext(ctx, "entry data is not a JSON object", "id", e.ID, "err", err)
	}
	return &historyv1.Entry{
		Id:        e.ID,
		SessionId: e.SessionID,
		RunId:     e.RunID,
		Sequence:  e.Sequence,
		Type:      e.Type,
		Time:      timestamppb.New(e.Time),
		Data:      data,
		Kind:      historyv1.EntryKind(e.Kind),
		Tenant:    e.Tenant,
		BlobHash:  e.BlobHash,
	}
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
