package agent

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/agent/lease"
)

func leaseProto(l lease.Lease) *agentv1.InputLease {
	return &agentv1.InputLease{SessionId: l.SessionID, Holder: l.Holder, Token: l.Token, LeaseId: l.ID, ExpireTime: timestamppb.New(l.Expires)}
}

func leaseErr(err error) error {
	switch {
	case errors.Is(err, lease.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, lease.ErrNotHolder):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	default:
		return status.Errorf(codes.Unavailable, "input lease: %v", err)
	}
}

func checkTTL(d interface{ AsDuration() time.Duration }, name string) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	v := d.AsDuration()
	if v < 0 || v > time.Hour {
		return 0, status.Errorf(codes.InvalidArgument, "%s must be between 0 and 1h", name)
	}
	return v, nil
}

// AcquireInputLease waits for the session's input lease.
func (s *Service) AcquireInputLease(ctx context.Context, req *agentv1.AcquireInputLeaseRequest) (*agentv1.AcquireInputLeaseResponse, error) {
	ttl, err := checkTTL(req.GetTtl(), "ttl")
	if err != nil {
		return nil, err
	}
	wait, err := checkTTL(req.GetWait(), "wait")
	if err != nil {
		return nil, err
	}
	if req.GetSessionId() == "" || req.GetHolder() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id and holder are required")
	}
	if err := s.checkSession(ctx, req.GetSessionId(), false); err != nil {
		return nil, err
	}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	l, err := s.leases.Acquire(ctx, req.GetSessionId(), req.GetHolder(), ttl)
	if err != nil {
		return nil, leaseErr(err)
	}
	return &agentv1.AcquireInputLeaseResponse{Lease: leaseProto(l)}, nil
}

// RenewInputLease extends a held lease.
func (s *Service) RenewInputLease(ctx context.Context, req *agentv1.RenewInputLeaseRequest) (*agentv1.RenewInputLeaseResponse, error) {
	ttl, err := checkTTL(req.GetTtl(), "ttl")
	if err != nil {
		return nil, err
	}
	if req.GetSessionId() == "" || req.GetLeaseId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id and lease_id are required")
	}
	if err := s.checkSession(ctx, req.GetSessionId(), false); err != nil {
		return nil, err
	}
	l, err := s.leases.Renew(ctx, req.GetSessionId(), req.GetLeaseId(), ttl)
	if err != nil {
		return nil, leaseErr(err)
	}
	return &agentv1.RenewInputLeaseResponse{Lease: leaseProto(l)}, nil
}

// ReleaseInputLease gives a lease up.
func (s *Service) ReleaseInputLease(ctx context.Context, req *agentv1.ReleaseInputLeaseRequest) (*agentv1.ReleaseInputLeaseResponse, error) {
	if req.GetSessionId() == "" || req.GetLeaseId() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_id and lease_id are required")
	}
	if err := s.checkSession(ctx, req.GetSessionId(), false); err != nil {
		return nil, err
	}
	if err := s.leases.Release(ctx, req.GetSessionId(), req.GetLeaseId()); err != nil {
		return nil, leaseErr(err)
	}
	s.releaseAtDisplay(ctx, req.GetSessionId(), req.GetToken())
	return &agentv1.ReleaseInputLeaseResponse{}, nil
}

// releaseAtDisplay tells the session's display that the lease of token was
// given up, so input without a token is accepted again. A display that
// cannot be told keeps refusing it until a newer holder releases.
func (s *Service) releaseAtDisplay(ctx context.Context, sessionID string, token int64) {
	if s.deps.Display == nil || token <= 0 {
		return
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	if _, err := s.deps.Display.PerformActions(ctx, &displayv1.PerformActionsRequest{SessionId: sessionID, LeaseToken: token, ReleaseLease: true}); err != nil {
		s.logger.Warn("release input lease at the display", "session", sessionID, "err", err)
	}
}
