package session

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/metrics"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// GetSession returns one session.
func (s *Service) GetSession(ctx context.Context, req *sessionv1.GetSessionRequest) (*sessionv1.GetSessionResponse, error) {
	sess, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &sessionv1.GetSessionResponse{Session: s.withActivity(sess)}, nil
}

// ListSessions pages through the caller's sessions, newest first.
func (s *Service) ListSessions(ctx context.Context, req *sessionv1.ListSessionsRequest) (*sessionv1.ListSessionsResponse, error) {
	size, err := validateList(req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	// The caller's tenant's sessions; every tenant's for the system and
	// with auth off; none for an anonymous caller.
	tenant, err := s.tenancy.Scope(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	page, next, err := s.store.List(ctx, store.Filter{
		Tenant:    tenant,
		States:    req.GetStates(),
		Labels:    req.GetLabels(),
		PageSize:  size,
		PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	for _, sess := range page {
		s.withActivity(sess)
	}
	return &sessionv1.ListSessionsResponse{Sessions: page, NextPageToken: next}, nil
}

// KeepaliveSession resets a running session's idle timer.
func (s *Service) KeepaliveSession(ctx context.Context, req *sessionv1.KeepaliveSessionRequest) (*sessionv1.KeepaliveSessionResponse, error) {
	if _, err := s.get(ctx, req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	sess, err := s.update(ctx, req.GetSessionId(), func(n *sessionv1.Session) error {
		if n.GetState() != state.Running {
			return &preconditionError{msg: fmt.Sprintf("session %s is %s; only a RUNNING session has an idle timer", n.GetId(), state.Name(n.GetState()))}
		}
		n.LastActiveTime = timestamppb.New(s.now())
		return nil
	})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &sessionv1.KeepaliveSessionResponse{Session: sess}, nil
}

// SuspendSession freezes a running session's processes in place (FREEZE,
// the default: memory kept, back in an instant) or hibernates it (HIBERNATE:
// its files saved as a snapshot, its desktop and processes stopped, memory
// freed; resuming restores the files and starts the desktop again).
// Each call is counted in deskgrid_session_suspends_total.
func (s *Service) SuspendSession(ctx context.Context, req *sessionv1.SuspendSessionRequest) (*sessionv1.SuspendSessionResponse, error) {
	mode := "unknown"
	switch req.GetMode() {
	case sessionv1.SuspendMode_SUSPEND_MODE_UNSPECIFIED, sessionv1.SuspendMode_SUSPEND_MODE_FREEZE:
		mode = "freeze"
	case sessionv1.SuspendMode_SUSPEND_MODE_HIBERNATE:
		mode = "hibernate"
	}
	sess, err := s.suspend(ctx, req)
	if err != nil {
		err = s.toStatus(ctx, err)
		metrics.SessionSuspended(ctx, mode, err)
		return nil, err
	}
	metrics.SessionSuspended(ctx, mode, nil)
	return &sessionv1.SuspendSessionResponse{Session: sess}, nil
}

func (s *Service) suspend(ctx context.Context, req *sessionv1.SuspendSessionRequest) (*sessionv1.Session, error) {
	sess, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	mode := req.GetMode()
	switch mode {
	case sessionv1.SuspendMode_SUSPEND_MODE_UNSPECIFIED:
		mode = sessionv1.SuspendMode_SUSPEND_MODE_FREEZE
	case sessionv1.SuspendMode_SUSPEND_MODE_FREEZE, sessionv1.SuspendMode_SUSPEND_MODE_HIBERNATE:
	default:
		return nil, invalid("mode", "unknown suspend mode %d", req.GetMode())
	}
	if err := state.Check(sess.GetState(), state.Suspending); err != nil {
		return nil, &preconditionError{msg: fmt.Sprintf("session %s is %s; only a RUNNING session can be suspended", sess.GetId(), state.Name(sess.GetState()))}
	}
	cur, err := s.advance(ctx, sess, state.Suspending, "", func(n *sessionv1.Session) { n.SuspendMode = mode })
	if err != nil {
		return nil, err
	}
	nodeID := cur.GetNodeId()
	sandboxes, err := s.nodes.Sandbox(nodeID)
	if err != nil {
		return s.suspendFailed(ctx, cur, &nodeError{Node: nodeID, Op: "reach sandbox service", Err: err}, false)
	}
	if mode == sessionv1.SuspendMode_SUSPEND_MODE_FREEZE {
		if _, err := sandboxes.FreezeSandbox(ctx, &sandboxv1.FreezeSandboxRequest{SessionId: cur.GetId()}); err != nil {
			return s.suspendFailed(ctx, cur, &nodeError{Node: nodeID, Op: "freeze sandbox", Err: err}, false)
		}
		return s.advance(ctx, cur, state.Suspended, "frozen", nil)
	}
	snap, err := sandboxes.CreateSnapshot(ctx, &sandboxv1.CreateSnapshotRequest{SessionId: cur.GetId()})
	if err != nil {
		return s.suspendFailed(ctx, cur, &nodeError{Node: nodeID, Op: "snapshot sandbox", Err: err}, false)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	// From here the desktop goes away: a failure leaves the session FAILED,
	// its files still in the snapshot.
	cur, err = s.update(ctx, cur.GetId(), func(n *sessionv1.Session) error { n.SnapshotId = snapID; return nil })
	if err != nil {
		return nil, err
	}
	if err := s.teardown(ctx, cur.GetId(), nodeID); err != nil {
		return s.suspendFailed(ctx, cur, err, true)
	}
	return s.advance(ctx, cur, state.Suspended, "hibernated", func(n *sessionv1.Session) { n.XDisplay = "" })
}

// suspendFailed puts a session whose suspend failed back to RUNNING when
// nothing was undone on the node, else FAILED, and returns the cause.
func (s *Service) suspendFailed(ctx context.Context, cur *sessionv1.Session, cause error, broken bool) (*sessionv1.Session, error) {
	to, reason := state.Running, ""
	if broken {
		to, reason = state.Failed, "suspend failed: "+cause.Error()
	}
	if _, err := s.advance(context.WithoutCancel(ctx), cur, to, reason, nil); err != nil {
		return nil, errors.Join(cause, err)
	}
	return nil, cause
}

// ResumeSession brings a suspended session back to RUNNING.
// Each call is counted in deskgrid_session_resumes_total.
func (s *Service) ResumeSession(ctx context.Context, req *sessionv1.ResumeSessionRequest) (*sessionv1.ResumeSessionResponse, error) {
	mode := "none"
	sess, err := s.resume(ctx, req.GetSessionId(), &mode)
	if err != nil {
		err = s.toStatus(ctx, err)
		metrics.SessionResumed(ctx, mode, err)
		return nil, err
	}
	metrics.SessionResumed(ctx, mode, nil)
	return &sessionv1.ResumeSessionResponse{Session: sess}, nil
}

// resume sets *mode to the mode the session was suspended in ("freeze",
// "hibernate") once it is known to be suspended.
func (s *Service) resume(ctx context.Context, id string, mode *string) (*sessionv1.Session, error) {
	sess, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sess.GetState() == state.Suspended {
		*mode = "freeze"
		if sess.GetSuspendMode() == sessionv1.SuspendMode_SUSPEND_MODE_HIBERNATE {
			*mode = "hibernate"
		}
	}
	if err := state.Check(sess.GetState(), state.Resuming); err != nil {
		return nil, &preconditionError{msg: fmt.Sprintf("session %s is %s; only a SUSPENDED session can be resumed", sess.GetId(), state.Name(sess.GetState()))}
	}
	cur, err := s.advance(ctx, sess, state.Resuming, "", nil)
	if err != nil {
		return nil, err
	}
	nodeID := cur.GetNodeId()
	fail := func(err error) (*sessionv1.Session, error) {
		if _, aerr := s.advance(context.WithoutCancel(ctx), cur, state.Failed, "resume failed: "+err.Error(), nil); aerr != nil {
			return nil, errors.Join(err, aerr)
		}
		return nil, err
	}
	sandboxes, err := s.nodes.Sandbox(nodeID)
	if err != nil {
		return fail(&nodeError{Node: nodeID, Op: "reach sandbox service", Err: err})
	}
	if cur.GetSuspendMode() != sessionv1.SuspendMode_SUSPEND_MODE_HIBERNATE {
		if _, err := sandboxes.ThawSandbox(ctx, &sandboxv1.ThawSandboxRequest{SessionId: cur.GetId()}); err != nil {
			return fail(&nodeError{Node: nodeID, Op: "thaw sandbox", Err: err})
		}
		return s.advance(ctx, cur, state.Running, "", func(n *sessionv1.Session) { n.LastActiveTime = timestamppb.New(s.now()) })
	}
	xd, err := s.startDesktop(ctx, cur, nodeID, cur.GetSnapshotId())
	if err != nil {
		return fail(err)
	}
	// The files are back in the sandbox; the snapshot has served.
	if _, err := sandboxes.DeleteSnapshot(ctx, &sandboxv1.DeleteSnapshotRequest{SessionId: cur.GetId(), SnapshotId: cur.GetSnapshotId()}); err != nil {
		s.log.WarnContext(ctx, "snapshot of a resumed session not deleted", "session", cur.GetId(), "err", err)
	}
	return s.advance(ctx, cur, state.Running, "", func(n *sessionv1.Session) {
		n.XDisplay = xd
		n.SnapshotId = ""
		n.LastActiveTime = timestamppb.New(s.now())
	})
}

// CommitSession writes a running session's changes as a new image on its
// node, on top of the session's image, tagged for the caller's tenant.
func (s *Service) CommitSession(ctx context.Context, req *sessionv1.CommitSessionRequest) (*sessionv1.CommitSessionResponse, error) {
	if strings.TrimSpace(req.GetImage()) == "" {
		return nil, s.toStatus(ctx, invalid("image", "name the new image, such as my-team/qa-desktop:v3"))
	}
	sess, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if st := sess.GetState(); st != state.Running && st != state.Suspended {
		return nil, s.toStatus(ctx, &preconditionError{msg: fmt.Sprintf("session %s is %s; only a RUNNING or SUSPENDED session can be committed", sess.GetId(), state.Name(st))})
	}
	nodeID := sess.GetNodeId()
	sandboxes, err := s.nodes.Sandbox(nodeID)
	if err != nil {
		return nil, s.toStatus(ctx, &nodeError{Node: nodeID, Op: "reach sandbox service", Err: err})
	}
	res, err := sandboxes.CommitSandbox(ctx, &sandboxv1.CommitSandboxRequest{SessionId: sess.GetId(), Image: req.GetImage()})
	if err != nil {
		return nil, s.toStatus(ctx, &nodeError{Node: nodeID, Op: "commit sandbox", Err: err})
	}
	return &sessionv1.CommitSessionResponse{Image: res.GetImage(), Digest: res.GetDigest(), Size: res.GetSize()}, nil
}
