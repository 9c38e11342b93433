package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/auth"
	"github.com/deskgrid/deskgrid/services/sandbox/image"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ImageServer serves a node's image store as imagev1.ImageService. Every
// call acts for the caller's tenant: its own tags and the public ones.
type ImageServer struct {
	imagev1.UnimplementedImageServiceServer
	store   *image.Store
	tenancy auth.Tenancy
	log     *slog.Logger
}

// ImageDeps is what an ImageServer needs.
type ImageDeps struct {
	Store  *image.Store // required
	Logger *slog.Logger // required
	// Tenancy says whose tags a call acts on: its tenant's (and the public
	// ones), those of no tenant for the system; an anonymous call is
	// refused. Nil (auth off): every call acts on the tags of no tenant.
	Tenancy auth.Tenancy
}

// NewImageServer serves d.Store.
func NewImageServer(d ImageDeps) (*ImageServer, error) {
	if d.Store == nil || d.Logger == nil {
		return nil, errors.New("image server: Store and Logger are required")
	}
	return &ImageServer{store: d.Store, tenancy: d.Tenancy, log: d.Logger}, nil
}

// Register adds the image service to a gRPC server.
func (x *ImageServer) Register(r grpc.ServiceRegistrar) { imagev1.RegisterImageServiceServer(r, x) }

// imageStatus maps a store error to a status, once, at the edge.
func imageStatus(log *slog.Logger, ctx context.Context, op string, err error) error {
	code := image.Code(err)
	if code == codes.Internal {
		log.ErrorContext(ctx, "image call failed", "op", op, "error", err)
		return status.Errorf(codes.Internal, "%s failed on the node; see its logs", op)
	}
	return status.Error(code, err.Error())
}

// ImageProto is the API form of a stored image.
func ImageProto(im *image.Image) *imagev1.Image {
	out := &imagev1.Image{
		Ref: im.Ref, Digest: im.Digest, Size: im.Size, Public: im.Public,
		Architecture: im.Architecture, Os: im.OS,
		Config: &imagev1.ImageConfig{
			Env: im.Config.Env, Entrypoint: im.Config.Entrypoint, Cmd: im.Config.Cmd,
			WorkingDir: im.Config.WorkingDir, User: im.Config.User, Labels: im.Config.Labels,
		},
	}
	if !im.Created.IsZero() {
		out.Created = timestamppb.New(im.Created)
	}
	for i := range im.LayerDigests {
		l := &imagev1.Layer{Digest: im.LayerDigests[i]}
		if i < len(im.DiffIDs) {
			l.DiffId = im.DiffIDs[i]
		}
		out.Layers = append(out.Layers, l)
	}
	return out
}

func (x *ImageServer) ListImages(ctx context.Context, _ *imagev1.ListImagesRequest) (*imagev1.ListImagesResponse, error) {
	tenant, err := x.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	list, err := x.store.List(ctx, tenant)
	if err != nil {
		return nil, imageStatus(x.log, ctx, "list images", err)
	}
	out := &imagev1.ListImagesResponse{}
	for _, im := range list {
		out.Images = append(out.Images, ImageProto(im))
	}
	return out, nil
}

func (x *ImageServer) GetImage(ctx context.Context, req *imagev1.GetImageRequest) (*imagev1.GetImageResponse, error) {
	tenant, err := x.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	im, err := x.store.Resolve(ctx, tenant, req.GetRef())
	if err != nil {
		return nil, imageStatus(x.log, ctx, "get image", err)
	}
	return &imagev1.GetImageResponse{Image: ImageProto(im)}, nil
}

