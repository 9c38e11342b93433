package cluster

import (
	"context"
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
	s := NewNodeService(reg, nil)
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
