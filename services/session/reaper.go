package session

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// reapBatch is how many sessions one reaper pass handles at most; the next
// pass takes the rest.
const reapBatch = 100

func (s *Service) reapLoop(every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.done
		cancel()
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Reap(ctx); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "reap sessions", "err", err)
			}
		}
	}
}

// Reap stops the sessions past their TTL or idle timeout, and those a dead
// process left half-created or half-stopped. It returns how many it stopped.
// The reaper calls it every ReapInterval; replicas may run it at once.
func (s *Service) Reap(ctx context.Context) (int, error) {
	now := s.now()
	expired, err := s.store.ListExpired(ctx, now, reapBatch)
	if err != nil {
		return 0, err
	}
	stale, err := s.store.ListStale(ctx, []sessionv1.SessionState{state.Pending, state.Starting, state.Stopping},
		now.Add(-s.cfg.StaleAfter), reapBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	reap := func(sess *sessionv1.Session, reason string) {
		if ctx.Err() != nil {
			return // shutting down: the next reap, on any replica, takes the rest
		}
		if _, err := s.stop(ctx, sess.GetId(), reason); err != nil {
			errs = append(errs, err)
			return
		}
		n++
	}
	for _, sess := range expired {
		reason := ReasonIdleTimeout
		if !sess.GetExpireTime().AsTime().After(now) {
			reason = ReasonTTLExpired
		} else if s.inUse(ctx, sess, now) {
			continue
		}
		reap(sess, reason)
	}
	for _, sess := range stale {
		reap(sess, ReasonCreateAbandoned)
	}
	if n > 0 {
		s.log.InfoContext(ctx, "reaped sessions", "count", n)
	}
	return n, errors.Join(errs...)
}

// inUse reports whether a session whose stored idle deadline passed was in
// fact used since: the activity reports say it is busy (a stream, a
// viewer, a run in progress) or was used within its idle timeout, or their
// monitor has not listened long enough to know. A use moves the stored
// last_active_time, so the reaper does not list the session again before
// its new idle deadline; the record is written only then, not on every use.
func (s *Service) inUse(ctx context.Context, sess *sessionv1.Session, now time.Time) bool {
	if s.usage == nil {
		return false
	}
	st := s.usage.Session(sess.GetId())
	last := sess.GetLastActiveTime().AsTime()
	switch {
	case st.Busy:
		last = now
	case st.LastActive.After(last):
		last = st.LastActive
	case !st.Warm:
		return true
	default:
		return false
	}
	if !last.Add(sess.GetIdleTimeout().AsDuration()).After(now) {
		return false
	}
	_, err := s.update(ctx, sess.GetId(), func(n *sessionv1.Session) error {
		if n.GetState() != state.Running {
			return errNotRunning
		}
		if last.After(n.GetLastActiveTime().AsTime()) {
			n.LastActiveTime = timestamppb.New(last)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errNotRunning) {
		s.log.WarnContext(ctx, "record session activity", "session", sess.GetId(), "err", err)
	}
	return true
}

var errNotRunning = errors.New("session not running")

// withActivity shows a running session's last use as the activity
// reports know it, which may be later than the one stored.
func (s *Service) withActivity(sess *sessionv1.Session) *sessionv1.Session {
	if s.usage == nil || sess.GetState() != state.Running {
		return sess
	}
	st := s.usage.Session(sess.GetId())
	last := st.LastActive
	if st.Busy {
		last = s.now()
	}
	if last.After(sess.GetLastActiveTime().AsTime()) {
		sess.LastActiveTime = timestamppb.New(last)
	}
	return sess
}

// MarkNodeSessionsLost marks every session on nodeID that has not ended
// LOST with reason, and releases their placements. The node's own reconcile
// removes whatever they left there. The all-in-one mode calls it at start,
// for the sessions of the process before. It returns how many it marked.
//
// A session still STARTING, for less than the create timeout, is left to
// its create: that call is finding the node unreachable and re-places the
// session on another node or marks it FAILED. (One whose create died with
// its replica is ended by the reaper once stale.)
func (s *Service) MarkNodeSessionsLost(ctx context.Context, nodeID, reason string) (int, error) {
	active, err := s.store.ListActive(ctx, nodeID)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, sess := range active {
		cur := sess
		for attempt := 0; ; attempt++ {
			if state.Check(cur.GetState(), state.Lost) != nil {
				break // such as PENDING, which has no node yet
			}
			if cur.GetState() == state.Starting && s.now().Sub(cur.GetUpdateTime().AsTime()) < s.cfg.CreateTimeout {
				break
			}
			_, err := s.advance(ctx, cur, state.Lost, reason, nil)
			if err == nil {
				n++
				s.releaseQuietly(ctx, nodeID, cur.GetId())
				break
			}
			if !errors.Is(err, store.ErrConflict) || attempt >= maxAttempts {
				errs = append(errs, err)
				break
			}
			if cur, err = s.store.Get(ctx, cur.GetId()); err != nil {
				errs = append(errs, err)
				break
			}
			if cur.GetNodeId() != nodeID {
				break
			}
		}
	}
	if n > 0 {
		s.log.InfoContext(ctx, "sessions marked lost", "node", nodeID, "count", n, "reason", reason)
	}
	return n, errors.Join(errs...)
}

// LiveOnNode returns the sessions the control plane gives nodeID: a node's
// reconcile tears down anything it runs that is not in the set.
func (s *Service) LiveOnNode(ctx context.Context, nodeID string) (map[string]bool, error) {
	active, err := s.store.ListActive(ctx, nodeID)
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(active))
	for _, sess := range active {
		live[sess.GetId()] = true
	}
	return live, nil
}

// SessionEnded reports whether a session no longer holds anything on a node
// (STOPPED, FAILED or LOST, or no record at all), so its placement may be
// released.
func (s *Service) SessionEnded(ctx context.Context, id string) (bool, error) {
	sess, err := s.store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return state.IsEnded(sess.GetState()), nil
}

// Placed returns every session the records place on a node that has not
// ended: what the cluster's session map is rebuilt from when Redis lost it.
func (s *Service) Placed(ctx context.Context) ([]*sessionv1.Session, error) {
	active, err := s.store.ListActive(ctx, "")
	if err != nil {
		return nil, err
	}
	out := active[:0]
	for _, sess := range active {
		if sess.GetNodeId() != "" {
			out = append(out, sess)
		}
	}
	return out, nil
}
