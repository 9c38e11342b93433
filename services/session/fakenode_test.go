package session

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// fakeNode stands in for a node's display and sandbox services: it records
// calls, keeps what exists, and can be told to fail or to wait.
type fakeNode struct {
	mu        sync.Mutex
	calls     []string
	fail      map[string]error
	gates     map[string]chan struct{}
	entered   map[string]chan struct{}
	displays  map[string]string
	sandboxes map[string]bool
	nextX     int
	// lacks: images the node does not hold until pulled; the node holds
	// every other.
	lacks map[string]bool
}

func newFakeNode() *fakeNode {
	return &fakeNode{
		fail:      map[string]error{},
		gates:     map[string]chan struct{}{},
		entered:   map[string]chan struct{}{},
		displays:  map[string]string{},
		sandboxes: map[string]bool{},
		nextX:     101,
	}
}

// failOn makes op ("sandbox.create", "display.create", "display.screenshot",
// "display.delete", "sandbox.delete") return err; nil clears it.
func (n *fakeNode) failOn(op string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		delete(n.fail, op)
	} else {
		n.fail[op] = err
	}
}

// hold makes op wait until the returned release is called (or its context
// ends); entered closes when a call reaches it.
func (n *fakeNode) hold(op string) (entered <-chan struct{}, release func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	gate, in := make(chan struct{}), make(chan struct{})
	n.gates[op], n.entered[op] = gate, in
	var once sync.Once
	return in, func() { once.Do(func() { close(gate) }) }
}

func (n *fakeNode) enter(ctx context.Context, op, id string) error {
	n.mu.Lock()
	n.calls = append(n.calls, op+" "+id)
	gate, in := n.gates[op], n.entered[op]
	if gate != nil {
		delete(n.gates, op)
		delete(n.entered, op)
	}
	err := n.fail[op]
	n.mu.Unlock()
	if gate != nil {
		close(in)
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (n *fakeNode) Calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

// Live lists what exists on the node.
func (n *fakeNode) Live() (displays, sandboxes int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.displays), len(n.sandboxes)
}

type fakeDisplay struct {
	displayv1.DisplayServiceClient // methods the session service never calls
	n                              *fakeNode
}

func (d fakeDisplay) CreateDisplay(ctx context.Context, in *displayv1.CreateDisplayRequest, _ ...grpc.CallOption) (*displayv1.CreateDisplayResponse, error) {
	if err := d.n.enter(ctx, "display.create", in.GetSessionId()); err != nil {
		return nil, err
	}
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	x := fmt.Sprintf(":%d", d.n.nextX)
	d.n.nextX++
	d.n.displays[in.GetSessionId()] = x
	return &displayv1.CreateDisplayResponse{Display: &displayv1.Display{
		SessionId: in.GetSessionId(), XDisplay: x, Width: in.GetWidth(), Height: in.GetHeight(), Depth: in.GetDepth(),
	}}, nil
}

func (d fakeDisplay) DeleteDisplay(ctx context.Context, in *displayv1.DeleteDisplayRequest, _ ...grpc.CallOption) (*displayv1.DeleteDisplayResponse, error) {
	if err := d.n.enter(ctx, "display.delete", in.GetSessionId()); err != nil {
		return nil, err
	}
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	delete(d.n.displays, in.GetSessionId())
	return &displayv1.DeleteDisplayResponse{}, nil
}

func (d fakeDisplay) Screenshot(ctx context.Context, in *displayv1.ScreenshotRequest, _ ...grpc.CallOption) (*displayv1.ScreenshotResponse, error) {
	if err := d.n.enter(ctx, "display.screenshot", in.GetSessionId()); err != nil {
		return nil, err
	}
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	if _, ok := d.n.displays[in.GetSessionId()]; !ok {
		return nil, fmt.Errorf("no display for %s", in.GetSessionId())
	}
	return &displayv1.ScreenshotResponse{ContentType: "image/png", Data: []byte("png"), Width: 1, Height: 1}, nil
}

type fakeSandbox struct {
	sandboxv1.SandboxServiceClient
	n *fakeNode
}

func (s fakeSandbox) CreateSandbox(ctx context.Context, in *sandboxv1.CreateSandboxRequest, _ ...grpc.CallOption) (*sandboxv1.CreateSandboxResponse, error) {
	if err := s.n.enter(ctx, "sandbox.create", in.GetSessionId()); err != nil {
		return nil, err
	}
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	s.n.sandboxes[in.GetSessionId()] = true
	return &sandboxv1.CreateSandboxResponse{Sandbox: &sandboxv1.Sandbox{SessionId: in.GetSessionId()}}, nil
}

func (s fakeSandbox) CommitSandbox(ctx context.Context, in *sandboxv1.CommitSandboxRequest, _ ...grpc.CallOption) (*sandboxv1.CommitSandboxResponse, error) {
	if err := s.n.enter(ctx, "sandbox.commit", in.GetSessionId()); err != nil {
		return nil, err
	}
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	if !s.n.sandboxes[in.GetSessionId()] {
		return nil, status.Errorf(codes.NotFound, "no sandbox %s", in.GetSessionId())
	}
	return &sandboxv1.CommitSandboxResponse{Image: "docker.io/" + in.GetImage(), Digest: "sha256:" + strings.Repeat("c", 64), Size: 42}, nil
}

func (s fakeSandbox) DeleteSandbox(ctx context.Context, in *sandboxv1.DeleteSandboxRequest, _ ...grpc.CallOption) (*sandboxv1.DeleteSandboxResponse, error) {
	if err := s.n.enter(ctx, "sandbox.delete", in.GetSessionId()); err != nil {
		return nil, err
	}
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	delete(s.n.sandboxes, in.GetSessionId())
	return &sandboxv1.DeleteSandboxResponse{}, nil
}

func (s fakeSandbox) StartProcess(ctx context.Context, in *sandboxv1.StartProcessRequest, _ ...grpc.CallOption) (*sandboxv1.StartProcessResponse, error) {
	if err := s.n.enter(ctx, "sandbox.start "+strings.Join(in.GetArgv(), " "), in.GetSessionId()); err != nil {
		return nil, err
	}
	return &sandboxv1.StartProcessResponse{}, nil
}

func (s fakeSandbox) FreezeSandbox(ctx context.Context, in *sandboxv1.FreezeSandboxRequest, _ ...grpc.CallOption) (*sandboxv1.FreezeSandboxResponse, error) {
	if err := s.n.enter(ctx, "sandbox.freeze", in.GetSessionId()); err != nil {
		return nil, err
	}
	return &sandboxv1.FreezeSandboxResponse{}, nil
}

func (s fakeSandbox) ThawSandbox(ctx context.Context, in *sandboxv1.ThawSandboxRequest, _ ...grpc.CallOption) (*sandboxv1.ThawSandboxResponse, error) {
	if err := s.n.enter(ctx, "sandbox.thaw", in.GetSessionId()); err != nil {
		return nil, err
	}
	return &sandboxv1.ThawSandboxResponse{}, nil
}

func (s fakeSandbox) CreateSnapshot(ctx context.Context, in *sandboxv1.CreateSnapshotRequest, _ ...grpc.CallOption) (*sandboxv1.CreateSnapshotResponse, error) {
	if err := s.n.enter(ctx, "sandbox.snapshot", in.GetSessionId()); err != nil {
		return nil, err
	}
	return &sandboxv1.CreateSnapshotResponse{Snapshot: &sandboxv1.Snapshot{SnapshotId: "snap-" + in.GetSessionId(), SessionId: in.GetSessionId()}}, nil
}

func (s fakeSandbox) DeleteSnapshot(ctx context.Context, in *sandboxv1.DeleteSnapshotRequest, _ ...grpc.CallOption) (*sandboxv1.DeleteSnapshotResponse, error) {
	if err := s.n.enter(ctx, "sandbox.snapshot.delete", in.GetSnapshotId()); err != nil {
		return nil, err
	}
	return &sandboxv1.DeleteSnapshotResponse{}, nil
}

// fakeNodes maps node ids to fake nodes.
type fakeNodes map[string]*fakeNode

func (f fakeNodes) Display(id string) (displayv1.DisplayServiceClient, error) {
	n, ok := f[id]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", id, ErrUnknownNode)
	}
	return fakeDisplay{n: n}, nil
}

