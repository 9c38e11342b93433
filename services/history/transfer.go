package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	"github.com/deskgrid/deskgrid/services/history/internal/blob"
	"github.com/deskgrid/deskgrid/services/history/internal/payload"
	"github.com/deskgrid/deskgrid/services/history/store"
)

// exportChunk is about how many bytes of JSON Lines each export message
// carries.
const exportChunk = 64 << 10

// ExportSessionHistory implements historyv1.HistoryServiceServer.
func (s *Service) ExportSessionHistory(req *historyv1.ExportSessionHistoryRequest, stream grpc.ServerStreamingServer[historyv1.ExportSessionHistoryResponse]) error {
	ctx := stream.Context()
	if req.GetSessionId() == "" {
		return status.Error(codes.InvalidArgument, "session_id is required")
	}
	var buf bytes.Buffer
	flush := func() error {
		if buf.Len() == 0 {
			return nil
		}
		// The message keeps the slice: hand it a copy.
		err := stream.Send(&historyv1.ExportSessionHistoryResponse{Chunk: bytes.Clone(buf.Bytes())})
		buf.Reset()
		return err
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return err
	}
	q := store.Query{SessionID: req.GetSessionId(), Tenant: tenant, PageSize: store.MaxPageSize}
	for {
		entries, next, err := s.store.List(ctx, q)
		if err != nil {
			return s.storeError(ctx, err, "exporting history")
		}
		for _, e := range entries {
			if req.GetIncludeBlobs() {
				if err := payload.Inline(ctx, &e, s.blobs); err != nil {
					s.log.WarnContext(ctx, "exporting without a screenshot", "id", e.ID, "err", err)
				}
			}
			line, err := protojson.Marshal(s.toProto(ctx, e))
			if err != nil {
				return status.Errorf(codes.Internal, "encoding entry %s", e.ID)
			}
			buf.Write(line)
			buf.WriteByte('\n')
			if buf.Len() >= exportChunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if next == "" {
			return flush()
		}
		q.PageToken = next
	}
}

// ImportSessionHistory implements historyv1.HistoryServiceServer. The whole
// document is read and checked before anything is stored, and stored in one
// transaction. A caller acting for a tenant imports into that tenant only:
// lines naming no tenant are stored as its own, and a line naming another
// tenant fails the import (PermissionDenied), so an export can be taken
// from one tenant to another only by removing its tenant fields. The
// target is one of the caller's sessions or a new id: a session holding
// another tenant's entries is NotFound, and nothing is written into it.
func (s *Service) ImportSessionHistory(stream grpc.ClientStreamingServer[historyv1.ImportSessionHistoryRequest, historyv1.ImportSessionHistoryResponse]) error {
	ctx := stream.Context()
	var doc bytes.Buffer
	session := ""
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		switch id := req.GetSessionId(); {
		case session == "" && id == "":
			return status.Error(codes.InvalidArgument, "session_id is required in the first message")
		case session == "":
			session = id
		case id != "" && id != session:
			return status.Errorf(codes.InvalidArgument, "session_id changed from %q to %q within one import", session, id)
		}
		if int64(doc.Len()+len(req.GetChunk())) > s.cfg.MaxImportBytes {
			return status.Errorf(codes.ResourceExhausted, "import is larger than %d bytes; split it into several sessions' imports", s.cfg.MaxImportBytes)
		}
		doc.Write(req.GetChunk())
	}
	if session == "" {
		return status.Error(codes.InvalidArgument, "session_id is required in the first message")
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return err
	}
	entries, err := s.parseImport(ctx, session, tenant, doc.Bytes())
	if err != nil {
		return err
	}
	n, err := s.store.Import(ctx, tenant, session, entries)
	if errors.Is(err, store.ErrNotFound) {
		return status.Errorf(codes.NotFound, "session %q: no session of yours by that id; import into one of your own sessions or a new id; nothing was imported", session)
	}
	if err != nil {
		return s.storeError(ctx, err, "importing history")
	}
	s.log.InfoContext(ctx, "history imported", "session_id", session, "entries", n, "skipped", len(entries)-n)
	return stream.SendAndClose(&historyv1.ImportSessionHistoryResponse{Imported: int64(n), Skipped: int64(len(entries) - n)})
}

