package session

import (
	"context"
	"errors"
	"fmt"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// Reasons recorded on stopped sessions.
const (
	ReasonDeleted         = "deleted"
	ReasonTTLExpired      = "ttl expired"
	ReasonIdleTimeout     = "idle timeout"
	ReasonCreateAbandoned = "create abandoned"
)

// DeleteSession stops a session and frees what it used on its node.
func (s *Service) DeleteSession(ctx context.Context, req *sessionv1.DeleteSessionRequest) (*sessionv1.DeleteSessionResponse, error) {
	if _, err := s.get(ctx, req.GetSessionId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	sess, err := s.stop(ctx, req.GetSessionId(), ReasonDeleted)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &sessionv1.DeleteSessionResponse{Session: sess}, nil
}

// stop takes a session through STOPPING to STOPPED. It is safe to run
// several times at once, in one process or several: each step is written
// only if nobody changed the session since it was read, the node deletes
// succeed when there is nothing left, and a loser re-reads and carries on
// from where the winner got.
//
// A stop that began goes on when its caller goes away (a client that gave
// up, a gateway restarted, the reaper's replica shutting down): cut short,
// it would leave the session FAILED and its sandbox running on the node.
// StopTimeout bounds it.
func (s *Service) stop(ctx context.Context, id, reason string) (*sessionv1.Session, error) {
	ctx, cancel := detached(ctx, s.cfg.StopTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		if attempt > maxAttempts {
			return nil, fmt.Errorf("stop session %s: %w", id, errAborted)
		}
		cur, err := s.store.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		lost := cur.GetState() == state.Lost
		switch cur.GetState() {
		case state.Stopped:
			return cur, nil
		case state.Stopping:
			// Another stop is under way or died half-way; finishing it is safe.
			reason = cur.GetStateReason()
		default:
			if err := state.Check(cur.GetState(), state.Stopping); err != nil {
				return nil, &preconditionError{msg: fmt.Sprintf("session %s is %s; it can be deleted once that finishes",
					id, state.Name(cur.GetState()))}
			}
			cur, err = s.advance(ctx, cur, state.Stopping, reason, nil)
			if errors.Is(err, store.ErrConflict) {
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		if node := cur.GetNodeId(); node != "" {
			if err := s.teardown(ctx, id, node); err != nil {
				if !lost {
					s.log.WarnContext(ctx, "stop session on node", "session", id, "node", node, "err", err)
					if _, ferr := s.advance(context.WithoutCancel(ctx), cur, state.Failed, "stop: "+err.Error(), nil); ferr != nil && !errors.Is(ferr, store.ErrConflict) {
						s.log.WarnContext(ctx, "mark session failed", "session", id, "err", ferr)
					}
					return nil, fmt.Errorf("stop session %s: %w", id, err)
				}
				// A LOST session's node is gone or was restarted; when it
				// comes back its reconcile removes what is left.
				s.log.InfoContext(ctx, "lost session's node not reachable; leaving leftovers to its reconcile", "session", id, "node", node, "err", err)
			}
			s.releaseQuietly(ctx, node, id)
		}
		next, err := s.advance(ctx, cur, state.Stopped, reason, nil)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if s.usage != nil {
			s.usage.Forget(id)
		}
		s.log.InfoContext(ctx, "session stopped", "session", id, "reason", reason)
		return next, nil
	}
}
