package cluster

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

func TestNodeService(t *testing.T) {
	reg, _ := newRegistry(t)
	ctx := context.Background()
	addNode(t, reg, "a", 4, map[string]string{"gpu": "true"})
	if err := reg.Register(ctx, NodeInfo{ID: "down", Address: "x:1", Capacity: placement.Capacity{Sessions: 2}}); err != nil {
		t.Fatal(err)
	}
	s := NewNodeService(reg, nil, nil)
	list, err := s.ListNodes(ctx, &sessionv1.ListNodesRequest{})
	if err != nil || len(list.GetNodes()) != 2 {
		t.Fatalf("ListNodes = %v, %v", list, err)
	}
	if a := list.GetNodes()[0]; a.GetId() != "a" || a.GetState() != sessionv1.NodeState_NODE_STATE_READY ||
		a.GetLabels()["gpu"] != "true" || a.GetCapacity().GetSessions() != 4 {
		t.Fatalf("node a = %v", a)
	}
	if d := list.GetNodes()[1]; d.GetState() != sessionv1.NodeState_NODE_STATE_DOWN {
		t.Fatalf("node without heartbeat = %v", d)
	}
	d, err := s.DrainNode(ctx, &sessionv1.DrainNodeRequest{NodeId: "a"})
	if err != nil || d.GetNode().GetState() != sessionv1.NodeState_NODE_STATE_DRAINING {
		t.Fatalf("DrainNode = %v, %v", d, err)
	}
	u, err := s.UndrainNode(ctx, &sessionv1.UndrainNodeRequest{NodeId: "a"})
	if err != nil || u.GetNode().GetState() != sessionv1.NodeState_NODE_STATE_READY {
		t.Fatalf("UndrainNode = %v, %v", u, err)
	}
	for _, tt := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"get unknown", func() error { _, err := s.GetNode(ctx, &sessionv1.GetNodeRequest{NodeId: "zz"}); return err }(), codes.NotFound},
		{"drain unknown", func() error { _, err := s.DrainNode(ctx, &sessionv1.DrainNodeRequest{NodeId: "zz"}); return err }(), codes.NotFound},
		{"get without id", func() error { _, err := s.GetNode(ctx, &sessionv1.GetNodeRequest{}); return err }(), codes.InvalidArgument},
	} {
		if status.Code(tt.err) != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, tt.err, tt.want)
		}
	}
}

// A single-machine deskgrid shows its one node through the same API:
// reserved sessions counted, drain refusing new sessions (those placed keep
// their reservation), undrain taking them again, other ids unknown.
func TestNodeServiceLocal(t *testing.T) {
	ctx := context.Background()
	local := placement.NewLocal(placement.Node{ID: "local", Address: "unix:/run/node.sock"}, 3)
	if _, err := local.Place(ctx, placement.Request{SessionID: "s1"}); err != nil {
		t.Fatal(err)
	}
	s := NewNodeService(LocalNodes{Local: local}, nil, nil)
	list, err := s.ListNodes(ctx, &sessionv1.ListNodesRequest{})
	if err != nil || len(list.GetNodes()) != 1 {
		t.Fatalf("ListNodes = %v, %v", list, err)
	}
	if n := list.GetNodes()[0]; n.GetId() != "local" || n.GetState() != sessionv1.NodeState_NODE_STATE_READY ||
		n.GetCapacity().GetSessions() != 3 || n.GetUsed().GetSessions() != 1 || n.GetAddress() != "unix:/run/node.sock" {
		t.Fatalf("local node = %v", n)
	}
	d, err := s.DrainNode(ctx, &sessionv1.DrainNodeRequest{NodeId: "local"})
	if err != nil || d.GetNode().GetState() != sessionv1.NodeState_NODE_STATE_DRAINING {
		t.Fatalf("DrainNode = %v, %v", d, err)
	}
	if _, err := local.Place(ctx, placement.Request{SessionID: "s2"}); !errors.Is(err, placement.ErrNoCapacity) {
		t.Fatalf("a draining node took a session: %v", err)
	}
	if n, err := local.Place(ctx, placement.Request{SessionID: "s1"}); err != nil || n.ID != "local" {
		t.Fatalf("a placed session lost its node while draining: %v, %v", n, err)
	}
	u, err := s.UndrainNode(ctx, &sessionv1.UndrainNodeRequest{NodeId: "local"})
	if err != nil || u.GetNode().GetState() != sessionv1.NodeState_NODE_STATE_READY {
		t.Fatalf("UndrainNode = %v, %v", u, err)
	}
	if _, err := local.Place(ctx, placement.Request{SessionID: "s2"}); err != nil {
		t.Fatalf("undrained node refused: %v", err)
	}
	if g, err := s.GetNode(ctx, &sessionv1.GetNodeRequest{NodeId: "local"}); err != nil || g.GetNode().GetUsed().GetSessions() != 2 {
		t.Fatalf("GetNode = %v, %v", g, err)
	}
	for name, err := range map[string]error{
		"get":   func() error { _, err := s.GetNode(ctx, &sessionv1.GetNodeRequest{NodeId: "other"}); return err }(),
		"drain": func() error { _, err := s.DrainNode(ctx, &sessionv1.DrainNodeRequest{NodeId: "other"}); return err }(),
	} {
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s of another node: %v", name, err)
		}
	}
}
