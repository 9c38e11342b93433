package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// Server-sent events for the two public streams. A browser's EventSource asks
// with Accept: text/event-stream and gets one SSE event per stream message;
// every other client keeps grpc-gateway's newline-delimited JSON.
//
// Each event is sent twice, with the same id and data: once named for its
// type, for addEventListener(type), and once unnamed (the default
// "message" type), for an onmessage handler:
//
//	id: <run event sequence | session generation>
//	event: <type: the run event's kind (text_delta, tool_call, state, ...),
//	        or "session", "process_exited" (an autostart program ended) or
//	        "image_pull" (its node pulling its image while it starts)>
//	data: <protojson of the stream message>
//
//	id: <the same>
//	data: <the same>
//
// A stream that ends for good says so with "event: end" (and the same
// unnamed) whose data is {"code":<gRPC code>,"message":...} (code 0 when it
// simply finished), so a client knows not to reconnect. A stream cut by a passing failure
// (Unavailable, the gateway shutting down) just closes: EventSource
// reconnects with Last-Event-ID and resumes after the last event it saw.

const (
	sseEndEvent           = "end"
	sseSessionEvent       = "session"
	sseProcessExitedEvent = "process_exited"
	sseImagePullEvent     = "image_pull"
)

var sseJSON = protojson.MarshalOptions{}

