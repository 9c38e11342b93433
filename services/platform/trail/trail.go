// Package trail records every call made on a session's desktop and sandbox
// (actions, screenshots, execs, shell commands, file reads and writes,
// changes applied or discarded) as an event, whoever made it: through REST,
// gRPC, MCP, the console or an SDK, all of which reach the node's display
// and sandbox services over gRPC. The history ingests the events like any
// other, so a session's history is the whole story of what was done to it.
//
// The recorder is a pair of gRPC server interceptors. A call's request and
// reply go to a bounded queue and are summarised and published by workers,
// so the call waits for neither; when the queue is full the record is
// dropped and counted rather than holding up the call.
package trail

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// Metadata a deskgrid service sends along with its calls to say on whose
// behalf it makes them. They are believed only from the system principal
// (another deskgrid service) or when authentication is off.
const (
	// RunIDMD names the agent run a call belongs to.
	RunIDMD = "deskgrid-run-id"
	// ViewerMD names the viewer token of the live view a call serves.
	ViewerMD = "deskgrid-viewer-token-id"
)

// TypePrefix starts every trail event type: "trail.<method>.v1".
const TypePrefix = "trail."

// TypeScreenshot is the type of a screenshot's record.
const TypeScreenshot = TypePrefix + "screenshot.v1"

// untracked are the node calls the session service makes to build, stop
// and look after a session: its lifecycle events already tell of them.
var untracked = map[string]bool{
	displayv1.DisplayService_CreateDisplay_FullMethodName: true,
	displayv1.DisplayService_GetDisplay_FullMethodName:    true,
	displayv1.DisplayService_ListDisplays_FullMethodName:  true,
	displayv1.DisplayService_DeleteDisplay_FullMethodName: true,
	sandboxv1.SandboxService_CreateSandbox_FullMethodName: true,
	sandboxv1.SandboxService_GetSandbox_FullMethodName:    true,
	sandboxv1.SandboxService_ListSandboxes_FullMethodName: true,
	sandboxv1.SandboxService_DeleteSandbox_FullMethodName: true,
	sandboxv1.SandboxService_FreezeSandbox_FullMethodName: true,
	sandboxv1.SandboxService_ThawSandbox_FullMethodName:   true,
}

// tracked are the services whose calls are recorded.
var tracked = []string{
	"/" + displayv1.DisplayService_ServiceDesc.ServiceName + "/",
	"/" + sandboxv1.SandboxService_ServiceDesc.ServiceName + "/",
}

// Tracked reports whether calls of a full method name are recorded.
func Tracked(method string) bool {
	if untracked[method] {
		return false
	}
	for _, p := range tracked {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// Config bounds the recorder.
type Config struct {
	// Queue is how many calls may wait to be published; beyond it records
	// are dropped (and counted) so calls are never held up.
	Queue int
	// Workers publish in parallel.
	Workers int
	// MaxContent bounds the bytes of one field kept as text (a file's
	// content, a command's output); beyond it only size and SHA-256 stay.
	MaxContent int
	// MaxOutput bounds the JSON of a request or of a stream's replies.
	MaxOutput int
	// MaxData bounds a screenshot kept with its record (the event bus's
	// message limit); a larger one is recorded without its bytes.
	MaxData int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Queue: 4096, Workers: 2, MaxContent: 4 << 10, MaxOutput: 16 << 10, MaxData: 900 << 10}
}

// Deps are what the recorder uses.
type Deps struct {
	Publisher events.Publisher
	Logger    *slog.Logger
}

// Stats count what the recorder did.
type Stats struct {
	Published, Dropped, Failed uint64
}

// Recorder records calls.
type Recorder struct {
	cfg    Config
	pub    events.Publisher
	logger *slog.Logger
	queue  chan *record
	wg     sync.WaitGroup

	mu     sync.RWMutex
	closed bool

	published, dropped, failed atomic.Uint64
	lastWarn                   atomic.Int64
}

type record struct {
	method   string
	caller   *eventsv1.Caller
	session  string
	req      proto.Message // unary: summarised by the worker
	resp     proto.Message
	input    string // streams: summarised as they go
	output   string
	err      error
	duration time.Duration
}

// New starts the recorder's workers; Close stops them.
func New(cfg Config, deps Deps) (*Recorder, error) {
	if deps.Publisher == nil {
		return nil, errors.New("trail: a publisher is required")
	}
	if deps.Logger == nil {
		return nil, errors.New("trail: a logger is required")
	}
	d := DefaultConfig()
	if cfg.Queue <= 0 {
		cfg.Queue = d.Queue
	}
	if cfg.Workers <= 0 {
		cfg.Workers = d.Workers
	}
	if cfg.MaxContent <= 0 {
		cfg.MaxContent = d.MaxContent
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = d.MaxOutput
	}
	if cfg.MaxData <= 0 {
		cfg.MaxData = d.MaxData
	}
	r := &Recorder{cfg: cfg, pub: deps.Publisher, logger: deps.Logger, queue: make(chan *record, cfg.Queue)}
	for range cfg.Workers {
		r.wg.Add(1)
		go r.work()
	}
	return r, nil
}

// Stats returns the counters.
func (r *Recorder) Stats() Stats {
	return Stats{Published: r.published.Load(), Dropped: r.dropped.Load(), Failed: r.failed.Load()}
}

// Close publishes what is queued and stops the workers; records arriving
// after it are dropped.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("trail: %d records not published: %w", len(r.queue), ctx.Err())
	}
}

