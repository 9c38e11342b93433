package session

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imagev1 "github.com/deskgrid/deskgrid/proto/deskgrid/image/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/session/placement"
)

// TypeImagePull is the event type of the progress of the pull of a
// session's image onto its node while the session starts; it carries a
// sessionv1.ImagePull.
const TypeImagePull = "session.image_pull.v1"

// pullEventEvery bounds how often the bytes of a pull are published: every
// phase change and every layer done is published, byte counts in between
// at most this often, so a long pull leaves tens of events, not thousands.
const pullEventEvery = time.Second

// sessionImageKeys name the session's image for placement
// (placement.ImageKeys): the digest it first resolved to, else the
// reference it asked for.
func (s *Service) sessionImageKeys(sess *sessionv1.Session) []string {
	img := sess.GetImage()
	if d := sess.GetImageDigest(); d != "" {
		img = d
	}
	if img == "" {
		return nil
	}
	if s.imageKeys != nil {
		return s.imageKeys(sess.GetTenant(), img)
	}
	return placement.ImageKeys(sess.GetTenant(), img)
}

// ensureImage makes the node hold the session's image before its sandbox
// is asked for: a node without it pulls it here, and the pull's progress is
// published as the session's image_pull events (which its watchers see),
// instead of a create that is silent for as long as the pull takes. A node
// that holds the image answers at once; anything else the node says about
// the image (a malformed reference, an image by a digest it lacks) is left
// for the sandbox's create to report.
func (s *Service) ensureImage(ctx context.Context, cur *sessionv1.Session, nodeID, img string) error {
	if img == "" || strings.HasPrefix(img, "sha256:") {
		return nil // a digest names no registry to pull from
	}
	images, err := s.nodes.Image(nodeID)
	if err != nil {
		return &nodeError{Node: nodeID, Op: "reach image service", Err: err}
	}
	if _, err := images.GetImage(ctx, &imagev1.GetImageRequest{Ref: img}); status.Code(err) != codes.NotFound {
		return nil
	}
	s.log.InfoContext(ctx, "pulling the session's image onto its node", "session", cur.GetId(), "node", nodeID, "image", img)
	op := "pull image " + img
	stream, err := images.PullImage(ctx, &imagev1.PullImageRequest{Ref: img})
	if err != nil {
		return s.pullFailed(ctx, images, nodeID, op, err)
	}
	var (
		lastAt     time.Time
		lastPhase  string
		lastLayers int32
		last       *imagev1.PullProgress
	)
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "the node ended the pull without an image")
		}
		if err != nil {
			return s.pullFailed(ctx, images, nodeID, op, err)
		}
		p := m.GetProgress()
		if p == nil {
			if last != nil && last.GetPhase() != "done" {
				s.publishPull(ctx, cur, nodeID, img, &imagev1.PullProgress{Phase: "done", DoneBytes: last.GetTotalBytes(), TotalBytes: last.GetTotalBytes(),
					LayersDone: last.GetLayersTotal(), LayersTotal: last.GetLayersTotal()})
			}
			s.log.InfoContext(ctx, "pulled the session's image", "session", cur.GetId(), "node", nodeID, "image", img, "digest", m.GetImage().GetDigest())
			return nil
		}
		last = p
		if now := s.now(); p.GetPhase() != lastPhase || p.GetLayersDone() != lastLayers || now.Sub(lastAt) >= pullEventEvery {
			s.publishPull(ctx, cur, nodeID, img, p)
			lastAt, lastPhase, lastLayers = now, p.GetPhase(), p.GetLayersDone()
		}
	}
}

// pullFailed explains a pull that failed. When the node still answers,
// it refused or its registry failed (an unknown image, a registry that is
// unreachable): the create fails with the node's reason rather than try
// the same pull on another node. A node that no longer answers died
// mid-pull, and the session is placed elsewhere.
func (s *Service) pullFailed(ctx context.Context, images imagev1.ImageServiceClient, nodeID, op string, err error) error {
	ne := &nodeError{Node: nodeID, Op: op, Err: err}
	if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
		ne.Answered = true
		return ne
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, perr := images.GetImageUsage(pctx, &imagev1.GetImageUsageRequest{})
	ne.Answered = perr == nil || (status.Code(perr) != codes.Unavailable && status.Code(perr) != codes.DeadlineExceeded)
	return ne
}

// publishPull publishes one image_pull event of the session.
func (s *Service) publishPull(ctx context.Context, cur *sessionv1.Session, nodeID, img string, p *imagev1.PullProgress) {
	if s.events == nil {
		return
	}
	ev := &sessionv1.ImagePull{NodeId: nodeID, Image: img, Progress: p}
	if _, err := s.events.Publish(ctx, events.Meta{Type: TypeImagePull, SessionID: cur.GetId(), Tenant: cur.GetTenant()}, ev); err != nil {
		s.log.WarnContext(ctx, "publish image pull progress", "session", cur.GetId(), "err", err)
	}
}
