package deskgrid

import (
	"context"
	"errors"
	"io"
	"iter"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	historyv1 "github.com/deskgrid/deskgrid/proto/deskgrid/history/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
)

// History is the history API across sessions: search, import, delete and
// the stored blobs (such as screenshots) entries refer to.
type History struct{ c *Client }

// page fetches pages with next until a page has no next token.
func page[T any](ctx context.Context, fetch func(ctx context.Context, token string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		token := ""
		for {
			cctx, cancel := bounded(ctx)
			items, next, err := fetch(cctx, token)
			cancel()
			if err != nil {
				var zero T
				yield(zero, wrap(err))
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			token = next
		}
	}
}

// HistoryOptions filter History and Runs.Entries.
type HistoryOptions struct {
	// Types are entry types such as "display.actions_performed.v1".
	Types []string
	// AfterSequence skips the entries up to and including this sequence number.
	AfterSequence int64
	// PageSize is how many entries one call fetches (default: the server's).
	PageSize int
}

// History yields the session's history entries, oldest first, fetching
// pages as it goes.
func (s *Session) History(ctx context.Context, o HistoryOptions) iter.Seq2[*historyv1.Entry, error] {
	return page(ctx, func(ctx context.Context, token string) ([]*historyv1.Entry, string, error) {
		resp, err := s.c.history.ListSessionHistory(ctx, &historyv1.ListSessionHistoryRequest{
			SessionId: s.GetId(), PageSize: int32(o.PageSize), PageToken: token, Types: o.Types, AfterSequence: o.AfterSequence,
		})
		return resp.GetEntries(), resp.GetNextPageToken(), err
	})
}

// ExportHistory writes the session's whole history to w as JSON Lines (what
// History.Import reads back), with the blobs entries refer to when
// includeBlobs is set. ctx bounds the whole export.
func (s *Session) ExportHistory(ctx context.Context, w io.Writer, includeBlobs bool) error {
	st, err := s.c.history.ExportSessionHistory(ctx, &historyv1.ExportSessionHistoryRequest{SessionId: s.GetId(), IncludeBlobs: includeBlobs})
	if err != nil {
		return wrap(err)
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return wrap(err)
		}
		if _, err := w.Write(m.GetChunk()); err != nil {
			return err
		}
	}
}

// Search yields the entries whose text matches query, in one session when
// sessionID is set, else in every session the caller sees.
func (h *History) Search(ctx context.Context, query, sessionID string) iter.Seq2[*historyv1.Entry, error] {
	return page(ctx, func(ctx context.Context, token string) ([]*historyv1.Entry, string, error) {
		resp, err := h.c.history.SearchHistory(ctx, &historyv1.SearchHistoryRequest{Query: query, SessionId: sessionID, PageToken: token})
		return resp.GetEntries(), resp.GetNextPageToken(), err
	})
}

// Import stores the JSON Lines read from r (as ExportHistory writes them)
// as the history of sessionID, all or nothing; entries already stored are
// skipped. ctx bounds the whole import.
func (h *History) Import(ctx context.Context, sessionID string, r io.Reader) (*historyv1.ImportSessionHistoryResponse, error) {
	st, err := h.c.history.ImportSessionHistory(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	buf := make([]byte, 256<<10)
	first := true
	for {
		n, rerr := r.Read(buf)
		if n > 0 || first {
			m := &historyv1.ImportSessionHistoryRequest{Chunk: buf[:n]}
			if first {
				m.SessionId, first = sessionID, false
			}
			if err := st.Send(m); err != nil {
				break // CloseAndRecv has the server's reason
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil {
		return nil, wrap(err)
	}
	return resp, nil
}

// Delete deletes every history entry of a session and returns how many.
func (h *History) Delete(ctx context.Context, sessionID string) (int64, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := h.c.history.DeleteSessionHistory(ctx, &historyv1.DeleteSessionHistoryRequest{SessionId: sessionID})
	if err != nil {
		return 0, wrap(err)
	}
	return resp.GetDeletedEntries(), nil
}

// Blob returns stored bytes, such as a screenshot an entry refers to, by
// their SHA-256 (hex), with their content type.
func (h *History) Blob(ctx context.Context, hash string) (data []byte, contentType string, err error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := h.c.history.GetBlob(ctx, &historyv1.GetBlobRequest{Hash: hash})
	if err != nil {
		return nil, "", wrap(err)
	}
	return resp.GetData(), resp.GetContentType(), nil
}

// Entries yields a run's history entries, oldest first.
func (r *Runs) Entries(ctx context.Context, runID string, o HistoryOptions) iter.Seq2[*historyv1.Entry, error] {
	return page(ctx, func(ctx context.Context, token string) ([]*historyv1.Entry, string, error) {
		resp, err := r.c.history.ListRunEntries(ctx, &historyv1.ListRunEntriesRequest{
			RunId: runID, PageSize: int32(o.PageSize), PageToken: token, Types: o.Types, AfterSequence: o.AfterSequence,
		})
		return resp.GetEntries(), resp.GetNextPageToken(), err
	})
}

// Transcript returns a run's conversation: its messages, tool calls and
// results in order, and the tokens it used.
func (r *Runs) Transcript(ctx context.Context, runID string) (*historyv1.GetRunTranscriptResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := r.c.history.GetRunTranscript(ctx, &historyv1.GetRunTranscriptRequest{RunId: runID})
	return resp, wrap(err)
}

// List yields a session's runs, fetching pages as it goes.
func (r *Runs) List(ctx context.Context, sessionID string) iter.Seq2[*agentv1.Run, error] {
	return page(ctx, func(ctx context.Context, token string) ([]*agentv1.Run, string, error) {
		resp, err := r.c.agent.ListRuns(ctx, &agentv1.ListRunsRequest{SessionId: sessionID, PageToken: token})
		return resp.GetRuns(), resp.GetNextPageToken(), err
	})
}

// SendMessage continues a run's conversation with another user message.
func (r *Runs) SendMessage(ctx context.Context, runID, text string) (*agentv1.Run, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := r.c.agent.SendMessage(ctx, &agentv1.SendMessageRequest{RunId: runID, Text: text})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRun(), nil
}

// Approve lets the tool call a run waits on go ahead.
func (r *Runs) Approve(ctx context.Context, runID, toolCallID string) (*agentv1.Run, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := r.c.agent.ApproveStep(ctx, &agentv1.ApproveStepRequest{RunId: runID, ToolCallId: toolCallID})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRun(), nil
}

// Reject refuses the tool call a run waits on; the model is told reason.
func (r *Runs) Reject(ctx context.Context, runID, toolCallID, reason string) (*agentv1.Run, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := r.c.agent.RejectStep(ctx, &agentv1.RejectStepRequest{RunId: runID, ToolCallId: toolCallID, Reason: reason})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetRun(), nil
}

// SetPublic makes the caller's tag visible to every tenant, or private again.
func (i *Images) SetPublic(ctx context.Context, ref string, public bool) (*imagev1.Image, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := i.c.image.SetImagePublic(ctx, &imagev1.SetImagePublicRequest{Ref: ref, Public: public, NodeId: i.node})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetImage(), nil
}

// Usage reports the node's image store disk use: images, layers and bytes.
func (i *Images) Usage(ctx context.Context) (*imagev1.GetImageUsageResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := i.c.image.GetImageUsage(ctx, &imagev1.GetImageUsageRequest{NodeId: i.node})
	return resp, wrap(err)
}
