package main

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// recordingSessions answers CreateSession with a running session and keeps
// the requests it was sent.
type recordingSessions struct {
	sessionv1.UnimplementedSessionServiceServer
	mu   sync.Mutex
	reqs []*sessionv1.CreateSessionRequest
}

func (r *recordingSessions) CreateSession(_ context.Context, req *sessionv1.CreateSessionRequest) (*sessionv1.CreateSessionResponse, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, proto.Clone(req).(*sessionv1.CreateSessionRequest))
	r.mu.Unlock()
	return &sessionv1.CreateSessionResponse{Session: &sessionv1.Session{Id: "s-aaaaaaaaaaaaaaaaaaaa", State: sessionv1.SessionState_SESSION_STATE_RUNNING}}, nil
}

// `sessions create -network` asks for a session with outbound network, and a
// create without it asks for none.
func TestCLISessionCreateNetwork(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rec := &recordingSessions{}
	sessionv1.RegisterSessionServiceServer(srv, rec)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Setenv("DESKGRID_API_KEY", "dg_0000000000000000_test")

	for _, args := range [][]string{
		{"-addr", lis.Addr().String(), "-network", "-o", "json"},
		{"-addr", lis.Addr().String(), "-o", "json"},
	} {
		var out, errb bytes.Buffer
		if err := runSessionCreate(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("sessions create %v: %v\n%s", args, err, errb.String())
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) != 2 {
		t.Fatalf("got %d creates, want 2", len(rec.reqs))
	}
	if !rec.reqs[0].GetNetwork() {
		t.Errorf("sessions create -network sent network=false")
	}
	if rec.reqs[1].GetNetwork() {
		t.Errorf("sessions create without -network sent network=true")
	}
}
