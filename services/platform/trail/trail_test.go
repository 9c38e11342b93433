package trail_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
	"github.com/deskgrid/deskgrid/services/platform/trail"
)

var png = []byte("\x89PNG\r\n\x1a\nnot really an image")

// node answers the calls the test makes, as a display and sandbox would.
type node struct {
	displayv1.UnimplementedDisplayServiceServer
	sandboxv1.UnimplementedSandboxServiceServer
}

func (node) Screenshot(context.Context, *displayv1.ScreenshotRequest) (*displayv1.ScreenshotResponse, error) {
	return &displayv1.ScreenshotResponse{Data: png, ContentType: "image/png", Width: 64, Height: 48}, nil
}

func (node) PerformActions(_ context.Context, r *displayv1.PerformActionsRequest) (*displayv1.PerformActionsResponse, error) {
	if r.GetLeaseToken() == 7 {
		return nil, status.Error(codes.FailedPrecondition, "stale lease")
	}
	return &displayv1.PerformActionsResponse{Cursor: &displayv1.Point{X: 3, Y: 4}}, nil
}

// clipped is what the test's clipboard holds.
const clipped = "pw: correct horse battery staple"

func (node) GetClipboard(context.Context, *displayv1.GetClipboardRequest) (*displayv1.GetClipboardResponse, error) {
	return &displayv1.GetClipboardResponse{Text: clipped, Owned: true}, nil
}

func (node) SetClipboard(context.Context, *displayv1.SetClipboardRequest) (*displayv1.SetClipboardResponse, error) {
	return &displayv1.SetClipboardResponse{}, nil
}

func (node) CreateDisplay(context.Context, *displayv1.CreateDisplayRequest) (*displayv1.CreateDisplayResponse, error) {
	return &displayv1.CreateDisplayResponse{}, nil
}

func (node) Exec(r *sandboxv1.ExecRequest, s grpc.ServerStreamingServer[sandboxv1.ExecResponse]) error {
	// One message reused, as a handler may.
	m := &sandboxv1.ExecResponse{}
	for _, line := range []string{"hello\n", "world\n"} {
		m.Output = &sandboxv1.ExecResponse_Stdout{Stdout: []byte(line)}
		if err := s.Send(m); err != nil {
			return err
		}
	}
	m.Output = &sandboxv1.ExecResponse_Exit{Exit: &sandboxv1.ExecExit{ExitCode: 3}}
	return s.Send(m)
}

func (node) WriteFile(context.Context, *sandboxv1.WriteFileRequest) (*sandboxv1.WriteFileResponse, error) {
	return &sandboxv1.WriteFileResponse{}, nil
}

// asKey stands in for the authentication interceptor: it names the caller
// from the "test-key" metadata, "system" being the internal principal.
func asKey(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("test-key"); len(v) > 0 {
		return auth.WithPrincipal(ctx, auth.Principal{Tenant: "acme", KeyID: v[0], System: v[0] == auth.SystemKeyID})
	}
	return ctx
}

type harness struct {
	js      jetstream.JetStream
	rec     *trail.Recorder
	display displayv1.DisplayServiceClient
	sandbox sandboxv1.SandboxServiceClient
}

func start(t testing.TB, cfg trail.Config, pub events.Publisher) *harness {
	t.Helper()
	return startServer(t, cfg, pub, true)
}

// startServer serves the node's calls, recording them when record is set.
func startServer(t testing.TB, cfg trail.Config, pub events.Publisher, record bool) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, js := natstest.Start(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig(1, time.Hour)); err != nil {
		t.Fatal(err)
	}
	if pub == nil {
		pub = events.NewPublisher(js)
	}
	rec, err := trail.New(cfg, trail.Deps{Publisher: pub, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close(context.Background()) })
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(asKey(ctx), req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return h(srv, &ctxStream{ss, asKey(ss.Context())})
		}),
	}
	if record {
		opts = append(opts, rec.ServerOptions()...)
	}
	conn := grpcservertest.Serve(t, func(r grpc.ServiceRegistrar) {
		displayv1.RegisterDisplayServiceServer(r, node{})
		sandboxv1.RegisterSandboxServiceServer(r, node{})
	}, grpcservertest.Options{ServerOptions: opts})
	return &harness{js: js, rec: rec, display: displayv1.NewDisplayServiceClient(conn), sandbox: sandboxv1.NewSandboxServiceClient(conn)}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// recorded reads n events from the stream, in order.