// parseImport reads JSON Lines of entries of session for tenant ("" keeps
// each line's own); a bad line is an InvalidArgument naming it.
func (s *Service) parseImport(ctx context.Context, session, tenant string, doc []byte) ([]store.Entry, error) {
	var entries []store.Entry
	blobs, rec := s.blobs, &putRecorder{put: map[string]bool{}}
	if s.blobs != nil {
		rec.Store = s.blobs
		blobs = rec
	}
	bad := func(line int, format string, args ...any) error {
		return status.Errorf(codes.InvalidArgument, "line %d: %s; nothing was imported", line, fmt.Sprintf(format, args...))
	}
	for i, raw := range bytes.Split(doc, []byte{'\n'}) {
		line := i + 1
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		pe := &historyv1.Entry{}
		if err := protojson.Unmarshal(raw, pe); err != nil {
			return nil, bad(line, "not an entry: %v", err)
		}
		switch {
		case pe.GetId() == "":
			return nil, bad(line, "id is required")
		case pe.GetType() == "":
			return nil, bad(line, "type is required")
		case pe.GetSessionId() != "" && pe.GetSessionId() != session:
			return nil, bad(line, "the entry is of session %q, not %q", pe.GetSessionId(), session)
		case pe.GetSequence() < 0:
			return nil, bad(line, "sequence must not be negative")
		case pe.GetTime() == nil:
			return nil, bad(line, "time is required")
		case pe.GetTime().CheckValid() != nil:
			return nil, bad(line, "time is not valid")
		case pe.GetBlobHash() != "" && !blob.ValidHash(pe.GetBlobHash()):
			return nil, bad(line, "blobHash is not a SHA-256 in hex")
		}
		for _, v := range []string{pe.GetId(), pe.GetType(), pe.GetRunId(), pe.GetTenant()} {
			if strings.ContainsRune(v, 0) {
				return nil, bad(line, "a field holds a NUL character")
			}
		}
		if tenant != "" {
			switch pe.GetTenant() {
			case "":
				pe.Tenant = tenant
			case tenant:
			default:
				return nil, status.Errorf(codes.PermissionDenied, "line %d: the entry is of another tenant; you can import only into your own (remove the tenant field to import it as yours); nothing was imported", line)
			}
		}
		e := store.Entry{
			ID: pe.GetId(), SessionID: session, RunID: pe.GetRunId(), Sequence: pe.GetSequence(),
			Type: pe.GetType(), Time: pe.GetTime().AsTime(), Tenant: pe.GetTenant(), BlobHash: pe.GetBlobHash(),
		}
		if pe.GetData() != nil {
			b, err := protojson.Marshal(pe.GetData())
			if err != nil {
				return nil, bad(line, "data: %v", err)
			}
			e.Data = string(b)
		}
		// Screenshot bytes an export carried go to the blob store; should the
		// import fail later, the sweeper collects them.
		if err := payload.Prepare(ctx, &e, blobs); err != nil {
			s.log.ErrorContext(ctx, "importing a screenshot", "err", err)
			return nil, status.Error(codes.Unavailable, "the blob store is unavailable; retry later")
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil, status.Error(codes.InvalidArgument, "the import holds no entries")
	}
	if tenant != "" {
		if err := s.dropForeignBlobs(ctx, tenant, entries, rec.put); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// dropForeignBlobs unlinks the blobs an import names without carrying their
// bytes (put) and that no entry of tenant refers to already: GetBlob lets a
// tenant read a blob its entries refer to, so an entry naming a hash must
// not be a way into another tenant's screenshot.
func (s *Service) dropForeignBlobs(ctx context.Context, tenant string, entries []store.Entry, put map[string]bool) error {
	known := map[string]bool{}
	for i := range entries {
		h := entries[i].BlobHash
		if h == "" || put[h] {
			continue
		}
		ok, seen := known[h]
		if !seen {
			var err error
			if ok, err = s.store.BlobReferenced(ctx, tenant, h); err != nil {
				return s.storeError(ctx, err, "importing history")
			}
			known[h] = ok
		}
		if !ok {
			entries[i].BlobHash = ""
		}
	}
	return nil
}

// putRecorder notes the blobs an import stored from bytes it carried.
type putRecorder struct {
	blob.Store
	put map[string]bool
}

func (r *putRecorder) Put(ctx context.Context, data []byte) (string, error) {
	h, err := r.Store.Put(ctx, data)
	if err == nil {
		r.put[h] = true
	}
	return h, err
}

// GetBlob implements historyv1.HistoryServiceServer.
func (s *Service) GetBlob(ctx context.Context, req *historyv1.GetBlobRequest) (*historyv1.GetBlobResponse, error) {
	if !blob.ValidHash(req.GetHash()) {
		return nil, status.Error(codes.InvalidArgument, "hash must be a SHA-256 as 64 lowercase hex digits")
	}
	if s.blobs == nil {
		return nil, status.Errorf(codes.NotFound, "no blob %s: this history keeps no blob store", req.GetHash())
	}
	// A blob is the caller's if one of its tenant's entries refers to it;
	// any other is answered as one never stored.
	t, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	if t != "" {
		ok, err := s.store.BlobReferenced(ctx, t, req.GetHash())
		if err != nil {
			return nil, s.storeError(ctx, err, "reading a blob")
		}
		if !ok {
			return nil, status.Errorf(codes.NotFound, "no blob %s", req.GetHash())
		}
	}
	data, err := s.blobs.Get(ctx, req.GetHash())
	switch {
	case errors.Is(err, blob.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "no blob %s", req.GetHash())
	case err != nil:
		return nil, s.storeError(ctx, err, "reading a blob")
	}
	return &historyv1.GetBlobResponse{ContentType: http.DetectContentType(data), Data: data}, nil
}
