package display

import (
	"context"
	"errors"
	"fmt"
	"image"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/display/internal/capture"
	"github.com/deskgrid/deskgrid/services/display/internal/scale"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
)

// CreateDisplay starts a session's X server.
func (s *Service) CreateDisplay(ctx context.Context, req *displayv1.CreateDisplayRequest) (*displayv1.CreateDisplayResponse, error) {
	spec, err := s.validateCreate(req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if spec.tenant, err = s.tenancy.Scope(ctx); err != nil {
		return nil, err
	}
	d, err := s.create(ctx, spec)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &displayv1.CreateDisplayResponse{Display: d.proto()}, nil
}

// GetDisplay describes a session's display.
func (s *Service) GetDisplay(ctx context.Context, req *displayv1.GetDisplayRequest) (*displayv1.GetDisplayResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := d.usable(); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	out := d.proto()
	if out.Windows, err = d.protoWindows(); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &displayv1.GetDisplayResponse{Display: out}, nil
}

// ListDisplays lists the displays this node runs for the caller's tenant
// (all of them for a caller acting for no tenant).
func (s *Service) ListDisplays(ctx context.Context, _ *displayv1.ListDisplaysRequest) (*displayv1.ListDisplaysResponse, error) {
	ds := s.list(ctx)
	out := make([]*displayv1.Display, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.proto())
	}
	return &displayv1.ListDisplaysResponse{Displays: out}, nil
}

// DeleteDisplay stops a session's X server and removes its files.
func (s *Service) DeleteDisplay(ctx context.Context, req *displayv1.DeleteDisplayRequest) (*displayv1.DeleteDisplayResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := s.remove(ctx, req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &displayv1.DeleteDisplayResponse{}, nil
}

// Screenshot captures the session's screen.
func (s *Service) Screenshot(ctx context.Context, req *displayv1.ScreenshotRequest) (*displayv1.ScreenshotResponse, error) {
	if err := validateSessionID(req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	format, err := validateFormat(req.GetFormat(), req.GetQuality())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	d, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	w, h := d.size()
	m, err := validateScale(req.GetScaleTo(), w, h)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	spec, err := validateRegion(req.GetRegion(), m)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	spec.format, spec.quality, spec.cursor = format, int(req.GetQuality()), req.GetCursor()
	resp, err := s.screenshot(d, spec)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return resp, nil
}

// shotSpec is a validated screenshot request.
type shotSpec struct {
	// rect is the screen region grabbed, in screen pixels.
	rect capture.Rect
	// outW, outH scale the grab to this size; 0 keeps its own.
	outW, outH int
	format     capture.Format
	quality    int
	cursor     bool
}

func (s *Service) screenshot(d *display, spec shotSpec) (*displayv1.ScreenshotResponse, error) {
	if err := d.usable(); err != nil {
		return nil, err
	}
	d.shotMu.Lock()
	defer d.shotMu.Unlock()
	d.followSize()
	d.ensureShared(s.log)
	rect := spec.rect
	if rect.Width == 0 || rect.Height == 0 {
		rect = capture.Rect{Width: d.screen.Width, Height: d.screen.Height}
	}
	if rect.X+rect.Width > d.screen.Width || rect.Y+rect.Height > d.screen.Height {
		return nil, fmt.Errorf("the screen of session %s is %dx%d now, resized while the request was on its way; ask again: %w",
			d.sessionID, d.screen.Width, d.screen.Height, errResized)
	}
	f, err := d.grab(rect)
	if err != nil {
		return nil, d.explain(err)
	}
	scaled := spec.outW > 0 && (spec.outW != f.Width() || spec.outH != f.Height())
	if !scaled && !(spec.cursor && d.cursorOK) {
		return s.encode(f, spec.format, spec.quality)
	}
	img, err := f.RGBA()
	if err != nil {
		return nil, err
	}
	if spec.cursor && d.cursorOK {
		cur, err := capture.CursorOf(d.conn)
		if err != nil {
			return nil, d.explain(err)
		}
		cur.Draw(img, image.Pt(rect.X, rect.Y))
	}
	if scaled {
		img = scale.Image(img, spec.outW, spec.outH)
	}
	data, err := s.encoder.EncodeImage(img, spec.format, spec.quality)
	if err != nil {
		return nil, err
	}
	return &displayv1.ScreenshotResponse{
		ContentType: spec.format.ContentType(),
		Data:        data,
		Width:       int32(img.Rect.Dx()),
		Height:      int32(img.Rect.Dy()),
	}, nil
}

// ensureShared makes the shared-memory segment grabs use, once; a server
// that cannot share memory is read with GetImage. Callers hold shotMu.
func (d *display) ensureShared(log *slog.Logger) {
	if d.shared != nil || d.noShared {
		return
	}
	sh, err := capture.NewShared(d.conn, d.screen)
	if err != nil {
		log.Info("screenshots without shared memory", "session_id", d.sessionID, "err", err)
		d.noShared = true
		return
	}
	d.shared = sh
}

// followSize brings the capture state to the screen's size after a resize:
// the shared-memory segment is sized for one screen, so a new one is made
// at the next grab. Callers hold shotMu.
func (d *display) followSize() {
	w, h := d.size()
	if w == d.screen.Width && h == d.screen.Height {
		return
	}
	d.screen.Width, d.screen.Height = w, h
	if d.shared != nil {
		_ = d.shared.Release()
		d.shared = nil
	}
}

func (s *Service) encode(f *capture.Frame, format capture.Format, quality int) (*displayv1.ScreenshotResponse, error) {
	data, err := s.encoder.Encode(f, format, quality)
	if err != nil {
		return nil, err
	}
	return &displayv1.ScreenshotResponse{
		ContentType: format.ContentType(),
		Data:        data,
		Width:       int32(f.Width()),
		Height:      int32(f.Height()),
	}, nil
}

func (d *display) proto() *displayv1.Display {
	w, h := d.size()
	return &displayv1.Display{
		SessionId:  d.sessionID,
		XDisplay:   d.xDisplay(),
		Width:      int32(w),
		Height:     int32(h),
		Depth:      int32(d.depth),
		Dpi:        int32(d.screenDPI),
		CreateTime: timestamppb.New(d.created),
	}
}

// toStatus turns an internal error into the gRPC status the caller sees,
// once, at the edge. Unexpected errors are logged and masked.
func (s *Service) toStatus(ctx context.Context, err error) error {
	var inv *invalidError
	switch {
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, inv.msg)
	case errors.Is(err, errNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, errAlreadyExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, errExhausted), errors.Is(err, errDiskFull), errors.Is(err, errTooLarge):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, errStaleLease):
		return errinfo.Error(codes.FailedPrecondition, errinfo.StaleInputLease, err.Error())
	case errors.Is(err, errGone), errors.Is(err, errCannotResize),
		errors.Is(err, errNoText), errors.Is(err, errNoWindowManager), errors.Is(err, errEnded):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, errResized):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, errClosed), errors.Is(err, errUnresponsive), errors.Is(err, errRecordingOff):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled")
	}
	s.log.ErrorContext(ctx, "display request failed", "err", err)
	return status.Error(codes.Internal, "display operation failed; see the node's logs")
}
