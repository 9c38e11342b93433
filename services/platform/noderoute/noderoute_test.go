package noderoute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/grpcserver/grpcservertest"
	"github.com/deskgrid/deskgrid/services/platform/natsembed/natstest"
)

// testNode is a node whose display and sandbox answer with its name.
type testNode struct {
	displayv1.UnimplementedDisplayServiceServer
	sandboxv1.UnimplementedSandboxServiceServer
	name string
	addr string
	srv  *grpcservertest.Server
}

func (n *testNode) GetDisplay(_ context.Context, req *displayv1.GetDisplayRequest) (*displayv1.GetDisplayResponse, error) {
	return &displayv1.GetDisplayResponse{Display: &displayv1.Display{SessionId: req.GetSessionId(), XDisplay: n.name}}, nil
}

func (n *testNode) ConnectVNC(stream grpc.BidiStreamingServer[displayv1.ConnectVNCRequest, displayv1.ConnectVNCResponse]) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&displayv1.ConnectVNCResponse{Data: append([]byte(n.name+":"), m.GetData()...)}); err != nil {
			return err
		}
	}
}

func (n *testNode) Exec(req *sandboxv1.ExecRequest, stream grpc.ServerStreamingServer[sandboxv1.ExecResponse]) error {
	for _, a := range req.GetArgv() {
		if err := stream.Send(&sandboxv1.ExecResponse{Output: &sandboxv1.ExecResponse_Stdout{Stdout: []byte(n.name + ":" + a)}}); err != nil {
			return err
		}
	}
	return nil
}

func startNode(t *testing.T, name string) *testNode {
	t.Helper()
	n := &testNode{name: name}
	n.srv = grpcservertest.Start(t, func(r grpc.ServiceRegistrar) {
		displayv1.RegisterDisplayServiceServer(r, n)
		sandboxv1.RegisterSandboxServiceServer(r, n)
	}, grpcservertest.Options{})
	n.addr = n.srv.Addr
	return n
}

// sessionMap is a session map the test changes.
type sessionMap struct {
	mu      sync.Mutex
	m       map[string]string
	lookups int
}

func (s *sessionMap) set(id, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if addr == "" {
		delete(s.m, id)
	} else {
		s.m[id] = addr
	}
}

func (s *sessionMap) Resolve(_ context.Context, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups++
	a, ok := s.m[id]
	if !ok {
		return "", fmt.Errorf("session %s: %w", id, ErrNotPlaced)
	}
	return a, nil
}

func (s *sessionMap) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookups
}