func (x *ImageServer) PullImage(req *imagev1.PullImageRequest, stream grpc.ServerStreamingServer[imagev1.PullImageResponse]) error {
	ctx := stream.Context()
	tenant, err := x.tenancy.Scope(ctx)
	if err != nil {
		return err
	}
	var sendErr error
	var size int64
	im, err := x.store.Pull(ctx, tenant, req.GetRef(), func(p image.Progress) {
		size = p.Total
		if sendErr != nil {
			return
		}
		sendErr = stream.Send(&imagev1.PullImageResponse{Event: &imagev1.PullImageResponse_Progress{Progress: progressProto(p)}})
	})
	pullTrailer(ctx, err, size)
	if err != nil {
		return imageStatus(x.log, ctx, "pull image", err)
	}
	return stream.Send(&imagev1.PullImageResponse{Event: &imagev1.PullImageResponse_Image{Image: ImageProto(im)}})
}

func progressProto(p image.Progress) *imagev1.PullProgress {
	return &imagev1.PullProgress{
		Phase: p.Phase, Layer: p.Layer, DoneBytes: p.Done, TotalBytes: p.Total,
		LayersDone: int32(p.LayersDone), LayersTotal: int32(p.LayersTotal),
	}
}

func (x *ImageServer) ImportImage(stream grpc.ClientStreamingServer[imagev1.ImportImageRequest, imagev1.ImportImageResponse]) error {
	ctx := stream.Context()
	tenant, err := x.tenancy.Scope(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return status.Error(codes.InvalidArgument, "import image: the first message must be a header")
	}
	h := first.GetHeader()
	if h == nil {
		return status.Error(codes.InvalidArgument, "import image: the first message must be a header")
	}
	pr, pw := io.Pipe()
	go func() {
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				pw.Close()
				return
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if m.GetHeader() != nil {
				pw.CloseWithError(fmt.Errorf("a second header: %w", image.ErrInvalid))
				return
			}
			if _, err := pw.Write(m.GetChunk()); err != nil {
				return
			}
		}
	}()
	imgs, err := x.store.Import(ctx, tenant, pr, image.ImportOptions{Ref: h.GetRef()})
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return imageStatus(x.log, ctx, "import image", err)
	}
	out := &imagev1.ImportImageResponse{}
	for _, im := range imgs {
		out.Images = append(out.Images, ImageProto(im))
	}
	return stream.SendAndClose(out)
}

func (x *ImageServer) DeleteImage(ctx context.Context, req *imagev1.DeleteImageRequest) (*imagev1.DeleteImageResponse, error) {
	tenant, err := x.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	if err := x.store.Delete(ctx, tenant, req.GetRef()); err != nil {
		return nil, imageStatus(x.log, ctx, "delete image", err)
	}
	return &imagev1.DeleteImageResponse{}, nil
}

func (x *ImageServer) SetImagePublic(ctx context.Context, req *imagev1.SetImagePublicRequest) (*imagev1.SetImagePublicResponse, error) {
	t, err := x.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	if err := x.store.SetPublic(ctx, t, req.GetRef(), req.GetPublic()); err != nil {
		return nil, imageStatus(x.log, ctx, "set image public", err)
	}
	im, err := x.store.Resolve(ctx, t, req.GetRef())
	if err != nil {
		return nil, imageStatus(x.log, ctx, "set image public", err)
	}
	return &imagev1.SetImagePublicResponse{Image: ImageProto(im)}, nil
}

func (x *ImageServer) GetImageUsage(ctx context.Context, _ *imagev1.GetImageUsageRequest) (*imagev1.GetImageUsageResponse, error) {
	u, err := x.store.Usage(ctx)
	if err != nil {
		return nil, imageStatus(x.log, ctx, "image usage", err)
	}
	return &imagev1.GetImageUsageResponse{
		Images: int32(u.Images), Layers: int32(u.Layers), LayerBytes: u.LayerBytes, BlobBytes: u.BlobBytes, PinnedBytes: u.PinnedBytes,
	}, nil
}