// wantsSSE tells whether the client asked for an event stream.
func wantsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// sseRoutes answers the streaming paths as server-sent events when the client
// asks for them and hands every other request to next.
func (g *Gateway) sseRoutes(mux *runtime.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && wantsSSE(r) {
			p := r.URL.Path
			if rest, ok := strings.CutPrefix(p, "/v1/runs/"); ok {
				if id, ok := strings.CutSuffix(rest, "/events"); ok && id != "" && !strings.Contains(id, "/") {
					g.runEventsSSE(w, r, mux, id)
					return
				}
			}
			if rest, ok := strings.CutPrefix(p, "/v1/sessions/"); ok {
				if id, ok := strings.CutSuffix(rest, ":watch"); ok && id != "" && !strings.Contains(id, "/") {
					g.watchSessionSSE(w, r, mux, id)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// resumePoint is where a stream resumes: the Last-Event-ID a reconnecting
// EventSource sends, else the query parameter, else 0.
func resumePoint(r *http.Request, param string) (int64, error) {
	v, what := r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	if v == "" {
		v, what = r.URL.Query().Get(param), param
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a non-negative integer, got %q", what, v)
	}
	return n, nil
}

func (g *Gateway) runEventsSSE(w http.ResponseWriter, r *http.Request, mux *runtime.ServeMux, runID string) {
	after, err := resumePoint(r, "after_sequence")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": err.Error()})
		return
	}
	g.serveSSE(w, r, mux, "/deskgrid.agent.v1.AgentService/StreamRunEvents", "/v1/runs/{run_id}/events",
		func(ctx context.Context) (func() (sseMessage, error), error) {
			stream, err := agentv1.NewAgentServiceClient(g.deps.Backends.Agent).StreamRunEvents(ctx,
				&agentv1.StreamRunEventsRequest{RunId: runID, AfterSequence: after})
			if err != nil {
				return nil, err
			}
			return func() (sseMessage, error) {
				m, err := stream.Recv()
				if err != nil {
					return sseMessage{}, err
				}
				return sseMessage{id: m.GetEvent().GetSequence(), typ: runEventType(m.GetEvent()), msg: m}, nil
			}, nil
		})
}

// runEventType names a run event by the field its oneof holds.
func runEventType(ev *agentv1.RunEvent) string {
	m := ev.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("event")); fd != nil {
		return string(fd.Name())
	}
	return "event"
}

func (g *Gateway) watchSessionSSE(w http.ResponseWriter, r *http.Request, mux *runtime.ServeMux, sessionID string) {
	seen, err := resumePoint(r, "after_generation")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": err.Error()})
		return
	}
	g.serveSSE(w, r, mux, "/deskgrid.session.v1.SessionService/WatchSession", "/v1/sessions/{session_id}:watch",
		func(ctx context.Context) (func() (sseMessage, error), error) {
			stream, err := sessionv1.NewSessionServiceClient(g.deps.Backends.Session).WatchSession(ctx,
				&sessionv1.WatchSessionRequest{SessionId: sessionID})
			if err != nil {
				return nil, err
			}
			last := seen
			return func() (sseMessage, error) {
				m, err := stream.Recv()
				if err != nil {
					return sseMessage{}, err
				}
				if m.GetImagePull() != nil {
					// The pull of its image while it starts: it keeps the
					// id of the generation before it, like an autostart
					// program's end.
					return sseMessage{id: last, typ: sseImagePullEvent, msg: m}, nil
				}
				if m.GetSession() == nil {
					// An autostart program's end: it keeps the id of the
					// generation before it, where a reconnect resumes.
					return sseMessage{id: last, typ: sseProcessExitedEvent, msg: m}, nil
				}
				// The watch starts with the session as it is now: a
				// reconnecting client already has that generation, but it
				// tells that the stream stands.
				gen := m.GetSession().GetGeneration()
				if seen > 0 && gen <= seen {
					return sseMessage{}, nil
				}
				last = gen
				return sseMessage{id: gen, typ: sseSessionEvent, msg: m}, nil
			}, nil
		})
}

// sseMessage is one event to send; a nil msg sends nothing but shows the
// stream stands.
type sseMessage struct {
	id  int64
	typ string
	msg proto.Message
}

// sseRefusalWindow is how long a reply waits for the stream's first word
// before it commits to 200: long enough for a refusal to arrive as an HTTP
// error, short enough that a quiet stream opens promptly.
const sseRefusalWindow = time.Second

type sseItem struct {
	m   sseMessage
	err error
}

// serveSSE relays a gRPC server stream as server-sent events.
//
// The reply waits for the stream's first message or error, so a refusal
// (an unknown run, a bad argument) is a plain HTTP error with its status
// code; a stream that stays quiet for sseRefusalWindow gets its 200 then.
//
// Nothing is queued: one message is in hand at a time and the next Recv waits
// for its write, so a slow client holds back the gRPC stream (whose flow
// control is the only buffer) instead of growing memory, and a client that
// stops reading for a write timeout is dropped to resume later.
func (g *Gateway) serveSSE(w http.ResponseWriter, r *http.Request, mux *runtime.ServeMux, rpc, pattern string,
	open func(context.Context) (func() (sseMessage, error), error)) {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"code": int(codes.Unavailable), "message": "the gateway is shutting down"})
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// Shutdown waits for handlers; a stream would never end by itself.
	defer context.AfterFunc(g.base, cancel)()

	ctx, err := runtime.AnnotateContext(ctx, mux, r, rpc, runtime.WithHTTPPathPattern(pattern))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": int(codes.InvalidArgument), "message": err.Error()})
		return
	}
	recv, err := open(ctx)
	if err != nil {
		g.sseRefuse(w, err)
		return
	}
	items := make(chan sseItem)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		for {
			m, err := recv()
			select {
			case items <- sseItem{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-pumped
	}()

	rc := http.NewResponseController(w)
	// The deadline set per write would outlive the stream on a kept-alive
	// connection.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	started := false
	start := func() {
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		// Reverse proxies (nginx) would otherwise hold events back.
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		started = true
	}
	var buf bytes.Buffer
	send := func() error {
		_ = rc.SetWriteDeadline(time.Now().Add(g.cfg.SSEWriteTimeout))
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		buf.Reset()
		return rc.Flush()
	}
	heartbeat := time.NewTicker(g.cfg.SSEHeartbeat)
	defer heartbeat.Stop()
	opened := time.NewTimer(min(sseRefusalWindow, g.cfg.SSEHeartbeat))
	defer opened.Stop()
	for {
		select {
		case <-opened.C:
			if !started {
				start()
				if rc.Flush() != nil {
					return
				}
			}
		case <-ctx.Done():
			if !started {
				g.sseRefuse(w, status.FromContextError(ctx.Err()).Err())
			}
			return
		case <-heartbeat.C:
			if !started {
				start()
			}
			buf.WriteString(": heartbeat\n\n")
			if send() != nil {
				return
			}
		case it := <-items:
			if it.err != nil {
				if !started && !errors.Is(it.err, io.EOF) {
					g.sseRefuse(w, it.err)
					return
				}
				if !started {
					start()
				}
				if !sseFinal(ctx, it.err) {
					return
				}
				st := status.Convert(it.err)
				if errors.Is(it.err, io.EOF) {
					st = status.New(codes.OK, "")
				}
				writeSSE(&buf, "", sseEndEvent, fmt.Appendf(nil, `{"code":%d,"message":%q}`, int(st.Code()), st.Message()))
				_ = send()
				return
			}
			if !started {
				start()
			}
			if it.m.msg == nil {
				if rc.Flush() != nil {
					return
				}
				continue
			}
			data, err := sseJSON.Marshal(it.m.msg)
			if err != nil {
				g.logger.ErrorContext(ctx, "sse: marshal", "rpc", rpc, "error", err)
				return
			}
			writeSSE(&buf, strconv.FormatInt(it.m.id, 10), it.m.typ, data)
			if send() != nil {
				return
			}
			heartbeat.Reset(g.cfg.SSEHeartbeat)
		}
	}
}

// sseFinal tells whether a stream's end is for good (the client should not
// reconnect) rather than a passing failure the client resumes after.
func sseFinal(ctx context.Context, err error) bool {
	if errors.Is(err, io.EOF) {
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

func (g *Gateway) sseRefuse(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	writeJSON(w, runtime.HTTPStatusFromCode(st.Code()), map[string]any{"code": int(st.Code()), "message": st.Message()})
}

// writeSSE appends one event named typ and the same event unnamed (type
// "message"); data lines never hold a newline of their own.
func writeSSE(b *bytes.Buffer, id, typ string, data []byte) {
	for _, name := range []string{typ, ""} {
		if id != "" {
			b.WriteString("id: " + id + "\n")
		}
		if name != "" {
			b.WriteString("event: " + name + "\n")
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			b.WriteString("data: ")
			b.Write(bytes.TrimSuffix(line, []byte("\r")))
			b.WriteByte('\n')
		}
		b.WriteByte('\n')
	}
}