// ServerOptions are the interceptors to add to a gRPC server after the
// authentication interceptors (they read the caller they put in ctx).
func (r *Recorder) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(r.unary),
		grpc.ChainStreamInterceptor(r.stream),
	}
}

// UnaryServerInterceptor is the unary half of ServerOptions.
func (r *Recorder) UnaryServerInterceptor() grpc.UnaryServerInterceptor { return r.unary }

func (r *Recorder) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !Tracked(info.FullMethod) {
		return handler(ctx, req)
	}
	start := time.Now()
	resp, err := handler(ctx, req)
	rq, _ := req.(proto.Message)
	rs, _ := resp.(proto.Message)
	if err != nil {
		rs = nil
	}
	r.enqueue(&record{
		method: info.FullMethod, caller: callerOf(ctx), session: sessionOf(rq),
		req: rq, resp: rs, err: err, duration: time.Since(start),
	})
	return resp, err
}

func (r *Recorder) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !Tracked(info.FullMethod) {
		return handler(srv, ss)
	}
	start := time.Now()
	w := &recordingStream{ServerStream: ss, r: r}
	err := handler(srv, w)
	r.enqueue(&record{
		method: info.FullMethod, caller: callerOf(ss.Context()), session: w.session,
		input: w.in.String(), output: w.out.String(), err: err, duration: time.Since(start),
	})
	return err
}

// recordingStream summarises a stream's messages as they pass: a handler
// may reuse a message it sent, so they cannot wait for the worker.
type recordingStream struct {
	grpc.ServerStream
	r       *Recorder
	session string
	in, out lines
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		if pm, ok := m.(proto.Message); ok {
			if s.session == "" {
				s.session = sessionOf(pm)
			}
			s.in.add(s.r, pm)
		}
	}
	return err
}

func (s *recordingStream) SendMsg(m any) error {
	if pm, ok := m.(proto.Message); ok {
		s.out.add(s.r, pm)
	}
	return s.ServerStream.SendMsg(m)
}

// lines is a stream's messages as JSON lines, bounded; past the bound only
// a count.
type lines struct {
	b       strings.Builder
	more    int
	stopped bool
}

func (l *lines) add(r *Recorder, m proto.Message) {
	if l.stopped {
		l.more++
		return
	}
	j := r.summary(m)
	if l.b.Len()+len(j) > r.cfg.MaxOutput {
		l.stopped = true
		l.more++
		return
	}
	if l.b.Len() > 0 {
		l.b.WriteByte('\n')
	}
	l.b.WriteString(j)
}

func (l *lines) String() string {
	if l.more > 0 {
		return l.b.String() + fmt.Sprintf("\n{\"more_messages\":%d}", l.more)
	}
	return l.b.String()
}

func (r *Recorder) enqueue(rec *record) {
	if rec.session == "" || refused(rec.err) {
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		r.dropped.Add(1)
		return
	}
	select {
	case r.queue <- rec:
	default:
		r.dropped.Add(1)
		if now := time.Now().Unix(); r.lastWarn.Swap(now) < now-60 {
			r.logger.Warn("trail: queue full, calls left out of the history", "dropped", r.dropped.Load())
		}
	}
}

