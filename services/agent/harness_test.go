package agent

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/agent/internal/provider"
	"github.com/deskgrid/deskgrid/services/agent/lease"
	"github.com/deskgrid/deskgrid/services/agent/store"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
)

// fakeNode is a display and sandbox service that records what it is asked
// and keeps files in memory; it fences input by lease token like the display.
type fakeNode struct {
	displayv1.UnimplementedDisplayServiceServer
	sandboxv1.UnimplementedSandboxServiceServer
	mu      sync.Mutex
	actions []*displayv1.Action
	tokens  []int64
	// released are the lease tokens given up at the display.
	released []int64
	execs    [][]string
	files    map[string][]byte
	png      []byte
	token    int64
	block    chan struct{} // when set, Exec and RunShell wait for it or the call's end
	shell    []string      // commands run in the persistent shell
	restart  int
	scales   []*displayv1.Size // scale_to of each display call
	shots    map[[2]int32][]byte
	rec      recorder
}

func newFakeNode() *fakeNode {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	var b bytes.Buffer
	_ = png.Encode(&b, img)
	return &fakeNode{files: map[string][]byte{}, png: b.Bytes(), shots: map[[2]int32][]byte{}}
}

// unscale maps a point in scale_to space to the 1280x800 screen, as the
// display does.
func unscale(p *displayv1.Point, sc *displayv1.Size) {
	if p == nil || sc == nil || sc.GetWidth() == 0 {
		return
	}
	p.X = p.X * 1280 / sc.GetWidth()
	p.Y = p.Y * 800 / sc.GetHeight()
}

func (f *fakeNode) RunShell(ctx context.Context, req *sandboxv1.RunShellRequest) (*sandboxv1.RunShellResponse, error) {
	f.mu.Lock()
	f.shell = append(f.shell, req.GetCommand())
	block := f.block
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if req.GetCommand() == "false" {
		return &sandboxv1.RunShellResponse{ExitCode: 1}, nil
	}
	return &sandboxv1.RunShellResponse{Output: []byte("ran: " + req.GetCommand() + "\n")}, nil
}

func (f *fakeNode) RestartShell(context.Context, *sandboxv1.RestartShellRequest) (*sandboxv1.RestartShellResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restart++
	return &sandboxv1.RestartShellResponse{}, nil
}

func (f *fakeNode) GetDisplay(_ context.Context, req *displayv1.GetDisplayRequest) (*displayv1.GetDisplayResponse, error) {
	return &displayv1.GetDisplayResponse{Display: &displayv1.Display{SessionId: req.GetSessionId(), Width: 1280, Height: 800}}, nil
}

// shot returns the screen, at size when set; f.mu is held.
func (f *fakeNode) shot(size *displayv1.Size) *displayv1.ScreenshotResponse {
	if size == nil || size.GetWidth() == 0 {
		return &displayv1.ScreenshotResponse{ContentType: "image/png", Data: f.png, Width: 1280, Height: 800}
	}
	k := [2]int32{size.GetWidth(), size.GetHeight()}
	if f.shots[k] == nil {
		var b bytes.Buffer
		_ = png.Encode(&b, image.NewRGBA(image.Rect(0, 0, int(k[0]), int(k[1]))))
		f.shots[k] = b.Bytes()
	}
	return &displayv1.ScreenshotResponse{ContentType: "image/png", Data: f.shots[k], Width: k[0], Height: k[1]}
}

func (f *fakeNode) Screenshot(_ context.Context, req *displayv1.ScreenshotRequest) (*displayv1.ScreenshotResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scales = append(f.scales, req.GetScaleTo())
	return f.shot(req.GetScaleTo()), nil
}

