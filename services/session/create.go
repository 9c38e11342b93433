package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/deskgrid/deskgrid/services/platform/auth/quota"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/session/placement"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// CreateSession records a session, places it, asks the node for a sandbox
// and a display, and returns once the display answers a screenshot.
func (s *Service) CreateSession(ctx context.Context, req *sessionv1.CreateSessionRequest) (*sessionv1.CreateSessionResponse, error) {
	sess, err := s.create(ctx, req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &sessionv1.CreateSessionResponse{Session: sess}, nil
}

func (s *Service) create(ctx context.Context, req *sessionv1.CreateSessionRequest) (*sessionv1.Session, error) {
	// Everything is checked before anything is written.
	sp, err := s.validateCreate(req)
	if err != nil {
		return nil, err
	}
	tenant, err := s.tenancy.Owner(ctx)
	if err != nil {
		return nil, err
	}
	rid := req.GetRequestId()
	if rid != "" {
		prev, err := s.store.FindByRequestID(ctx, tenant, rid)
		switch {
		case err == nil && prev.GetState() == state.Failed:
			// The request's session failed to start: the retry starts a
			// new one rather than answer with a dead session.
			if _, err := s.store.ForgetFailedRequest(ctx, tenant, rid, prev.GetId()); err != nil {
				return nil, err
			}
			s.log.InfoContext(ctx, "retrying a create whose session failed", "request_id", rid, "failed_session", prev.GetId())
		case err == nil:
			return prev, nil
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}

	if err := s.admit(ctx, tenant, sp); err != nil {
		return nil, err
	}

	now := s.now()
	sess := &sessionv1.Session{
		Id:             newID(),
		Tenant:         tenant,
		State:          state.Pending,
		Display:        sp.display,
		Limits:         sp.limits,
		Labels:         maps.Clone(req.GetLabels()),
		NodeSelector:   maps.Clone(req.GetNodeSelector()),
		Autostart:      slices.Clone(req.GetAutostart()),
		Workspace:      req.GetWorkspace(),
		Network:        req.GetNetwork(),
		Image:          s.imageFor(req.GetImage(), req.GetWorkspace()),
		Ttl:            durationpb.New(sp.ttl),
		IdleTimeout:    durationpb.New(sp.idleTimeout),
		CreateTime:     timestamppb.New(now),
		UpdateTime:     timestamppb.New(now),
		ExpireTime:     timestamppb.New(now.Add(sp.ttl)),
		LastActiveTime: timestamppb.New(now),
		Generation:     1,
	}
	if err := s.store.Create(ctx, sess, rid); err != nil {
		if rid != "" && errors.Is(err, store.ErrAlreadyExists) {
			// A concurrent retry with the same request id won the race.
			return s.store.FindByRequestID(ctx, tenant, rid)
		}
		return nil, err
	}
	s.publish(ctx, sessionv1.SessionState_SESSION_STATE_UNSPECIFIED, sess)
	log := s.log.With("session", sess.GetId())
	log.InfoContext(ctx, "creating session", "tenant", tenant)

	cctx, cancel := context.WithTimeout(ctx, s.cfg.CreateTimeout)
	defer cancel()
	out, err := s.start(cctx, sess)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("session %s did not start within %s: %w", sess.GetId(), s.cfg.CreateTimeout, err)
		} else {
			err = fmt.Errorf("session %s failed to start: %w", sess.GetId(), err)
		}
		log.WarnContext(ctx, "session failed to start", "err", err)
		return nil, err
	}
	log.InfoContext(ctx, "session running", "node", out.GetNodeId(), "x_display", out.GetXDisplay())
	return out, nil
}