// sandboxImage resolves the image a new sandbox runs, pulling it when this
// node lacks it, and pins it for the sandbox's life.
func (s *Service) sandboxImage(ctx context.Context, sessionID, ref string) (*image.Image, error) {
	if ref == "" {
		return nil, nil
	}
	if s.images == nil {
		return nil, failf(errPrecondition, "this node keeps no images: sessions here run without one")
	}
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, err
	}
	im, err := s.images.Resolve(ctx, tenant, ref)
	if errors.Is(err, image.ErrNotFound) {
		var size int64
		im, err = s.images.Pull(ctx, tenant, ref, func(p image.Progress) { size = p.Total })
		pullTrailer(ctx, err, size)
	} else {
		// Tells the caller's metrics the node had the image.
		_ = grpc.SetTrailer(ctx, metadata.Pairs("deskgrid-metric-image-cached", "true"))
	}
	if err != nil {
		return nil, imageErrorf("image %s: %w", ref, err)
	}
	if err := s.images.Pin(sessionID, im.Digest); err != nil {
		return nil, imageErrorf("image %s: %w", ref, err)
	}
	return im, nil
}

// pullTrailer tells the node's metrics (services/platform/metrics) that a
// pull from a registry happened, whether it worked and its compressed size.
func pullTrailer(ctx context.Context, err error, size int64) {
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs("deskgrid-metric-image-cached", "false",
		"deskgrid-metric-image-pull", outcome, "deskgrid-metric-image-pull-bytes", strconv.FormatInt(size, 10)))
}

// commit freezes a sandbox, writes its writable layer as an image on top of
// the sandbox's image, and thaws it.
func (s *Service) commit(ctx context.Context, id, ref string) (*image.Image, error) {
	b, release, err := s.acquire(ctx, id)
	if err != nil {
		return nil, err
	}
	defer release()
	if s.images == nil {
		return nil, failf(errPrecondition, "this node keeps no images")
	}
	if b.cg == nil {
		// Unfrozen, its programs could swap a directory for a link to the
		// node's files while the layer is read by path.
		return nil, failf(errPrecondition, "this node runs sandboxes without cgroups: session %q cannot be frozen, and only a frozen session is committed", id)
	}
	// Held, frozen, until the layer is read: a resume meanwhile would let
	// the session change it under the commit.
	b.pmu.Lock()
	defer b.pmu.Unlock()
	if !b.frozen {
		if err := b.cg.Freeze(); err != nil {
			return nil, fmt.Errorf("commit %s: freeze: %w", id, err)
		}
		defer func() {
			if err := b.cg.Thaw(); err != nil {
				s.log.ErrorContext(ctx, "commit: thaw failed", "session_id", id, "error", err)
			}
		}()
	}
	var base *image.Image
	if b.imageDigest != "" {
		if base, err = s.images.Pinned(id); err != nil {
			return nil, imageErrorf("commit %s: its image: %w", id, err)
		}
	}
	// A container's files belong to the session's host id range; the image
	// holds them as the ids inside it.
	u := image.Upper{Dir: b.upper(), Skip: b.mountPoint, MaxBytes: b.layerBytes()}
	if b.img != nil {
		u.Shift = image.IDShift{Base: b.img.Range.Base, Size: b.img.Range.Size}
	}
	im, err := s.images.Commit(ctx, b.tenant, base, u, ref)
	if err != nil {
		return nil, imageErrorf("commit %s: %w", id, err)
	}
	s.log.InfoContext(ctx, "sandbox committed", "session_id", id, "image", im.Ref, "digest", im.Digest)
	return im, nil
}

func (g *server) CommitSandbox(ctx context.Context, req *sandboxv1.CommitSandboxRequest) (*sandboxv1.CommitSandboxResponse, error) {
	im, err := g.s.commit(ctx, req.GetSessionId(), req.GetImage())
	if err != nil {
		return nil, g.s.toStatus(ctx, "commit sandbox", err)
	}
	return &sandboxv1.CommitSandboxResponse{Image: im.Ref, Digest: im.Digest, Size: im.Size}, nil
}
