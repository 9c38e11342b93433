package session

import (
	"errors"
	"fmt"

	"google.golang.org/grpc"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
)

// Nodes reaches the display, sandbox and image services of a node.
type Nodes interface {
	Display(nodeID string) (displayv1.DisplayServiceClient, error)
	Sandbox(nodeID string) (sandboxv1.SandboxServiceClient, error)
	Image(nodeID string) (imagev1.ImageServiceClient, error)
}

// ErrUnknownNode: no connection to that node is known.
var ErrUnknownNode = errors.New("unknown node")

// StaticNodes reaches a fixed set of nodes, each through one gRPC connection
// that serves both its display and its sandbox (the all-in-one mode, or a
// cluster with a known node list).
type StaticNodes map[string]grpc.ClientConnInterface

// Display implements Nodes.
func (n StaticNodes) Display(nodeID string) (displayv1.DisplayServiceClient, error) {
	cc, ok := n[nodeID]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", nodeID, ErrUnknownNode)
	}
	return displayv1.NewDisplayServiceClient(cc), nil
}

// Sandbox implements Nodes.
func (n StaticNodes) Sandbox(nodeID string) (sandboxv1.SandboxServiceClient, error) {
	cc, ok := n[nodeID]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", nodeID, ErrUnknownNode)
	}
	return sandboxv1.NewSandboxServiceClient(cc), nil
}

// Image implements Nodes.
func (n StaticNodes) Image(nodeID string) (imagev1.ImageServiceClient, error) {
	cc, ok := n[nodeID]
	if !ok {
		return nil, fmt.Errorf("node %q: %w", nodeID, ErrUnknownNode)
	}
	return imagev1.NewImageServiceClient(cc), nil
}