func newRouter(t *testing.T, sm *sessionMap) *Router {
	t.Helper()
	r, err := New(Options{Resolver: sm, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func xdisplay(t *testing.T, r *Router, id string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := displayv1.NewDisplayServiceClient(r).GetDisplay(ctx, &displayv1.GetDisplayRequest{SessionId: id})
	return resp.GetDisplay().GetXDisplay(), err
}

func TestUnaryRoutesBySession(t *testing.T) {
	a, b := startNode(t, "a"), startNode(t, "b")
	sm := &sessionMap{m: map[string]string{"s1": a.addr, "s2": b.addr}}
	r := newRouter(t, sm)
	for _, tt := range []struct{ id, want string }{{"s1", "a"}, {"s2", "b"}, {"s1", "a"}} {
		got, err := xdisplay(t, r, tt.id)
		if err != nil || got != tt.want {
			t.Fatalf("%s: got %q, %v; want node %s", tt.id, got, err, tt.want)
		}
	}
	if n := sm.count(); n != 2 {
		t.Fatalf("%d look-ups, want 2 (the second call to s1 is cached)", n)
	}
	if _, err := xdisplay(t, r, "nowhere"); status.Code(err) != codes.NotFound {
		t.Fatalf("unplaced session: %v, want NotFound", err)
	}
	if _, err := xdisplay(t, r, ""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no session id: %v, want InvalidArgument", err)
	}
}

// A session event drops the cached node: the next call looks up afresh.
func TestEventsInvalidate(t *testing.T) {
	a, b := startNode(t, "a"), startNode(t, "b")
	sm := &sessionMap{m: map[string]string{"s1": a.addr}}
	r := newRouter(t, sm)
	_, nc, _ := natstest.Start(t)
	sub, err := r.Subscribe(nc, "deskgrid.events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if got, _ := xdisplay(t, r, "s1"); got != "a" {
		t.Fatalf("got %q", got)
	}
	sm.set("s1", b.addr)
	if err := nc.Publish("deskgrid.events.s1.session.state_changed.v1", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := xdisplay(t, r, "s1")
		if err == nil && got == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still routed to %q (%v) after the event", got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A node that stopped answering: the call fails Unavailable, not hanging,
// and the stale entry is dropped so the next call finds the new node.
func TestStaleEntryDroppedOnUnavailable(t *testing.T) {
	a, b := startNode(t, "a"), startNode(t, "b")
	sm := &sessionMap{m: map[string]string{"s1": a.addr}}
	r := newRouter(t, sm)
	if got, _ := xdisplay(t, r, "s1"); got != "a" {
		t.Fatalf("got %q", got)
	}
	a.srv.Close()
	sm.set("s1", b.addr)
	if _, err := xdisplay(t, r, "s1"); status.Code(err) != codes.Unavailable {
		t.Fatalf("call to a stopped node: %v, want Unavailable", err)
	}
	if got, err := xdisplay(t, r, "s1"); err != nil || got != "b" {
		t.Fatalf("after the failure: %q, %v; want b", got, err)
	}
}

func TestServerStream(t *testing.T) {
	a, b := startNode(t, "a"), startNode(t, "b")
	r := newRouter(t, &sessionMap{m: map[string]string{"s1": a.addr, "s2": b.addr}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for id, want := range map[string]string{"s1": "a", "s2": "b"} {
		st, err := sandboxv1.NewSandboxServiceClient(r).Exec(ctx, &sandboxv1.ExecRequest{SessionId: id, Argv: []string{"x", "y"}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(m.GetStdout()))
		}
		if len(got) != 2 || got[0] != want+":x" || got[1] != want+":y" {
			t.Fatalf("%s: %v", id, got)
		}
	}
}

func TestBidiStream(t *testing.T) {
	a, b := startNode(t, "a"), startNode(t, "b")
	r := newRouter(t, &sessionMap{m: map[string]string{"s1": a.addr, "s2": b.addr}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := displayv1.NewDisplayServiceClient(r).ConnectVNC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Header waits for the first message, which opens the stream.
	hdr := make(chan error, 1)
	go func() { _, err := st.Header(); hdr <- err }()
	if err := st.Send(&displayv1.ConnectVNCRequest{SessionId: "s2", Data: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	if err := <-hdr; err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || string(m.GetData()) != "b:hello" {
		t.Fatalf("first reply %q, %v", m.GetData(), err)
	}
	if err := st.Send(&displayv1.ConnectVNCRequest{Data: []byte("more")}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || string(m.GetData()) != "b:more" {
		t.Fatalf("second reply %q, %v", m.GetData(), err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want EOF", err)
	}

	// A stream closed before it named a session fails clearly.
	st2, _ := displayv1.NewDisplayServiceClient(r).ConnectVNC(ctx)
	_ = st2.CloseSend()
	if _, err := st2.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream without a session: %v", err)
	}
	// Receiving before sending waits and gives up with the context.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	st3, _ := displayv1.NewDisplayServiceClient(r).ConnectVNC(short)
	if _, err := st3.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("receive before any send: %v", err)
	}
}

// Unary calls without a deadline get one, so a silent node cannot hang them.
func TestDefaultDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close() // accepts, never speaks
	r, err := New(Options{Resolver: &sessionMap{m: map[string]string{"s1": lis.Addr().String()}}, CallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = displayv1.NewDisplayServiceClient(r).GetDisplay(context.Background(), &displayv1.GetDisplayRequest{SessionId: "s1"})
	if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Unavailable {
		t.Fatalf("call to a silent node: %v", err)
	}
}

// A health check names no session: the router answers it for all nodes.
func TestHealthCheck(t *testing.T) {
	var down error
	r, err := New(Options{Resolver: &sessionMap{m: map[string]string{}}, Health: func(context.Context) error { return down }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := healthpb.NewHealthClient(r).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if s := check(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("status %s", s)
	}
	down = errors.New("redis down")
	if s := check(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("status %s with the map unreachable", s)
	}
}
