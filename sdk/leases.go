package deskgrid

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/deskgrid/deskgrid/proto/deskgrid/agent/v1"
	displayv1 "github.com/deskgrid/deskgrid/proto/deskgrid/display/v1"
)

// AcquireInputLease waits its turn (first come, first served) for the
// session's input lease, for at most wait (0: until ctx ends), and holds it
// for ttl (0: 30 seconds). holder is a label such as a run id or a user
// name. Pass the lease's Token as the lease token of input while leases
// are in use (WithInputLease for every call made with a context, or the
// request's own with ActWith, ActOnAccessibleWith, LaunchWith); renew the
// lease before it expires and release it when done.
func (s *Session) AcquireInputLease(ctx context.Context, holder string, ttl, wait time.Duration) (*agentv1.InputLease, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &agentv1.AcquireInputLeaseRequest{SessionId: s.GetId(), Holder: holder}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	resp, err := s.c.agent.AcquireInputLease(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetLease(), nil
}

// InputLease tells who holds the session's input lease now (its holder,
// token and expiry; nil when nobody holds it) and how many callers wait for
// it. The lease's LeaseId is never told: only the caller that acquired a
// lease may renew or release it.
func (s *Session) InputLease(ctx context.Context) (*agentv1.InputLease, int, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	resp, err := s.c.agent.GetInputLease(ctx, &agentv1.GetInputLeaseRequest{SessionId: s.GetId()})
	if err != nil {
		return nil, 0, wrap(err)
	}
	return resp.GetLease(), int(resp.GetWaiting()), nil
}

// RenewInputLease extends a lease the caller still holds by ttl (0: 30
// seconds) and returns it with its new expiry.
func (s *Session) RenewInputLease(ctx context.Context, lease *agentv1.InputLease, ttl time.Duration) (*agentv1.InputLease, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req := &agentv1.RenewInputLeaseRequest{SessionId: s.GetId(), Holder: lease.GetHolder(), Token: lease.GetToken(), LeaseId: lease.GetLeaseId()}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	resp, err := s.c.agent.RenewInputLease(ctx, req)
	if err != nil {
		return nil, wrap(err)
	}
	return resp.GetLease(), nil
}

// ReleaseInputLease gives the lease up, to the next caller waiting for it.
func (s *Session) ReleaseInputLease(ctx context.Context, lease *agentv1.InputLease) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	_, err := s.c.agent.ReleaseInputLease(ctx, &agentv1.ReleaseInputLeaseRequest{
		SessionId: s.GetId(), Holder: lease.GetHolder(), Token: lease.GetToken(), LeaseId: lease.GetLeaseId(),
	})
	return wrap(err)
}

// ActWith performs the actions of a request described in full: a lease
// token while input leases are in use, a screenshot afterwards, settling.
// Its session id is the session's own.
func (s *Session) ActWith(ctx context.Context, req *displayv1.PerformActionsRequest) (*displayv1.PerformActionsResponse, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	req = proto.Clone(req).(*displayv1.PerformActionsRequest)
	req.SessionId = s.GetId()
	resp, err := s.c.display.PerformActions(ctx, req)
	return resp, wrap(err)
}

type leaseKey struct{}

// WithInputLease makes the calls made with the returned context carry
// token as their input lease token: every request that takes one (actions,
// clipboard, windows, accessibility acts, launches) and names none itself.
// A stale or missing token while a lease is held is a FailedPrecondition
// error.
func WithInputLease(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, leaseKey{}, token)
}

// withLease puts the context's input lease token (WithInputLease) in a
// request that takes one and names none.
func withLease(ctx context.Context, args any) any {
	token, ok := ctx.Value(leaseKey{}).(int64)
	m, isMsg := args.(proto.Message)
	if !ok || token == 0 || !isMsg {
		return args
	}
	r := m.ProtoReflect()
	f := r.Descriptor().Fields().ByName("lease_token")
	if f == nil || f.Kind() != protoreflect.Int64Kind || f.IsList() || r.Get(f).Int() != 0 {
		return args
	}
	c := proto.Clone(m)
	c.ProtoReflect().Set(f, protoreflect.ValueOfInt64(token))
	return c
}
