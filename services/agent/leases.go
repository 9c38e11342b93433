package agent

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
	"github.com/deskgrid/deskgrid/services/agent/lease"
)

func leaseProto(l lease.Lease) *agentv1.InputLease {
	return &agentv1.InputLease{SessionId: l.SessionID, Holder: l.Holder, Token: l.Token, LeaseId: l.ID, ExpireTime: timestamppb.New(l.Expires)}
}

func checkTTL(d interface{ AsDuration() time.Duration }, name string) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	v := d.AsDuration()
	if v < 0 || v > time.Hour {
		return 0, invalid("%s must be between 0 and 1h", name)
	}
	return v, nil
}

// AcquireInputLease waits for the session's input lease.
func (s *Service) AcquireInputLease(ctx context.Context, req *agentv1.AcquireInputLeaseRequest) (*agentv1.AcquireInputLeaseResponse, error) {
	l, err := s.acquireInputLease(ctx, req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &agentv1.AcquireInputLeaseResponse{Lease: leaseProto(l)}, nil
}

func (s *Service) acquireInputLease(ctx context.Context, req *agentv1.AcquireInputLeaseRequest) (lease.Lease, error) {
	ttl, err := checkTTL(req.GetTtl(), "ttl")
	if err != nil {
		return lease.Lease{}, err
	}
	wait, err := checkTTL(req.GetWait(), "wait")
	if err != nil {
		return lease.Lease{}, err
	}
	if req.GetSessionId() == "" || req.GetHolder() == "" {
		return lease.Lease{}, invalid("session_id and holder are required")
	}
	if err := s.checkSession(ctx, req.GetSessionId(), false); err != nil {
		return lease.Lease{}, err
	}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	l, err := s.leases.Acquire(ctx, req.GetSessionId(), req.GetHolder(), ttl)
	return l, leaseErr(err)
}

// GetInputLease tells who holds the session's input lease and how many wait
// for it; the lease_id stays with the caller that acquired the lease.
func (s *Service) GetInputLease(ctx context.Context, req *agentv1.GetInputLeaseRequest) (*agentv1.GetInputLeaseResponse, error) {
	if req.GetSessionId() == "" {
		return nil, s.toStatus(ctx, invalid("session_id is required"))
	}
	if err := s.checkSession(ctx, req.GetSessionId(), false); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	st, err := s.leases.Status(ctx, req.GetSessionId())
	if err != nil {
		return nil, s.toStatus(ctx, leaseErr(err))
	}
	resp := &agentv1.GetInputLeaseResponse{Waiting: int32(min(st.Waiting, math.MaxInt32))}
	if st.Held {
		resp.Lease = leaseProto(st.Lease)
		resp.Lease.LeaseId = ""
	}
	return resp, nil
}

// RenewInputLease extends a held lease.
func (s *Service) RenewInputLease(ctx context.Context, req *agentv1.RenewInputLeaseRequest) (*agentv1.RenewInputLeaseResponse, error) {
	l, err := s.renewInputLease(ctx, req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &agentv1.RenewInputLeaseResponse{Lease: leaseProto(l)}, nil
}

func (s *Service) renewInputLease(ctx context.Context, req *agentv1.RenewInputLeaseRequest) (lease.Lease, error) {
	ttl, err := checkTTL(req.GetTtl(), "ttl")
	if err != nil {
		return lease.Lease{}, err
	}
	if req.GetSessionId() == "" || req.GetLeaseId() == "" {
		return lease.Lease{}, invalid("session_id and lease_id are required")
	}
	if err := s.checkSession(ctx, req.GetSessionId(), false); err != nil {
		return lease.Lease{}, err
	}
	l, err := s.leases.Renew(ctx, req.GetSessionId(), req.GetLeaseId(), ttl)
	return l, leaseErr(err)
}

// ReleaseInputLease gives a lease up.
func (s *Service) ReleaseInputLease(ctx context.Context, req *agentv1.ReleaseInputLeaseRequest) (*agentv1.ReleaseInputLeaseResponse, error) {
	if req.GetSessionId() == "" || req.GetLeaseId() == "" {
		return nil, s.toStatus(ctx, invalid("session_id and lease_id are required"))
	}
	if err := s.checkSession(ctx, req.GetSessionId(), false); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := s.leases.Release(ctx, req.GetSessionId(), req.GetLeaseId()); err != nil {
		return nil, s.toStatus(ctx, leaseErr(err))
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
