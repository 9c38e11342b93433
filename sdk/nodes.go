package deskgrid

import (
	"context"
	"errors"
	"io"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// Nodes is the node API: the machines that run sessions. Draining and
// undraining need an admin key.
type Nodes struct{ c *Client }

// List returns every node with its state, labels and resources.
func (n *Nodes) List(ctx context.Context) ([]*sessionv1.Node, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := n.c.node.ListNodes(ctx, &sessionv1.ListNodesRequest{})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetNodes(), nil
}

// Get returns one node by id.
func (n *Nodes) Get(ctx context.Context, id string) (*sessionv1.Node, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := n.c.node.GetNode(ctx, &sessionv1.GetNodeRequest{NodeId: id})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetNode(), nil
}

// Drain stops placing new sessions on a node; the sessions it runs go on.
func (n *Nodes) Drain(ctx context.Context, id string) (*sessionv1.Node, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := n.c.node.DrainNode(ctx, &sessionv1.DrainNodeRequest{NodeId: id})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetNode(), nil
}

// Undrain lets a drained node take new sessions again.
func (n *Nodes) Undrain(ctx context.Context, id string) (*sessionv1.Node, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := n.c.node.UndrainNode(ctx, &sessionv1.UndrainNodeRequest{NodeId: id})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetNode(), nil
}

// PullImage pulls ref onto every live node at once, for the caller's
// tenant; progress, when set, sees each node's progress. It returns every
// node's result, and an error when any node failed (the results say which
// and why). ctx bounds the whole pull.
func (n *Nodes) PullImage(ctx context.Context, ref string, progress func(*sessionv1.NodePullProgress)) ([]*sessionv1.NodePullResult, error) {
	stream, err := n.c.node.PullImageOnNodes(ctx, &sessionv1.PullImageOnNodesRequest{Ref: ref})
	if err != nil {
		return nil, wrap(err)
	}
	var results []*sessionv1.NodePullResult
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return results, nil
		}
		if err != nil {
			return results, wrap(err)
		}
		switch {
		case m.GetProgress() != nil:
			if progress != nil {
				progress(m.GetProgress())
			}
		case m.GetResult() != nil:
			results = append(results, m.GetResult())
		}
	}
}