func (f fakeNodes) Sandbox(id string) (sandboxv1.SandboxServiceClient, error) {
	n, ok := f[id]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", id, ErrUnknownNode)
	}
	return fakeSandbox{n: n}, nil
}

func (f fakeNodes) Image(id string) (imagev1.ImageServiceClient, error) {
	n, ok := f[id]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", id, ErrUnknownNode)
	}
	return fakeImages{n: n}, nil
}

// fakeImages is a node's image service: it holds every image but those in
// lacks, and a pull of one of those streams progress over two layers.
type fakeImages struct {
	imagev1.ImageServiceClient // methods no test calls
	n                          *fakeNode
}

func (f fakeImages) GetImage(_ context.Context, in *imagev1.GetImageRequest, _ ...grpc.CallOption) (*imagev1.GetImageResponse, error) {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if f.n.lacks[in.GetRef()] {
		return nil, status.Errorf(codes.NotFound, "image %s: not found on this node (pull it first)", in.GetRef())
	}
	return &imagev1.GetImageResponse{Image: &imagev1.Image{Ref: in.GetRef(), Digest: "sha256:" + strings.Repeat("d", 64)}}, nil
}

func (f fakeImages) GetImageUsage(context.Context, *imagev1.GetImageUsageRequest, ...grpc.CallOption) (*imagev1.GetImageUsageResponse, error) {
	return &imagev1.GetImageUsageResponse{}, nil
}

func (f fakeImages) PullImage(ctx context.Context, in *imagev1.PullImageRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[imagev1.PullImageResponse], error) {
	if err := f.n.enter(ctx, "image.pull", in.GetRef()); err != nil {
		return nil, err
	}
	f.n.mu.Lock()
	delete(f.n.lacks, in.GetRef())
	f.n.mu.Unlock()
	prog := func(phase string, layers int32, done int64) *imagev1.PullImageResponse {
		return &imagev1.PullImageResponse{Event: &imagev1.PullImageResponse_Progress{Progress: &imagev1.PullProgress{
			Phase: phase, LayersDone: layers, LayersTotal: 2, DoneBytes: done, TotalBytes: 1000}}}
	}
	return &fakePullStream{msgs: []*imagev1.PullImageResponse{
		{Event: &imagev1.PullImageResponse_Progress{Progress: &imagev1.PullProgress{Phase: "resolving"}}},
		prog("fetching", 0, 0), prog("fetching", 0, 300), prog("fetching", 1, 600), prog("fetching", 1, 800), prog("fetching", 2, 1000),
		{Event: &imagev1.PullImageResponse_Image{Image: &imagev1.Image{Ref: in.GetRef(), Digest: "sha256:" + strings.Repeat("d", 64)}}},
	}}, nil
}

type fakePullStream struct {
	grpc.ClientStream
	msgs []*imagev1.PullImageResponse
}

func (s *fakePullStream) Recv() (*imagev1.PullImageResponse, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}