// start takes a PENDING session to RUNNING. On failure it removes whatever
// it made on the node, releases the placement and leaves the session FAILED
// (unless another call, such as a delete, took it over).
//
// A node that cannot be reached (it died and its heartbeat has not expired
// yet) does not fail the create: the session is re-placed on another node,
// up to maxPlacements in all, within the create's deadline.
func (s *Service) start(ctx context.Context, sess *sessionv1.Session) (*sessionv1.Session, error) {
	req := placement.Request{
		SessionID:    sess.GetId(),
		Tenant:       sess.GetTenant(),
		NodeSelector: sess.GetNodeSelector(),
		Resources: placement.Resources{
			MemoryBytes: sess.GetLimits().GetMemoryBytes(),
			CPUMillis:   sess.GetLimits().GetCpuMillis(),
			DiskBytes:   sess.GetLimits().GetDiskBytes(),
		},
		Image: s.sessionImageKeys(sess),
	}
	node, err := s.placer.Place(ctx, req)
	if err != nil {
		err = fmt.Errorf("placement: %w", err)
		s.abandon(ctx, sess, "", false, err)
		return nil, err
	}
	cur, err := s.advance(ctx, sess, state.Starting, "", func(n *sessionv1.Session) { n.NodeId = node.ID })
	if err != nil {
		s.releaseQuietly(ctx, node.ID, sess.GetId())
		return nil, s.lostRace(ctx, sess.GetId(), err)
	}

	for attempt := 1; ; attempt++ {
		// A call that fails on our side may still have succeeded there.
		xd, err := s.startDesktop(ctx, cur, node.ID, "")
		if err != nil && attempt < maxPlacements && nodeUnreachable(err) && ctx.Err() == nil {
			next, moved, rerr := s.replace(ctx, cur, node.ID, &req, err)
			if rerr == nil {
				cur, node = moved, next
				continue
			}
			if errors.Is(rerr, store.ErrConflict) {
				return nil, s.lostRace(ctx, cur.GetId(), rerr)
			}
			// No other node: the create fails for the first node's reason.
		}
		if err != nil {
			s.abandon(ctx, cur, node.ID, true, err)
			return nil, err
		}
		running, err := s.advance(ctx, cur, state.Running, "", func(n *sessionv1.Session) {
			n.XDisplay = xd
			n.ImageDigest = cur.GetImageDigest()
			n.LastActiveTime = timestamppb.New(s.now())
		})
		if err != nil {
			if errors.Is(err, store.ErrConflict) {
				// Deleted while starting: the delete owns the record, this call
				// only takes back what it made.
				s.undo(ctx, cur.GetId(), node.ID)
				s.releaseQuietly(ctx, node.ID, cur.GetId())
				return nil, s.lostRace(ctx, cur.GetId(), err)
			}
			s.abandon(ctx, cur, node.ID, true, err)
			return nil, err
		}
		return running, nil
	}
}

// maxPlacements bounds the nodes one create tries.
const maxPlacements = 3

// nodeUnreachable: the node could not be reached (connection refused,
// reset, not registered any more), as opposed to refusing the request.
func nodeUnreachable(err error) bool {
	var ne *nodeError
	if !errors.As(err, &ne) || ne.Answered {
		return false
	}
	if _, ok := status.FromError(ne.Err); !ok {
		return true // the node is not known any more
	}
	return status.Code(ne.Err) == codes.Unavailable
}

// replace moves a STARTING session off a node that failed before it
// started: what it may have made there is removed (best effort: the node's
// own reconcile removes what is left, as the map no longer gives it the
// session), its reservation released, and it is placed on another node.
// The record stays STARTING with the new node and the reason.
func (s *Service) replace(ctx context.Context, cur *sessionv1.Session, failed string, req *placement.Request, cause error) (placement.Node, *sessionv1.Session, error) {
	s.undo(ctx, cur.GetId(), failed)
	s.releaseQuietly(ctx, failed, cur.GetId())
	req.Exclude = append(req.Exclude, failed)
	node, err := s.placer.Place(ctx, *req)
	if err != nil {
		return placement.Node{}, nil, err
	}
	next := proto.Clone(cur).(*sessionv1.Session)
	next.NodeId = node.ID
	next.StateReason = "re-placed: " + cause.Error()
	next.Generation = cur.GetGeneration() + 1
	next.UpdateTime = timestamppb.New(s.now())
	if err := s.store.Update(ctx, next, cur.GetGeneration()); err != nil {
		s.releaseQuietly(ctx, node.ID, cur.GetId())
		return placement.Node{}, nil, err
	}
	s.log.WarnContext(ctx, "node failed before the session started; re-placed", "session", cur.GetId(), "from", failed, "to", node.ID, "err", cause)
	s.publish(ctx, cur.GetState(), next)
	return node, next, nil
}

// admit checks a new session fits its tenant's quota. Concurrent creates of
// one tenant may each see room for the last slot: the quota is a bound on
// steady use, the node capacities are the hard limit.
func (s *Service) admit(ctx context.Context, tenant string, sp spec) error {
	if tenant == "" {
		// The system, acting for no tenant, has no quota (and "" would
		// count every tenant's sessions).
		return nil
	}
	limits, ok := s.cfg.TenantQuotas[tenant]
	if !ok {
		limits = s.cfg.TenantQuota
	}
	if limits == (quota.Amount{}) {
		return nil
	}
	var used quota.Amount
	f := store.Filter{Tenant: tenant, States: []sessionv1.SessionState{state.Pending, state.Starting, state.Running, state.Suspending, state.Suspended, state.Resuming}, PageSize: 1000}
	for {
		page, next, err := s.store.List(ctx, f)
		if err != nil {
			return err
		}
		for _, ss := range page {
			used = used.Add(quota.Amount{Sessions: 1, CPUMillis: ss.GetLimits().GetCpuMillis(), MemoryBytes: ss.GetLimits().GetMemoryBytes()})
		}
		if next == "" {
			break
		}
		f.PageToken = next
	}
	return quota.Admit(limits, used, quota.Amount{Sessions: 1, CPUMillis: sp.limits.GetCpuMillis(), MemoryBytes: sp.limits.GetMemoryBytes()})
}