func (f *fakeNode) PerformActions(_ context.Context, req *displayv1.PerformActionsRequest) (*displayv1.PerformActionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.GetReleaseLease() && len(req.GetActions()) == 0 {
		f.released = append(f.released, req.GetLeaseToken())
		return &displayv1.PerformActionsResponse{}, nil
	}
	if req.GetLeaseToken() < f.token || (f.token > 0 && req.GetLeaseToken() == 0) {
		return nil, status.Errorf(codes.FailedPrecondition, "input lease token %d is older than %d", req.GetLeaseToken(), f.token)
	}
	f.token = req.GetLeaseToken()
	f.tokens = append(f.tokens, req.GetLeaseToken())
	f.scales = append(f.scales, req.GetScaleTo())
	resp := &displayv1.PerformActionsResponse{Cursor: &displayv1.Point{X: 10, Y: 20}}
	for _, a := range req.GetActions() {
		a = proto.Clone(a).(*displayv1.Action)
		sc := req.GetScaleTo()
		unscale(a.GetClick().GetAt(), sc)
		unscale(a.GetMouseMove().GetTo(), sc)
		unscale(a.GetScroll().GetAt(), sc)
		for _, p := range a.GetDrag().GetPath() {
			unscale(p, sc)
		}
		if z := a.GetZoom(); z != nil {
			resp.Images = append(resp.Images, f.shot(z.GetSize()))
		}
		f.actions = append(f.actions, a)
	}
	if req.GetScreenshot() {
		resp.Screenshot = f.shot(req.GetScaleTo())
	}
	return resp, nil
}

func (f *fakeNode) Exec(req *sandboxv1.ExecRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecResponse]) error {
	f.mu.Lock()
	f.execs = append(f.execs, req.GetArgv())
	block := f.block
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	out := "ran: " + req.GetArgv()[len(req.GetArgv())-1] + "\n"
	if err := stream.Send(&sandboxv1.ExecResponse{Output: &sandboxv1.ExecResponse_Stdout{Stdout: []byte(out)}}); err != nil {
		return err
	}
	return stream.Send(&sandboxv1.ExecResponse{Output: &sandboxv1.ExecResponse_Exit{Exit: &sandboxv1.ExecExit{}}})
}

func (f *fakeNode) ReadFile(_ context.Context, req *sandboxv1.ReadFileRequest) (*sandboxv1.ReadFileResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[req.GetPath()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s: no such file", req.GetPath())
	}
	return &sandboxv1.ReadFileResponse{Content: b}, nil
}

func (f *fakeNode) WriteFile(_ context.Context, req *sandboxv1.WriteFileRequest) (*sandboxv1.WriteFileResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[req.GetPath()] = append([]byte(nil), req.GetContent()...)
	return &sandboxv1.WriteFileResponse{}, nil
}

// shellCommands are the commands run through Exec or the persistent shell.
func (f *fakeNode) shellCommands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, argv := range f.execs {
		out = append(out, argv[len(argv)-1])
	}
	return append(out, f.shell...)
}

func (f *fakeNode) file(p string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.files[p])
}

// startNode serves f over a loopback gRPC server and returns a connection.
func startNode(t testing.TB, f *fakeNode) *grpc.ClientConn {
	return grpcservertest.Serve(t, func(r grpc.ServiceRegistrar) {
		displayv1.RegisterDisplayServiceServer(r, f)
		sandboxv1.RegisterSandboxServiceServer(r, f)
	}, grpcservertest.Options{})
}

// scripted is a provider answering with a fixed list of turns.
type scripted struct {
	mu    sync.Mutex
	turns []func(req provider.Request) (*provider.Response, error)
	reqs  []provider.Request
	block chan struct{}
}

func (p *scripted) Name() string                      { return "scripted" }
func (p *scripted) DefaultScreen(w, h int) (int, int) { return w, h }
func (p *scripted) Turn(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) (*provider.Response, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	i := len(p.reqs) - 1
	block := p.block
	p.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if i >= len(p.turns) {
		return &provider.Response{Message: provider.Message{Role: provider.RoleAssistant, Blocks: []provider.Block{{Kind: provider.BlockText, Text: "done"}}}, StopReason: "end_turn"}, nil
	}
	resp, err := p.turns[i](req)
	if resp != nil {
		onDelta(provider.Delta{Kind: provider.DeltaText, Text: resp.Message.Text()})
	}
	return resp, err
}

func toolTurn(calls ...*provider.ToolCall) func(provider.Request) (*provider.Response, error) {
	return func(provider.Request) (*provider.Response, error) {
		m := provider.Message{Role: provider.RoleAssistant}
		for _, c := range calls {
			m.Blocks = append(m.Blocks, provider.Block{Kind: provider.BlockToolCall, ToolCall: c})
		}
		return &provider.Response{Message: m, StopReason: "tool_use", Usage: provider.Usage{InputTokens: 100, OutputTokens: 10}}, nil
	}
}

