package cluster

import (
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
)

// ImageProxy serves imagev1.ImageService for a cluster, whose nodes each
// keep their own image store: a call that names a node (node_id) goes to
// that node as the caller (whose credentials the call carries on), an
// unknown node answers NOT_FOUND and one that is down UNAVAILABLE. A list
// or get that names none asks every live node and says which nodes hold
// each image; calls that change a store, and a usage report, need a node
// (FAILED_PRECONDITION otherwise).
type ImageProxy struct {
	imagev1.UnimplementedImageServiceServer
	nodes *NodeService
}

// NewImageProxy returns the cluster image API of a node service, which
// must reach its nodes' images.
func NewImageProxy(nodes *NodeService) *ImageProxy { return &ImageProxy{nodes: nodes} }

// Register registers the ImageService on r.
func (p *ImageProxy) Register(r grpc.ServiceRegistrar) { imagev1.RegisterImageServiceServer(r, p) }

// node returns the image service of the node id names.
func (p *ImageProxy) node(ctx context.Context, id, what string) (imagev1.ImageServiceClient, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: each node of this cluster keeps its own images; name one with node_id (CLI -node; see `deskgrid nodes list`)", what)
	}
	if p.nodes.images == nil {
		return nil, status.Error(codes.Unimplemented, "this session service cannot reach its nodes' images")
	}
	n, err := p.nodes.reg.Node(ctx, id)
	if err != nil {
		return nil, p.nodes.status(ctx, err)
	}
	if !n.Alive {
		return nil, status.Errorf(codes.Unavailable, "node %s is down (its heartbeat has expired); see `deskgrid nodes list`", id)
	}
	c, err := p.nodes.images.Image(id)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reach node %s: %v", id, err)
	}
	return c, nil
}

// live returns the ids of the live nodes.
func (p *ImageProxy) live(ctx context.Context) ([]string, error) {
	if p.nodes.images == nil {
		return nil, status.Error(codes.Unimplemented, "this session service cannot reach its nodes' images")
	}
	snap, err := p.nodes.reg.Snapshot(ctx, "")
	if err != nil {
		return nil, p.nodes.status(ctx, err)
	}
	var ids []string
	for _, n := range snap {
		if n.Alive {
			ids = append(ids, n.ID)
		}
	}
	if len(ids) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "no live node; see `deskgrid nodes list`")
	}
	sort.Strings(ids)
	return ids, nil
}

// each calls f on every live node at once and returns the answers by node.
func each[T any](ctx context.Context, p *ImageProxy, f func(imagev1.ImageServiceClient) (T, error)) ([]string, map[string]T, map[string]error, error) {
	ids, err := p.live(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		out  = map[string]T{}
		errs = map[string]error{}
	)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var v T
			c, err := p.nodes.images.Image(id)
			if err == nil {
				v, err = f(c)
			} else {
				err = status.Errorf(codes.Unavailable, "reach node %s: %v", id, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[id] = err
			} else {
				out[id] = v
			}
		}()
	}
	wg.Wait()
	return ids, out, errs, nil
}

// failure is the error of nodes that failed a fan-out: their first
// (by id) code, and every node's reason.
func failure(what string, ids []string, errs map[string]error) error {
	var (
		code = codes.OK
		why  []string
	)
	for _, id := range ids {
		if err, ok := errs[id]; ok {
			st := status.Convert(err)
			if code == codes.OK {
				code = st.Code()
			}
			why = append(why, id+": "+st.Message())
		}
	}
	return status.Errorf(code, "%s failed on %d of %d nodes (%s); name a node with node_id (CLI -node) to ask the others", what, len(why), len(ids), strings.Join(why, "; "))
}

// ListImages implements imagev1.ImageServiceServer.
func (p *ImageProxy) ListImages(ctx context.Context, req *imagev1.ListImagesRequest) (*imagev1.ListImagesResponse, error) {
	if req.GetNodeId() != "" {
		c, err := p.node(ctx, req.GetNodeId(), "list images")
		if err != nil {
			return nil, err
		}
		return c.ListImages(ctx, &imagev1.ListImagesRequest{})
	}
	ids, got, errs, err := each(ctx, p, func(c imagev1.ImageServiceClient) (*imagev1.ListImagesResponse, error) {
		return c.ListImages(ctx, &imagev1.ListImagesRequest{})
	})
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, failure("list images", ids, errs)
	}
	type key struct{ ref, digest string }
	merged := map[key]*imagev1.Image{}
	var order []key
	for _, id := range ids {
		for _, im := range got[id].GetImages() {
			k := key{im.GetRef(), im.GetDigest()}
			m, ok := merged[k]
			if !ok {
				m = im
				merged[k] = m
				order = append(order, k)
			}
			m.NodeIds = append(m.NodeIds, id)
		}
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].ref != order[j].ref {
			return order[i].ref < order[j].ref
		}
		return order[i].digest < order[j].digest
	})
	out := &imagev1.ListImagesResponse{}
	for _, k := range order {
		out.Images = append(out.Images, merged[k])
	}
	return out, nil
}