// startDesktop makes a session's sandbox (from a snapshot when one is named)
// and display on its node, waits until the desktop answers, starts its
// autostart programs, and returns the X display name.
func (s *Service) startDesktop(ctx context.Context, cur *sessionv1.Session, nodeID, snapshotID string) (string, error) {
	sandboxes, err := s.nodes.Sandbox(nodeID)
	if err != nil {
		return "", &nodeError{Node: nodeID, Op: "reach sandbox service", Err: err}
	}
	displays, err := s.nodes.Display(nodeID)
	if err != nil {
		return "", &nodeError{Node: nodeID, Op: "reach display service", Err: err}
	}
	lim := cur.GetLimits()
	// A session runs the image it first resolved to, by digest, even if the
	// tag has moved since (a resume after hibernation).
	img := cur.GetImage()
	if cur.GetImageDigest() != "" {
		img = cur.GetImageDigest()
	}
	d := cur.GetDisplay()
	// A node keeping desktops of the image started ahead of demand gives
	// one, its display and desktop included, when it fits.
	var desktop *sandboxv1.DesktopSpec
	if img != "" && snapshotID == "" && cur.GetWorkspace() == "" {
		desktop = &sandboxv1.DesktopSpec{Width: d.GetWidth(), Height: d.GetHeight(), Depth: d.GetDepth(), Dpi: d.GetDpi()}
	}
	if err := s.ensureImage(ctx, cur, nodeID, img); err != nil {
		return "", err
	}
	sb, err := sandboxes.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{
		SessionId:   cur.GetId(),
		Workspace:   cur.GetWorkspace(),
		MemoryBytes: lim.GetMemoryBytes(),
		CpuMillis:   lim.GetCpuMillis(),
		Pids:        lim.GetPids(),
		DiskBytes:   lim.GetDiskBytes(),
		SnapshotId:  snapshotID,
		Network:     cur.GetNetwork(),
		Image:       img,
		Desktop:     desktop,
	})
	if err != nil {
		return "", &nodeError{Node: nodeID, Op: "create sandbox", Err: err}
	}
	warm := sb.GetDesktopStarted()
	if d := sb.GetSandbox().GetImageDigest(); d != "" {
		// Written with the move to RUNNING.
		cur.ImageDigest = d
	}
	var xd string
	if warm {
		got, err := displays.GetDisplay(ctx, &displayv1.GetDisplayRequest{SessionId: cur.GetId()})
		if err != nil {
			return "", &nodeError{Node: nodeID, Op: "get the warm desktop's display", Err: err}
		}
		xd = got.GetDisplay().GetXDisplay()
	} else {
		created, err := displays.CreateDisplay(ctx, &displayv1.CreateDisplayRequest{
			SessionId: cur.GetId(),
			Width:     d.GetWidth(),
			Height:    d.GetHeight(),
			Depth:     d.GetDepth(),
			Dpi:       d.GetDpi(),
		})
		if err != nil {
			return "", &nodeError{Node: nodeID, Op: "create display", Err: err}
		}
		xd = created.GetDisplay().GetXDisplay()
	}
	// The desktop is up when it answers; one pixel is enough to know.
	if _, err := displays.Screenshot(ctx, &displayv1.ScreenshotRequest{
		SessionId: cur.GetId(),
		Format:    displayv1.ImageFormat_IMAGE_FORMAT_PNG,
		Region:    &displayv1.Rect{Width: 1, Height: 1},
	}); err != nil {
		return "", &nodeError{Node: nodeID, Op: "first screenshot", Err: err}
	}
	// The desktop and the autostart programs run inside the sandbox, on the
	// session's display, until the session ends.
	if argv := s.desktopArgv(img != ""); len(argv) > 0 && !warm {
		if _, err := sandboxes.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: cur.GetId(), Argv: argv}); err != nil {
			return "", &nodeError{Node: nodeID, Op: fmt.Sprintf("start the desktop %q", argv[0]), Err: err}
		}
		// An image's desktop is shown when the create answers: the
		// session's first screenshot is never the black of a screen its
		// desktop has not drawn yet.
		if sb.GetSandbox().GetDesktop() {
			drawn, err := waitDrawn(ctx, displays, cur.GetId(), DesktopDrawnWait)
			if err != nil {
				return "", &nodeError{Node: nodeID, Op: "wait for the desktop to be drawn", Err: err}
			}
			if !drawn {
				s.log.WarnContext(ctx, "the image's desktop showed nothing in time; the session starts without waiting longer", "session", cur.GetId(), "image", img, "waited", DesktopDrawnWait)
			}
		}
	}
	started := map[string]string{}
	for _, prog := range cur.GetAutostart() {
		p, err := sandboxes.StartProcess(ctx, &sandboxv1.StartProcessRequest{SessionId: cur.GetId(), Argv: []string{"sh", "-c", prog}})
		if err != nil {
			return "", &nodeError{Node: nodeID, Op: fmt.Sprintf("start autostart program %q", prog), Err: err}
		}
		started[p.GetProcess().GetProcessId()] = prog
	}
	s.watchAutostart(cur.GetId(), cur.GetTenant(), sandboxes, started)
	return xd, nil
}

