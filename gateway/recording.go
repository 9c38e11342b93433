package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
)

// downloadRecording serves a recording's video as the response body, with
// its content type and length (curl -o rec.mp4 .../recordings/{id}:download),
// rather than grpc-gateway's JSON stream of base64 chunks. Other requests
// under the path (GetRecording) go to next.
//
// A refusal before the first byte (no such recording, still recording) is
// an HTTP error with its status; a failure after it cuts the connection, so
// the client sees a truncated transfer rather than a short file.
func (g *Gateway) downloadRecording(mux *runtime.ServeMux, next http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutSuffix(r.PathValue("recording"), ":download")
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		sid := r.PathValue("session_id")
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(g.base, cancel)()
		ctx, err := runtime.AnnotateContext(ctx, mux, r, historyv1.HistoryService_DownloadRecording_FullMethodName,
			runtime.WithHTTPPathPattern("/v1/sessions/{session_id}/recordings/{recording_id}:download"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": err.Error()})
			return
		}
		stream, err := historyv1.NewHistoryServiceClient(g.deps.Backends.History).DownloadRecording(ctx,
			&historyv1.DownloadRecordingRequest{SessionId: sid, RecordingId: id})
		if err != nil {
			g.sseRefuse(w, err)
			return
		}
		first, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			g.sseRefuse(w, err)
			return
		}
		h := w.Header()
		ct := first.GetContentType()
		if ct == "" {
			ct = "application/octet-stream"
		}
		h.Set("Content-Type", ct)
		ext := ".mp4"
		if ct == "video/webm" {
			ext = ".webm"
		}
		h.Set("Content-Disposition", `attachment; filename="`+id+ext+`"`)
		h.Set("Content-Length", strconv.FormatInt(first.GetSizeBytes(), 10))
		w.WriteHeader(http.StatusOK)
		relayChunks(w, first, stream.Recv, func(err error) {
			g.logger.WarnContext(ctx, "recording download cut short", "session_id", sid, "recording_id", id, "error", err)
		})
	}
}