// GetImage implements imagev1.ImageServiceServer.
func (p *ImageProxy) GetImage(ctx context.Context, req *imagev1.GetImageRequest) (*imagev1.GetImageResponse, error) {
	if req.GetNodeId() != "" {
		c, err := p.node(ctx, req.GetNodeId(), "get image")
		if err != nil {
			return nil, err
		}
		return c.GetImage(ctx, &imagev1.GetImageRequest{Ref: req.GetRef()})
	}
	ids, got, errs, err := each(ctx, p, func(c imagev1.ImageServiceClient) (*imagev1.GetImageResponse, error) {
		return c.GetImage(ctx, &imagev1.GetImageRequest{Ref: req.GetRef()})
	})
	if err != nil {
		return nil, err
	}
	notFound := 0
	for id, e := range errs {
		switch status.Code(e) {
		case codes.NotFound:
			delete(errs, id)
			notFound++
		case codes.InvalidArgument:
			return nil, e // the same on every node
		}
	}
	if len(errs) > 0 {
		return nil, failure("get image", ids, errs)
	}
	var first *imagev1.Image
	for _, id := range ids {
		im := got[id].GetImage()
		if im == nil {
			continue
		}
		if first == nil {
			first = im
		}
		if im.GetDigest() == first.GetDigest() {
			first.NodeIds = append(first.NodeIds, id)
		}
	}
	if first == nil {
		return nil, status.Errorf(codes.NotFound, "image %q is on none of the %d live nodes", req.GetRef(), len(ids))
	}
	return &imagev1.GetImageResponse{Image: first}, nil
}

// PullImage implements imagev1.ImageServiceServer.
func (p *ImageProxy) PullImage(req *imagev1.PullImageRequest, stream grpc.ServerStreamingServer[imagev1.PullImageResponse]) error {
	ctx := stream.Context()
	if req.GetNodeId() == "" {
		return status.Error(codes.FailedPrecondition, "pull image: each node of this cluster keeps its own images; name one with node_id (CLI -node), or pull onto every live node with PullImageOnNodes (CLI -all-nodes)")
	}
	c, err := p.node(ctx, req.GetNodeId(), "pull image")
	if err != nil {
		return err
	}
	pull, err := c.PullImage(ctx, &imagev1.PullImageRequest{Ref: req.GetRef()})
	if err != nil {
		return err
	}
	for {
		m, err := pull.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(m); err != nil {
			return err
		}
	}
}

// DeleteImage implements imagev1.ImageServiceServer.
func (p *ImageProxy) DeleteImage(ctx context.Context, req *imagev1.DeleteImageRequest) (*imagev1.DeleteImageResponse, error) {
	c, err := p.node(ctx, req.GetNodeId(), "delete image")
	if err != nil {
		return nil, err
	}
	return c.DeleteImage(ctx, &imagev1.DeleteImageRequest{Ref: req.GetRef()})
}

// SetImagePublic implements imagev1.ImageServiceServer.
func (p *ImageProxy) SetImagePublic(ctx context.Context, req *imagev1.SetImagePublicRequest) (*imagev1.SetImagePublicResponse, error) {
	c, err := p.node(ctx, req.GetNodeId(), "set image public")
	if err != nil {
		return nil, err
	}
	return c.SetImagePublic(ctx, &imagev1.SetImagePublicRequest{Ref: req.GetRef(), Public: req.GetPublic()})
}

// GetImageUsage implements imagev1.ImageServiceServer.
func (p *ImageProxy) GetImageUsage(ctx context.Context, req *imagev1.GetImageUsageRequest) (*imagev1.GetImageUsageResponse, error) {
	c, err := p.node(ctx, req.GetNodeId(), "image usage")
	if err != nil {
		return nil, err
	}
	return c.GetImageUsage(ctx, &imagev1.GetImageUsageRequest{})
}

// ImportImage implements imagev1.ImageServiceServer: the header names the
// node, and the archive goes on to it as it arrives, chunk by chunk; a
// caller that goes away mid-archive ends the node's import, which keeps
// nothing of it.
func (p *ImageProxy) ImportImage(stream grpc.ClientStreamingServer[imagev1.ImportImageRequest, imagev1.ImportImageResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.InvalidArgument, "import image: the first message must be a header")
		}
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "import image: the first message must be a header")
	}
	if strings.TrimSpace(h.GetNodeId()) == "" {
		return status.Error(codes.FailedPrecondition, "import image: each node of this cluster keeps its own images; name one with node_id (CLI -node), or import onto every live node in turn (CLI -all-nodes)")
	}
	c, err := p.node(ctx, h.GetNodeId(), "import image")
	if err != nil {
		return err
	}
	up, err := c.ImportImage(ctx)
	if err != nil {
		return err
	}
	sent := up.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Header{Header: &imagev1.ImportImageHeader{Ref: h.GetRef()}}})
	for sent == nil {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err // the deferred cancel ends the node's import
		}
		// A node that stopped reading has answered: CloseAndRecv says why.
		sent = up.Send(m)
	}
	resp, err := up.CloseAndRecv()
	if err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}