// lostRace explains a conflict during create: someone else changed the session.
func (s *Service) lostRace(ctx context.Context, id string, err error) error {
	if !errors.Is(err, store.ErrConflict) {
		return err
	}
	cur, gerr := s.store.Get(context.WithoutCancel(ctx), id)
	if gerr != nil {
		return fmt.Errorf("%w: %w", errAborted, err)
	}
	return fmt.Errorf("%w: it is now %s (%s)", errAborted, state.Name(cur.GetState()), cur.GetStateReason())
}

// abandon cleans up after a failed start and marks the session FAILED.
func (s *Service) abandon(ctx context.Context, sess *sessionv1.Session, nodeID string, made bool, cause error) {
	cctx, cancel := detached(ctx, s.cfg.StopTimeout)
	defer cancel()
	if made {
		s.undo(cctx, sess.GetId(), nodeID)
	}
	if nodeID != "" {
		s.releaseQuietly(cctx, nodeID, sess.GetId())
	}
	if _, err := s.advance(cctx, sess, state.Failed, cause.Error(), nil); err != nil {
		s.log.WarnContext(ctx, "mark session failed", "session", sess.GetId(), "err", err)
	}
}

// undo removes a session's display and sandbox from its node; both deletes
// succeed when there is nothing to delete.
func (s *Service) undo(ctx context.Context, id, nodeID string) {
	if err := s.teardown(ctx, id, nodeID); err != nil {
		s.log.WarnContext(ctx, "undo session on node", "session", id, "node", nodeID, "err", err)
	}
}

// teardown deletes the display, then the sandbox whose files it may use.
func (s *Service) teardown(ctx context.Context, id, nodeID string) error {
	var errs []error
	if displays, err := s.nodes.Display(nodeID); err != nil {
		errs = append(errs, &nodeError{Node: nodeID, Op: "reach display service", Err: err})
	} else if _, err := displays.DeleteDisplay(ctx, &displayv1.DeleteDisplayRequest{SessionId: id}); err != nil {
		errs = append(errs, &nodeError{Node: nodeID, Op: "delete display", Err: err})
	}
	if sandboxes, err := s.nodes.Sandbox(nodeID); err != nil {
		errs = append(errs, &nodeError{Node: nodeID, Op: "reach sandbox service", Err: err})
	} else if _, err := sandboxes.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SessionId: id}); err != nil {
		errs = append(errs, &nodeError{Node: nodeID, Op: "delete sandbox", Err: err})
	}
	return errors.Join(errs...)
}

func (s *Service) releaseQuietly(ctx context.Context, nodeID, id string) {
	if err := s.placer.Release(ctx, nodeID, id); err != nil {
		s.log.WarnContext(ctx, "release placement", "session", id, "node", nodeID, "err", err)
	}
}

// imageFor is the image a new session runs: the asked one, else the
// default unless the session works on a workspace (a sandbox runs one or
// the other).
func (s *Service) imageFor(asked, workspace string) string {
	if asked != "" || workspace != "" {
		return asked
	}
	return s.cfg.DefaultImage
}

// desktopArgv starts a session's desktop. In a session from an image it is
// the image's own desktop program, which the node gives its container as
// DESKGRID_SESSION (the org.deskgrid.session label), falling back to
// Desktop; elsewhere Desktop.
func (s *Service) desktopArgv(fromImage bool) []string {
	return DesktopArgv(s.cfg.Desktop, fromImage)
}

// DesktopArgv is the program that starts a session's desktop: desktop, or
// in a session from an image the image's own desktop program.
func DesktopArgv(desktop []string, fromImage bool) []string {
	if !fromImage {
		return slices.Clone(desktop)
	}
	script := `if [ -n "$DESKGRID_SESSION" ]; then exec $DESKGRID_SESSION; fi; `
	if len(desktop) > 0 {
		script += `exec "$@"`
	} else {
		script += "exit 0"
	}
	return append([]string{"/bin/sh", "-c", script, "deskgrid-session"}, desktop...)
}
