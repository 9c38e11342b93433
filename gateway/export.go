package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
)

// ndjson is the media type of an export: one history entry as JSON a line.
const ndjson = "application/x-ndjson"

// exportHistory serves a session's history export as the JSON Lines
// document itself (curl .../history:export > s.jsonl), rather than
// grpc-gateway's stream of base64 chunks wrapped in JSON, so the file is
// what `deskgrid history import` and ImportSessionHistory read.
//
// A refusal before the first byte (no such session, no permission) is an
// HTTP error with its status; a failure after it cuts the connection, so
// the client sees a truncated transfer rather than a short file that looks
// whole.
func (g *Gateway) exportHistory(mux *runtime.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("session_id")
		req := &historyv1.ExportSessionHistoryRequest{SessionId: id}
		if v := r.URL.Query().Get("include_blobs"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": "include_blobs must be true or false, got " + strconv.Quote(v)})
				return
			}
			req.IncludeBlobs = b
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		// Shutdown waits for handlers; a long export ends with the gateway.
		defer context.AfterFunc(g.base, cancel)()
		ctx, err := runtime.AnnotateContext(ctx, mux, r, historyv1.HistoryService_ExportSessionHistory_FullMethodName,
			runtime.WithHTTPPathPattern("/v1/sessions/{session_id}/history:export"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": err.Error()})
			return
		}
		stream, err := historyv1.NewHistoryServiceClient(g.deps.Backends.History).ExportSessionHistory(ctx, req)
		if err != nil {
			g.sseRefuse(w, err)
			return
		}
		first, err := stream.Recv()
		if err != nil && !errors.Is(err, io.EOF) {
			g.sseRefuse(w, err)
			return
		}
		h := w.Header()
		h.Set("Content-Type", ndjson)
		h.Set("Content-Disposition", `attachment; filename="`+id+`.jsonl"`)
		w.WriteHeader(http.StatusOK)
		if err != nil {
			return
		}
		relayChunks(w, first, stream.Recv, func(err error) {
			g.logger.WarnContext(ctx, "history export cut short", "session_id", id, "error", err)
		})
	}
}

// relayChunks writes first and every message stream gives after it to w,
// flushing each, until the stream ends. A stream cut short is reported to
// cut and aborts the response, so the client sees a broken transfer rather
// than a short file that looks whole.
func relayChunks[M interface{ GetChunk() []byte }](w http.ResponseWriter, first M, recv func() (M, error), cut func(error)) {
	rc := http.NewResponseController(w)
	for m := first; ; {
		if _, err := w.Write(m.GetChunk()); err != nil {
			return
		}
		_ = rc.Flush()
		var err error
		if m, err = recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			cut(err)
			panic(http.ErrAbortHandler)
		}
	}
}