// startSessions serves a session service and returns a connection to it.
func startSessions(t testing.TB, srvImpl sessionv1.SessionServiceServer) *grpc.ClientConn {
	return grpcservertest.Serve(t, func(r grpc.ServiceRegistrar) { sessionv1.RegisterSessionServiceServer(r, srvImpl) }, grpcservertest.Options{})
}

type harness struct {
	svc    *Service
	node   *fakeNode
	client agentv1.AgentServiceClient
}

func newHarness(t testing.TB, cfg Config, newProv func(context.Context, provider.Config) (provider.Provider, error), mut ...func(*Deps)) *harness {
	node := newFakeNode()
	conn := startNode(t, node)
	deps := Deps{
		Display: displayv1.NewDisplayServiceClient(conn), Sandbox: sandboxv1.NewSandboxServiceClient(conn), NewProvider: newProv,
		Store: store.NewMemory(), Leases: lease.NewMemory(nil), Tenancy: tenantFromMetadata,
		Sessions: sessionv1.NewSessionServiceClient(startSessions(t, &fakeSessions{})),
	}
	for _, m := range mut {
		m(&deps)
	}
	svc, err := New(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Close(ctx)
	})
	conn2 := grpcservertest.Serve(t, svc.Register, grpcservertest.Options{})
	return &harness{svc: svc, node: node, client: agentv1.NewAgentServiceClient(conn2)}
}

func fixed(p provider.Provider) func(context.Context, provider.Config) (provider.Provider, error) {
	return func(context.Context, provider.Config) (provider.Provider, error) { return p, nil }
}

// waitState polls GetRun until the run is in one of states.
func waitState(t testing.TB, c agentv1.AgentServiceClient, id string, states ...agentv1.RunState) *agentv1.Run {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := c.GetRun(context.Background(), &agentv1.GetRunRequest{RunId: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			if r.GetRun().GetState() == s {
				return r.GetRun()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %v (%s), want %v", id, r.GetRun().GetState(), r.GetRun().GetStateReason(), states)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func durationMs(ms int) *durationpb.Duration {
	return durationpb.New(time.Duration(ms) * time.Millisecond)
}

// recorder is the display's recording calls: it answers StartRecording
// with startErr when set, and notes which recordings were started and
// stopped.
type recorder struct {
	mu       sync.Mutex
	startErr error
	started  []string
	stopped  []string
}

func (f *fakeNode) StartRecording(_ context.Context, req *displayv1.StartRecordingRequest) (*displayv1.StartRecordingResponse, error) {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	if f.rec.startErr != nil {
		return nil, f.rec.startErr
	}
	id := fmt.Sprintf("rec-%d", len(f.rec.started)+1)
	f.rec.started = append(f.rec.started, req.GetSessionId()+"/"+id)
	return &displayv1.StartRecordingResponse{Recording: &displayv1.Recording{Id: id, SessionId: req.GetSessionId(), State: displayv1.RecordingState_RECORDING_STATE_RECORDING}}, nil
}

func (f *fakeNode) StopRecording(_ context.Context, req *displayv1.StopRecordingRequest) (*displayv1.StopRecordingResponse, error) {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	k := req.GetSessionId() + "/" + req.GetRecordingId()
	if !slices.Contains(f.rec.started, k) {
		return nil, status.Errorf(codes.NotFound, "recording %s not found", k)
	}
	if slices.Contains(f.rec.stopped, k) {
		return nil, status.Errorf(codes.FailedPrecondition, "recording %s has ended", k)
	}
	f.rec.stopped = append(f.rec.stopped, k)
	return &displayv1.StopRecordingResponse{Recording: &displayv1.Recording{Id: req.GetRecordingId(), State: displayv1.RecordingState_RECORDING_STATE_STOPPED}}, nil
}

// recordings returns the recordings started and stopped.
func (f *fakeNode) recordings() (started, stopped []string) {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	return slices.Clone(f.rec.started), slices.Clone(f.rec.stopped)
}