func (h *harness) recorded(t *testing.T, n int) []*eventsv1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := h.js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*eventsv1.Event
	for len(out) < n {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		_, ev, err := events.Decode(ctx, m.Data(), m.Headers())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func callOf(t *testing.T, ev *eventsv1.Event) *eventsv1.Call {
	t.Helper()
	c := &eventsv1.Call{}
	if err := ev.GetPayload().UnmarshalTo(c); err != nil {
		t.Fatalf("%s: %v", ev.GetType(), err)
	}
	return c
}

func TestCallsAreRecordedWithTheirCaller(t *testing.T) {
	cfg := trail.DefaultConfig()
	cfg.MaxContent = 16
	// One worker publishes in the order of the calls; more may reorder.
	cfg.Workers = 1
	h := start(t, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	as := func(key string) context.Context { return metadata.AppendToOutgoingContext(ctx, "test-key", key) }

	// Lifecycle calls the session service makes are not part of the trail.
	if _, err := h.display.CreateDisplay(as("k1"), &displayv1.CreateDisplayRequest{SessionId: "s-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.display.PerformActions(as("k1"), &displayv1.PerformActionsRequest{SessionId: "s-1",
		Actions: []*displayv1.Action{{Action: &displayv1.Action_Type{Type: &displayv1.TypeText{Text: "hello"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.display.PerformActions(as("k1"), &displayv1.PerformActionsRequest{SessionId: "s-1", LeaseToken: 7}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale lease: %v", err)
	}
	if _, err := h.display.Screenshot(as("k2"), &displayv1.ScreenshotRequest{SessionId: "s-1"}); err != nil {
		t.Fatal(err)
	}
	st, err := h.sandbox.Exec(metadata.AppendToOutgoingContext(as(auth.SystemKeyID), trail.RunIDMD, "r-9"),
		&sandboxv1.ExecRequest{SessionId: "s-1", Argv: []string{"env"}, Env: []string{"TOKEN=hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	secret := "the first sixteen bytes, then a secret"
	if _, err := h.sandbox.WriteFile(as("k1"), &sandboxv1.WriteFileRequest{SessionId: "s-1", Path: "notes.txt", Content: []byte(secret)}); err != nil {
		t.Fatal(err)
	}

	evs := h.recorded(t, 5)
	wantTypes := []string{"trail.perform_actions.v1", "trail.perform_actions.v1", trail.TypeScreenshot, "trail.exec.v1", "trail.write_file.v1"}
	for i, ev := range evs {
		if ev.GetType() != wantTypes[i] || ev.GetSessionId() != "s-1" || ev.GetTenant() != "acme" {
			t.Fatalf("event %d: %s for %s of %q, want %s for s-1 of acme", i, ev.GetType(), ev.GetSessionId(), ev.GetTenant(), wantTypes[i])
		}
	}
	act := callOf(t, evs[0])
	if act.GetCaller().GetKeyId() != "k1" || act.GetTool() != "display.PerformActions" || !strings.Contains(act.GetInput(), `"text":"hello"`) || !strings.Contains(act.GetOutput(), `"x":3`) {
		t.Fatalf("action = %v", act)
	}
	if stale := callOf(t, evs[1]); stale.GetCode() != int32(codes.FailedPrecondition) || stale.GetError() != "stale lease" {
		t.Fatalf("refused action = %v", stale)
	}
	shot := callOf(t, evs[2])
	if shot.GetCaller().GetKeyId() != "k2" || !bytes.Equal(shot.GetData(), png) || shot.GetContentType() != "image/png" || strings.Contains(shot.GetOutput(), "data\"") {
		t.Fatalf("screenshot = %v", shot)
	}
	exec := callOf(t, evs[3])
	if exec.GetCaller().GetKeyId() != auth.SystemKeyID || exec.GetCaller().GetRunId() != "r-9" || evs[3].GetRunId() != "r-9" {
		t.Fatalf("exec caller = %v, envelope run %q", exec.GetCaller(), evs[3].GetRunId())
	}
	if strings.Contains(exec.GetInput(), "hunter2") || !strings.Contains(exec.GetInput(), "TOKEN=") {
		t.Fatalf("exec input keeps an environment value or loses its name: %s", exec.GetInput())
	}
	lines := strings.Split(exec.GetOutput(), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"stdout":"hello\n"`) || !strings.Contains(lines[1], "world") || !strings.Contains(lines[2], `"exitCode":3`) {
		t.Fatalf("exec output = %q", exec.GetOutput())
	}
	write := callOf(t, evs[4])
	var in struct {
		Path    string
		Content struct {
			Size   int
			SHA256 string
			Head   string
		}
	}
	if err := json.Unmarshal([]byte(write.GetInput()), &in); err != nil {
		t.Fatalf("write input %s: %v", write.GetInput(), err)
	}
	if strings.Contains(write.GetInput(), "secret") || in.Path != "notes.txt" || in.Content.Size != len(secret) || len(in.Content.SHA256) != 64 || in.Content.Head != secret[:16] {
		t.Fatalf("write input = %s", write.GetInput())
	}
}

// A caller can only name a run or viewer when it is another deskgrid
// service: an API key cannot pin its calls on someone else's run.
func TestOnlyTheSystemNamesARun(t *testing.T) {
	h := start(t, trail.DefaultConfig(), nil)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "test-key", "k1", trail.RunIDMD, "r-other", trail.ViewerMD, "v-other")
	if _, err := h.display.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "s-1"}); err != nil {
		t.Fatal(err)
	}
	c := callOf(t, h.recorded(t, 1)[0])
	if c.GetCaller().GetRunId() != "" || c.GetCaller().GetViewerTokenId() != "" || c.GetCaller().GetKeyId() != "k1" {
		t.Fatalf("caller = %v", c.GetCaller())
	}
}

// stuck is a publisher that does not return until released.
type stuck struct {
	release chan struct{}
	once    sync.Once
	entered chan struct{}
}

func (s *stuck) Publish(ctx context.Context, _ events.Meta, _ proto.Message) (*eventsv1.Event, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return &eventsv1.Event{}, nil
}

// A call never waits for its record: when publishing falls behind and the
// queue is full, records are dropped and counted.
func TestAFullQueueDropsRecordsNotCalls(t *testing.T) {
	pub := &stuck{release: make(chan struct{}), entered: make(chan struct{})}
	h := start(t, trail.Config{Queue: 1, Workers: 1}, pub)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shoot := func() {
		if _, err := h.display.Screenshot(ctx, &displayv1.ScreenshotRequest{SessionId: "s-1"}); err != nil {
			t.Fatal(err)
		}
	}
	shoot()
	select {
	case <-pub.entered:
	case <-ctx.Done():
		t.Fatal("the worker never published")
	}
	for range 5 {
		shoot()
	}
	if st := h.rec.Stats(); st.Dropped != 4 {
		t.Fatalf("stats = %+v, want 4 dropped (one in the worker, one queued)", st)
	}
	close(pub.release)
	if err := h.rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.rec.Stats(); st.Published != 2 || st.Dropped != 4 {
		t.Fatalf("stats after close = %+v", st)
	}
}

// The clipboard's text is never kept in the history, either way it goes:
// its record says how long it was, and nothing more.
func TestClipboardTextIsRedacted(t *testing.T) {
	cfg := trail.DefaultConfig()
	cfg.Workers = 1
	h := start(t, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.display.SetClipboard(ctx, &displayv1.SetClipboardRequest{SessionId: "s-1", Text: clipped, Selection: displayv1.Selection_SELECTION_PRIMARY}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.display.GetClipboard(ctx, &displayv1.GetClipboardRequest{SessionId: "s-1"}); err != nil {
		t.Fatal(err)
	}
	evs := h.recorded(t, 2)
	set, get := callOf(t, evs[0]), callOf(t, evs[1])
	if evs[0].GetType() != "trail.set_clipboard.v1" || evs[1].GetType() != "trail.get_clipboard.v1" {
		t.Fatalf("types %s, %s", evs[0].GetType(), evs[1].GetType())
	}
	for _, c := range []*eventsv1.Call{set, get} {
		for _, field := range []string{c.GetInput(), c.GetOutput()} {
			if strings.Contains(field, "horse") {
				t.Fatalf("%s keeps the clipboard's text: %s", c.GetTool(), field)
			}
		}
	}
	var in struct {
		Selection string
		Text      struct {
			Redacted bool
			Size     int
		}
	}
	if err := json.Unmarshal([]byte(set.GetInput()), &in); err != nil {
		t.Fatalf("set input %s: %v", set.GetInput(), err)
	}
	if in.Selection != "SELECTION_PRIMARY" || !in.Text.Redacted || in.Text.Size != len(clipped) {
		t.Fatalf("set input = %s", set.GetInput())
	}
	var out struct {
		Owned bool
		Text  struct {
			Redacted bool
			Size     int
		}
	}
	if err := json.Unmarshal([]byte(get.GetOutput()), &out); err != nil {
		t.Fatalf("get output %s: %v", get.GetOutput(), err)
	}
	if !out.Owned || !out.Text.Redacted || out.Text.Size != len(clipped) {
		t.Fatalf("get output = %s", get.GetOutput())
	}
}

func TestTracked(t *testing.T) {
	for m, want := range map[string]bool{
		displayv1.DisplayService_PerformActions_FullMethodName: true,
		displayv1.DisplayService_Screenshot_FullMethodName:     true,
		displayv1.DisplayService_ConnectVNC_FullMethodName:     true,
		sandboxv1.SandboxService_Exec_FullMethodName:           true,
		sandboxv1.SandboxService_RunShell_FullMethodName:       true,
		sandboxv1.SandboxService_WriteFile_FullMethodName:      true,
		sandboxv1.SandboxService_ApplyChanges_FullMethodName:   true,
		sandboxv1.SandboxService_DiscardChanges_FullMethodName: true,
		displayv1.DisplayService_CreateDisplay_FullMethodName:  false,
		sandboxv1.SandboxService_DeleteSandbox_FullMethodName:  false,
		"/deskgrid.session.v1.SessionService/CreateSession":    false,
		"/grpc.health.v1.Health/Check":                         false,
	} {
		if got := trail.Tracked(m); got != want {
			t.Errorf("Tracked(%s) = %v, want %v", m, got, want)
		}
	}
}