func (r *Recorder) work() {
	defer r.wg.Done()
	for rec := range r.queue {
		typ, call := r.build(rec)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := r.pub.Publish(ctx, events.Meta{
			Type: typ, SessionID: rec.session, Tenant: rec.caller.GetTenant(), RunID: rec.caller.GetRunId(),
		}, call)
		if err != nil && len(call.GetData()) > 0 {
			// A screenshot the event bus refuses is still worth its record.
			call.Data = nil
			call.Output = leftOut(call.Output, err.Error())
			_, err = r.pub.Publish(ctx, events.Meta{
				Type: typ, SessionID: rec.session, Tenant: rec.caller.GetTenant(), RunID: rec.caller.GetRunId(),
			}, call)
		}
		cancel()
		if err != nil {
			r.failed.Add(1)
			r.logger.Warn("trail: publishing a call", "method", rec.method, "session_id", rec.session, "err", err)
			continue
		}
		r.published.Add(1)
	}
}

// leftOut adds to a reply's JSON object why its screenshot was left out.
func leftOut(obj, why string) string {
	q, _ := json.Marshal(why)
	if !strings.HasSuffix(obj, "}") || strings.TrimSpace(obj) == "{}" {
		return `{"data_left_out":` + string(q) + `}`
	}
	return strings.TrimSuffix(obj, "}") + `,"data_left_out":` + string(q) + `}`
}

// build turns a record into its event type and payload.
func (r *Recorder) build(rec *record) (string, *eventsv1.Call) {
	service, method := splitMethod(rec.method)
	call := &eventsv1.Call{
		Method:         rec.method,
		Tool:           service + "." + method,
		Caller:         rec.caller,
		Input:          rec.input,
		Output:         rec.output,
		DurationMicros: rec.duration.Microseconds(),
	}
	if rec.req != nil {
		call.Input = r.summary(rec.req)
	}
	if rec.resp != nil {
		resp := rec.resp
		// A screenshot's bytes travel as the record's data, for the
		// history's blob store, not inside its output.
		if shot := screenshotOf(resp); shot != nil && len(shot.GetData()) > 0 {
			data, ct := shot.GetData(), shot.GetContentType()
			resp = proto.Clone(resp)
			if s := screenshotOf(resp); s != nil {
				s.Data = nil
			}
			call.Output = r.summary(resp)
			if len(data) <= r.cfg.MaxData {
				call.Data, call.ContentType = data, ct
			} else {
				call.Output = leftOut(call.Output, fmt.Sprintf("%d bytes, over the event limit", len(data)))
			}
		} else {
			call.Output = r.summary(resp)
		}
	}
	if rec.err != nil {
		st := status.Convert(rec.err)
		call.Code, call.Error = int32(st.Code()), st.Message()
	}
	typ := TypePrefix + snake(method) + ".v1"
	return typ, call
}

// screenshotOf is the screenshot a reply is or holds.
func screenshotOf(m proto.Message) *displayv1.ScreenshotResponse {
	switch v := m.(type) {
	case *displayv1.ScreenshotResponse:
		return v
	case *displayv1.PerformActionsResponse:
		return v.GetScreenshot()
	}
	return nil
}

// splitMethod turns "/deskgrid.display.v1.DisplayService/Screenshot" into
// ("display", "Screenshot").
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	svc, m, _ := strings.Cut(full, "/")
	parts := strings.Split(svc, ".")
	if len(parts) >= 2 {
		svc = parts[1]
	}
	return svc, m
}

// snake turns "PerformActions" into "perform_actions", and an acronym into
// one word: "ConnectVNC" into "connect_vnc".
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (!unicode.IsUpper(r[i-1]) || (i+1 < len(r) && unicode.IsLower(r[i+1]))) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// callerOf says who made the call: the authenticated principal, and for a
// deskgrid service the run or viewer it acts for.
func callerOf(ctx context.Context) *eventsv1.Caller {
	c := &eventsv1.Caller{}
	p, authenticated := auth.FromContext(ctx)
	if authenticated {
		c.Tenant, c.KeyId = p.Tenant, p.KeyID
	}
	if !authenticated || p.System {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(RunIDMD); len(v) > 0 {
			c.RunId = v[0]
		}
		if v := md.Get(ViewerMD); len(v) > 0 {
			c.ViewerTokenId = v[0]
		}
		if !authenticated {
			if v := md.Get(auth.TenantMD); len(v) > 0 {
				c.Tenant = v[0]
			}
		}
	}
	return c
}

