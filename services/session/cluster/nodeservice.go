package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// NodeSource is where the node API reads and drains nodes: the Registry of
// a cluster, or LocalNodes of a single-machine deskgrid.
type NodeSource interface {
	Snapshot(ctx context.Context, tenant string) ([]placement.NodeState, error)
	Node(ctx context.Context, id string) (placement.NodeState, error)
	SetDraining(ctx context.Context, id string, draining bool) error
}

// LocalNodes is the one node of a single-machine deskgrid as a NodeSource.
type LocalNodes struct{ Local *placement.Local }

// Snapshot implements NodeSource.
func (l LocalNodes) Snapshot(context.Context, string) ([]placement.NodeState, error) {
	return []placement.NodeState{l.Local.State()}, nil
}

// Node implements NodeSource.
func (l LocalNodes) Node(_ context.Context, id string) (placement.NodeState, error) {
	if n := l.Local.State(); n.ID == id {
		return n, nil
	}
	return placement.NodeState{}, fmt.Errorf("node %q: %w", id, ErrNodeNotFound)
}

// SetDraining implements NodeSource.
func (l LocalNodes) SetDraining(ctx context.Context, id string, draining bool) error {
	if _, err := l.Node(ctx, id); err != nil {
		return err
	}
	l.Local.SetDraining(draining)
	return nil
}

// NodeService implements sessionv1.NodeServiceServer over a NodeSource.
type NodeService struct {
	sessionv1.UnimplementedNodeServiceServer
	reg    NodeSource
	images NodeImages
	log    *slog.Logger
}

// NewNodeService returns the node API of reg; images reaches the nodes'
// image services, for PullImageOnNodes (nil: that call is refused).
func NewNodeService(reg NodeSource, images NodeImages, logger *slog.Logger) *NodeService {
	if logger == nil {
		logger = slog.Default()
	}
	return &NodeService{reg: reg, images: images, log: logger}
}

// Register registers the NodeService on r.
func (s *NodeService) Register(r grpc.ServiceRegistrar) {
	sessionv1.RegisterNodeServiceServer(r, s)
}

// ListNodes implements sessionv1.NodeServiceServer.
func (s *NodeService) ListNodes(ctx context.Context, _ *sessionv1.ListNodesRequest) (*sessionv1.ListNodesResponse, error) {
	snap, err := s.reg.Snapshot(ctx, "")
	if err != nil {
		return nil, s.status(ctx, err)
	}
	out := &sessionv1.ListNodesResponse{Nodes: make([]*sessionv1.Node, 0, len(snap))}
	for i := range snap {
		out.Nodes = append(out.Nodes, NodeProto(&snap[i]))
	}
	return out, nil
}

// GetNode implements sessionv1.NodeServiceServer.
func (s *NodeService) GetNode(ctx context.Context, req *sessionv1.GetNodeRequest) (*sessionv1.GetNodeResponse, error) {
	n, err := s.node(ctx, req.GetNodeId())
	if err != nil {
		return nil, err
	}
	return &sessionv1.GetNodeResponse{Node: n}, nil
}

// DrainNode implements sessionv1.NodeServiceServer.
func (s *NodeService) DrainNode(ctx context.Context, req *sessionv1.DrainNodeRequest) (*sessionv1.DrainNodeResponse, error) {
	n, err := s.setDraining(ctx, req.GetNodeId(), true)
	if err != nil {
		return nil, err
	}
	return &sessionv1.DrainNodeResponse{Node: n}, nil
}

// UndrainNode implements sessionv1.NodeServiceServer.
func (s *NodeService) UndrainNode(ctx context.Context, req *sessionv1.UndrainNodeRequest) (*sessionv1.UndrainNodeResponse, error) {
	n, err := s.setDraining(ctx, req.GetNodeId(), false)
	if err != nil {
		return nil, err
	}
	return &sessionv1.UndrainNodeResponse{Node: n}, nil
}

func (s *NodeService) setDraining(ctx context.Context, id string, draining bool) (*sessionv1.Node, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	if err := s.reg.SetDraining(ctx, id, draining); err != nil {
		return nil, s.status(ctx, err)
	}
	s.log.InfoContext(ctx, "node drain changed", "node", id, "draining", draining)
	return s.node(ctx, id)
}

func (s *NodeService) node(ctx context.Context, id string) (*sessionv1.Node, error) {
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	n, err := s.reg.Node(ctx, id)
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return NodeProto(&n), nil
}

func (s *NodeService) status(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrNodeNotFound):
		return status.Error(codes.NotFound, err.Error()+"; see `deskgrid nodes list`")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		s.log.WarnContext(ctx, "node registry", "err", err)
		return status.Error(codes.Unavailable, "the node registry (Redis) cannot be reached; retry shortly")
	}
}

// NodeProto is the API form of a node.
func NodeProto(n *placement.NodeState) *sessionv1.Node {
	st := sessionv1.NodeState_NODE_STATE_READY
	switch {
	case !n.Alive:
		st = sessionv1.NodeState_NODE_STATE_DOWN
	case n.Draining:
		st = sessionv1.NodeState_NODE_STATE_DRAINING
	}
	return &sessionv1.Node{
		Id:       n.ID,
		Address:  n.Address,
		State:    st,
		Labels:   maps.Clone(n.Labels),
		Capacity: &sessionv1.NodeResources{Sessions: n.Capacity.Sessions, CpuMillis: n.Capacity.CPUMillis, MemoryBytes: n.Capacity.MemoryBytes},
		Used:     &sessionv1.NodeResources{Sessions: n.Used.Sessions, CpuMillis: n.Used.CPUMillis, MemoryBytes: n.Used.MemoryBytes},
	}
}
