package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// advance moves cur to the state to, with mutate applied, writes it if cur
// is still the stored version, and publishes the change. It returns the new
// version; store.ErrConflict if the session changed in between.
func (s *Service) advance(ctx context.Context, cur *sessionv1.Session, to sessionv1.SessionState, reason string, mutate func(*sessionv1.Session)) (*sessionv1.Session, error) {
	if err := state.Check(cur.GetState(), to); err != nil {
		return nil, err
	}
	next := proto.Clone(cur).(*sessionv1.Session)
	if mutate != nil {
		mutate(next)
	}
	next.State = to
	next.StateReason = reason
	next.Generation = cur.GetGeneration() + 1
	next.UpdateTime = timestamppb.New(s.now())
	if err := s.store.Update(ctx, next, cur.GetGeneration()); err != nil {
		return nil, err
	}
	s.log.DebugContext(ctx, "session state changed", "session", next.GetId(),
		"from", state.Name(cur.GetState()), "to", state.Name(to), "reason", reason, "generation", next.GetGeneration())
	s.publish(ctx, cur.GetState(), next)
	return next, nil
}

// publish announces a state change. The record is already written, so a
// failure is logged rather than returned: watches catch up from the record.
func (s *Service) publish(ctx context.Context, from sessionv1.SessionState, sess *sessionv1.Session) {
	if s.events == nil {
		return
	}
	_, err := s.events.Publish(ctx, events.Meta{
		Type:      events.TypeSessionStateChanged,
		SessionID: sess.GetId(),
		Tenant:    sess.GetTenant(),
		Sequence:  sess.GetGeneration(),
	}, &eventsv1.SessionStateChanged{
		From:    from,
		To:      sess.GetState(),
		Reason:  sess.GetStateReason(),
		Session: sess,
	})
	if err != nil {
		s.log.WarnContext(ctx, "publish session state change", "session", sess.GetId(), "state", state.Name(sess.GetState()), "err", err)
	}
}

// update rewrites a session without a state change (such as a keepalive),
// retrying on concurrent changes. change returns an error to give up.
func (s *Service) update(ctx context.Context, id string, change func(*sessionv1.Session) error) (*sessionv1.Session, error) {
	for attempt := 0; ; attempt++ {
		cur, err := s.store.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		next := proto.Clone(cur).(*sessionv1.Session)
		if err := change(next); err != nil {
			return nil, err
		}
		next.Generation = cur.GetGeneration() + 1
		next.UpdateTime = timestamppb.New(s.now())
		err = s.store.Update(ctx, next, cur.GetGeneration())
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, store.ErrConflict) || attempt >= maxAttempts {
			return nil, err
		}
	}
}

// maxAttempts bounds retries after concurrent changes; each retry means
// another call made progress, so a handful is plenty.
const maxAttempts = 8

// detached returns a context for cleanup that must finish even though the
// caller's context ended, bounded by d.
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// get loads a session the caller's tenant owns; another tenant's session is
// reported as not found so its existence does not leak.
func (s *Service) get(ctx context.Context, id string) (*sessionv1.Session, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	sess, err := s.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !s.tenancy.Sees(ctx, sess.GetTenant())) {
		return nil, fmt.Errorf("session %s: %w", id, errNotFound)
	}
	return sess, err
}