// sessionOf reads a request's session_id.
// SessionOf is the session a request names in its session_id field, or "".
func SessionOf(m proto.Message) string { return sessionOf(m) }

func sessionOf(m proto.Message) string {
	if m == nil {
		return ""
	}
	pm := m.ProtoReflect()
	if fd := pm.Descriptor().Fields().ByName("session_id"); fd != nil && fd.Kind() == protoreflect.StringKind {
		return pm.Get(fd).String()
	}
	return ""
}

// summary is a message as JSON with secrets and bulk left out.
func (r *Recorder) summary(m proto.Message) string {
	b, err := json.Marshal(r.value(m.ProtoReflect()))
	if err != nil {
		return fmt.Sprintf(`{"unreadable":%q}`, err.Error())
	}
	if len(b) > r.cfg.MaxOutput {
		return fmt.Sprintf(`{"left_out":"%d bytes of JSON, over the limit"}`, len(b))
	}
	return string(b)
}

func (r *Recorder) value(m protoreflect.Message) any {
	if strings.HasPrefix(string(m.Descriptor().FullName()), "google.protobuf.") {
		b, err := protojson.Marshal(m.Interface())
		if err != nil {
			return nil
		}
		var v any
		_ = json.Unmarshal(b, &v)
		return v
	}
	out := map[string]any{}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := fd.JSONName()
		switch {
		case redacted(fd):
			out[name] = redaction(fd, v)
		case fd.IsMap():
			mm := map[string]any{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				mm[k.String()] = r.scalar(fd.MapValue(), mv)
				return true
			})
			out[name] = mm
		case fd.IsList():
			l := v.List()
			items := make([]any, 0, l.Len())
			for i := range l.Len() {
				item := r.scalar(fd, l.Get(i))
				if fd.Name() == "env" {
					item = redactEnv(l.Get(i).String())
				}
				items = append(items, item)
			}
			out[name] = items
		default:
			out[name] = r.scalar(fd, v)
		}
		return true
	})
	return out
}

func (r *Recorder) scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return r.value(v.Message())
	case protoreflect.BytesKind:
		return r.content(v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int32(v.Enum())
	case protoreflect.StringKind:
		s := v.String()
		if len(s) > r.cfg.MaxContent {
			return r.content([]byte(s))
		}
		return s
	default:
		return v.Interface()
	}
}

// content keeps text up to MaxContent as it is; anything else, its size,
// SHA-256 and, for text, its first MaxContent bytes.
func (r *Recorder) content(b []byte) any {
	if len(b) <= r.cfg.MaxContent && utf8.Valid(b) {
		return string(b)
	}
	sum := sha256.Sum256(b)
	out := map[string]any{"size": len(b), "sha256": hex.EncodeToString(sum[:])}
	head := b[:min(len(b), r.cfg.MaxContent)]
	// A rune cut at the bound is dropped; binary content has no head.
	for i := 0; i < utf8.UTFMax && len(head) > 0 && !utf8.Valid(head); i++ {
		head = head[:len(head)-1]
	}
	if len(head) > 0 && utf8.Valid(head) {
		out["head"] = string(head)
	}
	return out
}

// redacted reports a field marked debug_redact in its .proto (such as the
// clipboard's text): what it holds never goes into the history.
func redacted(fd protoreflect.FieldDescriptor) bool {
	o, ok := fd.Options().(*descriptorpb.FieldOptions)
	return ok && o.GetDebugRedact()
}

// redaction stands in for a redacted field: its size, never its content
// (nor a hash, which would give a short secret away).
func redaction(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	out := map[string]any{"redacted": true}
	switch {
	case fd.IsList():
		out["items"] = v.List().Len()
	case fd.IsMap():
		out["items"] = v.Map().Len()
	case fd.Kind() == protoreflect.StringKind:
		out["size"] = len(v.String())
	case fd.Kind() == protoreflect.BytesKind:
		out["size"] = len(v.Bytes())
	}
	return out
}

// redactEnv keeps a variable's name, never its value.
func redactEnv(kv string) string {
	name, _, _ := strings.Cut(kv, "=")
	return name + "=…"
}

// Refused is refused, for other recorders of calls (such as activity).
func Refused(err error) bool { return refused(err) }

// refused reports a call that never reached a session its caller may act
// on (another tenant's or a missing one, no key, no scope). It belongs to
// no session's story: recorded under the id it named, another tenant's
// attempts would land in, and be readable through, that session's history.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.NotFound, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}
