package cluster

import (
	"context"
	"errors"

	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// NodeImages reaches the image service of a node by id (NodeConns, or the
// one node of a single-machine deskgrid).
type NodeImages interface {
	Image(nodeID string) (imagev1.ImageServiceClient, error)
}

// nodePullEvery bounds how often one node's byte progress is sent on; phase
// changes and finished layers are always sent.
const nodePullEvery = 500 * time.Millisecond

// PullImageOnNodes implements sessionv1.NodeServiceServer: the pull runs on
// every live node at once, as the caller's tenant (whose credentials the
// call carries on to each node), and each node's store keeps nothing of a
// pull that failed there.
func (s *NodeService) PullImageOnNodes(req *sessionv1.PullImageOnNodesRequest, stream grpc.ServerStreamingServer[sessionv1.PullImageOnNodesResponse]) error {
	ctx := stream.Context()
	ref := strings.TrimSpace(req.GetRef())
	if ref == "" {
		return status.Error(codes.InvalidArgument, "ref: an image reference is required")
	}
	if s.images == nil {
		return status.Error(codes.Unimplemented, "this session service cannot reach its nodes' images")
	}
	snap, err := s.reg.Snapshot(ctx, "")
	if err != nil {
		return s.status(ctx, err)
	}
	var nodes []string
	for _, n := range snap {
		if n.Alive {
			nodes = append(nodes, n.ID)
		}
	}
	if len(nodes) == 0 {
		return status.Error(codes.FailedPrecondition, "no live node to pull onto; see `deskgrid nodes list`")
	}
	s.log.InfoContext(ctx, "pulling an image onto every live node", "image", ref, "nodes", nodes)

	out := make(chan *sessionv1.PullImageOnNodesResponse, 16*len(nodes))
	var wg sync.WaitGroup
	for _, id := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out <- s.pullOn(ctx, id, ref, out)
		}()
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	var (
		sendErr error
		failed  []*sessionv1.NodePullResult
	)
	for m := range out {
		if r := m.GetResult(); r != nil && r.GetErrorCode() != "" {
			failed = append(failed, r)
		}
		if sendErr == nil {
			// A caller that went away cancels the context the pulls run
			// under; the rest is drained until they have stopped.
			sendErr = stream.Send(m)
		}
	}
	if sendErr != nil {
		return sendErr
	}
	sum := &sessionv1.NodePullSummary{Nodes: int32(len(nodes)), Succeeded: int32(len(nodes) - len(failed)), Failed: int32(len(failed))}
	if err := stream.Send(&sessionv1.PullImageOnNodesResponse{Event: &sessionv1.PullImageOnNodesResponse_Summary{Summary: sum}}); err != nil {
		return err
	}
	if len(failed) == 0 {
		s.log.InfoContext(ctx, "image pulled onto every live node", "image", ref, "nodes", len(nodes))
		return nil
	}
	sort.Slice(failed, func(i, j int) bool { return failed[i].GetNodeId() < failed[j].GetNodeId() })
	code := codeOf(failed[0].GetErrorCode())
	var why []string
	for _, f := range failed {
		if codeOf(f.GetErrorCode()) != code {
			code = codes.Aborted
		}
		why = append(why, f.GetNodeId()+": "+f.GetError())
	}
	s.log.WarnContext(ctx, "image pull failed on some nodes", "image", ref, "failed", len(failed), "nodes", len(nodes))
	return status.Errorf(code, "pull %s failed on %d of %d nodes (%s)", ref, len(failed), len(nodes), strings.Join(why, "; "))
}

// pullOn pulls ref onto one node, sending its progress on out, and returns
// its result.
func (s *NodeService) pullOn(ctx context.Context, nodeID, ref string, out chan<- *sessionv1.PullImageOnNodesResponse) *sessionv1.PullImageOnNodesResponse {
	result := func(im *imagev1.Image, err error) *sessionv1.PullImageOnNodesResponse {
		r := &sessionv1.NodePullResult{NodeId: nodeID, Image: im}
		if err != nil {
			st := status.Convert(err)
			r.ErrorCode, r.Error = st.Code().String(), st.Message()
		}
		return &sessionv1.PullImageOnNodesResponse{Event: &sessionv1.PullImageOnNodesResponse_Result{Result: r}}
	}
	images, err := s.images.Image(nodeID)
	if err != nil {
		return result(nil, status.Errorf(codes.Unavailable, "reach node: %v", err))
	}
	pull, err := images.PullImage(ctx, &imagev1.PullImageRequest{Ref: ref})
	if err != nil {
		return result(nil, err)
	}
	var (
		lastAt     time.Time
		lastPhase  string
		lastLayers int32
	)
	for {
		m, err := pull.Recv()
		if errors.Is(err, io.EOF) {
			return result(nil, status.Error(codes.Internal, "the node ended the pull without an image"))
		}
		if err != nil {
			return result(nil, err)
		}
		p := m.GetProgress()
		if p == nil {
			return result(m.GetImage(), nil)
		}
		if now := time.Now(); p.GetPhase() != lastPhase || p.GetLayersDone() != lastLayers || now.Sub(lastAt) >= nodePullEvery {
			lastAt, lastPhase, lastLayers = now, p.GetPhase(), p.GetLayersDone()
			select {
			case out <- &sessionv1.PullImageOnNodesResponse{Event: &sessionv1.PullImageOnNodesResponse_Progress{Progress: &sessionv1.NodePullProgress{NodeId: nodeID, Progress: p}}}:
			case <-ctx.Done():
				return result(nil, status.FromContextError(ctx.Err()).Err())
			}
		}
	}
}

// codeOf reads back a code's name as codes.Code.String writes it.
func codeOf(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return codes.Unknown
}
