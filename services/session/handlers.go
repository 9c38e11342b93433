package session

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// GetSession returns one session.
func (s *Service) GetSession(ctx context.Context, req *sessionv1.GetSessionRequest) (*sessionv1.GetSessionResponse, error) {
	sess, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &sessionv1.GetSessionResponse{Session: sess}, nil
}

// ListSessions pages through the caller's sessions, newest first.
func (s *Service) ListSessions(ctx context.Context, req *sessionv1.ListSessionsRequest) (*sessionv1.ListSessionsResponse, error) {
	size, err := validateList(req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	page, next, err := s.store.List(ctx, store.Filter{
		Tenant:    s.tenant(ctx),
		States:    req.GetStates(),
		Labels:    req.GetLabels(),
		PageSize:  size,
		PageToken: req.GetPageToken(),
	})
	if err != nil {
		return nil, s.toStatus(ctx, err)
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

// SuspendSession will freeze or hibernate a running session once the node's
// sandbox offers a freezer; until then it checks the request and says so.
func (s *Service) SuspendSession(ctx context.Context, req *sessionv1.SuspendSessionRequest) (*sessionv1.SuspendSessionResponse, error) {
	sess, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	switch req.GetMode() {
	case sessionv1.SuspendMode_SUSPEND_MODE_UNSPECIFIED, sessionv1.SuspendMode_SUSPEND_MODE_FREEZE, sessionv1.SuspendMode_SUSPEND_MODE_HIBERNATE:
	default:
		return nil, s.toStatus(ctx, invalid("mode", "unknown suspend mode %d", req.GetMode()))
	}
	if err := state.Check(sess.GetState(), state.Suspending); err != nil {
		return nil, s.toStatus(ctx, &preconditionError{msg: fmt.Sprintf("session %s is %s; only a RUNNING session can be suspended", sess.GetId(), state.Name(sess.GetState()))})
	}
	return nil, s.toStatus(ctx, &unimplementedError{msg: "suspend is not available yet: it needs the node sandbox's freezer; the session keeps running"})
}

// ResumeSession will bring a suspended session back; see SuspendSession.
func (s *Service) ResumeSession(ctx context.Context, req *sessionv1.ResumeSessionRequest) (*sessionv1.ResumeSessionResponse, error) {
	sess, err := s.get(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := state.Check(sess.GetState(), state.Resuming); err != nil {
		return nil, s.toStatus(ctx, &preconditionError{msg: fmt.Sprintf("session %s is %s; only a SUSPENDED session can be resumed", sess.GetId(), state.Name(sess.GetState()))})
	}
	return nil, s.toStatus(ctx, &unimplementedError{msg: "resume is not available yet: it needs the node sandbox's freezer"})
}
