package deskgrid

import (
	"context"
	"errors"
	"fmt"
	"io"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

// Images is the image API: the OCI images a node holds for the caller's
// tenant.
type Images struct {
	c    *Client
	node string
}

// OnNode returns the image API of one node of a cluster (an id of
// Nodes.List), whose calls name it: each node keeps its own images. Without
// it, in a cluster, List and Get ask every live node (Image.NodeIds says
// which hold each image) and the calls that change a store fail with
// FAILED_PRECONDITION. A single machine ignores the node.
func (i *Images) OnNode(id string) *Images { return &Images{c: i.c, node: id} }

// List returns the images the caller sees: its own tags and public ones.
func (i *Images) List(ctx context.Context) ([]*imagev1.Image, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := i.c.image.ListImages(ctx, &imagev1.ListImagesRequest{NodeId: i.node})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetImages(), nil
}

// Get describes one image, by reference or digest.
func (i *Images) Get(ctx context.Context, ref string) (*imagev1.Image, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := i.c.image.GetImage(ctx, &imagev1.GetImageRequest{Ref: ref, NodeId: i.node})
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetImage(), nil
}

// Pull fetches ref from its registry onto the node; progress, when set, is
// called as layers arrive. ctx bounds the whole pull.
func (i *Images) Pull(ctx context.Context, ref string, progress func(*imagev1.PullProgress)) (*imagev1.Image, error) {
	stream, err := i.c.image.PullImage(ctx, &imagev1.PullImageRequest{Ref: ref, NodeId: i.node})
	if err != nil {
		return nil, wrap(err)
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("pull %s: the stream ended without an image", ref)
		}
		if err != nil {
			return nil, wrap(err)
		}
		if p := m.GetProgress(); p != nil {
			if progress != nil {
				progress(p)
			}
			continue
		}
		return m.GetImage(), nil
	}
}

// Import stores the image archive read from r (an OCI layout tar or a
// `docker save` tarball), tagged ref ("" for the names it carries). In a
// cluster it goes to the node of OnNode, streamed on as it is read; without
// one the import fails with FAILED_PRECONDITION.
func (i *Images) Import(ctx context.Context, r io.Reader, ref string) ([]*imagev1.Image, error) {
	stream, err := i.c.image.ImportImage(ctx)
	if err != nil {
		return nil, wrap(err)
	}
	if err := stream.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Header{Header: &imagev1.ImportImageHeader{Ref: ref, NodeId: i.node}}}); err != nil {
		return nil, wrap(err)
	}
	buf := make([]byte, 256<<10)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := stream.Send(&imagev1.ImportImageRequest{Data: &imagev1.ImportImageRequest_Chunk{Chunk: buf[:n]}}); err != nil {
				break // CloseAndRecv has the node's reason
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetImages(), nil
}

// Delete removes the caller's tag; what no session or tag needs is collected.
func (i *Images) Delete(ctx context.Context, ref string) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := i.c.image.DeleteImage(ctx, &imagev1.DeleteImageRequest{Ref: ref, NodeId: i.node})
	return wrap(err)
}

// Commit turns the session's changes into a new image tagged ref (such as
// "my-team/qa-desktop:v3"), on top of the session's image.
func (s *Session) Commit(ctx context.Context, ref string) (*sessionv1.CommitSessionResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.session.CommitSession(ctx, &sessionv1.CommitSessionRequest{SessionId: s.GetId(), Image: ref})
	return resp, wrap(err)
}
