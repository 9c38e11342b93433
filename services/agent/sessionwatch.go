package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
)

// sessionEndedError is why a run failed: its session stopped under it.
type sessionEndedError struct {
	session string
	state   sessionv1.SessionState
	reason  string
}

func (e *sessionEndedError) Error() string {
	msg := fmt.Sprintf("session %s %s", e.session, sessionVerb(e.state))
	if e.reason != "" {
		msg += ": " + e.reason
	}
	return msg
}

// sessionVerb says what happened to a session that entered st.
func sessionVerb(st sessionv1.SessionState) string {
	switch st {
	case sessionv1.SessionState_SESSION_STATE_STOPPING, sessionv1.SessionState_SESSION_STATE_STOPPED:
		return "stopped"
	case sessionv1.SessionState_SESSION_STATE_FAILED:
		return "failed"
	case sessionv1.SessionState_SESSION_STATE_LOST:
		return "was lost"
	case sessionv1.SessionState_SESSION_STATE_SUSPENDING, sessionv1.SessionState_SESSION_STATE_SUSPENDED:
		return "was suspended"
	}
	return "is " + strings.ToLower(strings.TrimPrefix(st.String(), "SESSION_STATE_"))
}

// endsRuns: a session entering one of these states no longer serves a run.
func endsRuns(st sessionv1.SessionState) bool {
	switch st {
	case sessionv1.SessionState_SESSION_STATE_STOPPING, sessionv1.SessionState_SESSION_STATE_STOPPED,
		sessionv1.SessionState_SESSION_STATE_FAILED, sessionv1.SessionState_SESSION_STATE_LOST,
		sessionv1.SessionState_SESSION_STATE_SUSPENDING, sessionv1.SessionState_SESSION_STATE_SUSPENDED:
		return true
	}
	return false
}

// endedMemory is how long a session's end is remembered, to refuse a run
// admitted between its check of the session and the end's arrival.
const endedMemory = 10 * time.Minute

// watchSessions follows every session's state changes; when a session
// stops, fails, is lost or suspended, the runs this process executes on it
// fail with the reason.
func (s *Service) watchSessions(nc *nats.Conn) (*nats.Subscription, error) {
	subject := events.SubjectPrefix + ".*." + events.TypeSessionStateChanged
	sub, err := nc.Subscribe(subject, func(msg *nats.Msg) {
		_, ev, err := events.Decode(context.Background(), msg.Data, msg.Header)
		if err != nil {
			s.logger.Warn("session event unreadable", "err", err)
			return
		}
		var ch eventsv1.SessionStateChanged
		if err := ev.GetPayload().UnmarshalTo(&ch); err != nil {
			s.logger.Warn("session event unreadable", "err", err)
			return
		}
		if ch.GetTo() == sessionv1.SessionState_SESSION_STATE_RUNNING {
			s.sessionResumed(ev.GetSessionId())
		}
		if endsRuns(ch.GetTo()) {
			s.sessionEnded(&sessionEndedError{session: ev.GetSessionId(), state: ch.GetTo(), reason: ch.GetReason()})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("agent: follow session states: %w", err)
	}
	_ = sub.SetPendingLimits(-1, 64<<20)
	return sub, nil
}

// sessionEnded fails the runs in progress on a session that ended and
// remembers the end for runs about to start.
func (s *Service) sessionEnded(why *sessionEndedError) {
	now := time.Now()
	s.mu.Lock()
	if s.ended == nil {
		s.ended = map[string]endedAt{}
	}
	if old, ok := s.ended[why.session]; !ok || !endsFor(old.why.state) {
		s.ended[why.session] = endedAt{why: why, at: now}
	}
	if now.Sub(s.endedPruned) > time.Minute {
		s.endedPruned = now
		for id, e := range s.ended {
			if now.Sub(e.at) > endedMemory {
				delete(s.ended, id)
			}
		}
	}
	var hit []*run
	for _, r := range s.runs {
		if r.rec.GetSessionId() == why.session {
			hit = append(hit, r)
		}
	}
	s.mu.Unlock()
	for _, r := range hit {
		r.mu.Lock()
		cancel, st := r.cancel, r.rec.GetState()
		r.mu.Unlock()
		if cancel != nil && !terminal(st) {
			s.logger.Info("run fails with its session", "run", r.id, "session", why.session, "reason", why.Error())
			cancel(why)
		}
	}
}

// endsFor: the session will not run again (a suspended one may resume).
func endsFor(st sessionv1.SessionState) bool {
	return st != sessionv1.SessionState_SESSION_STATE_SUSPENDING && st != sessionv1.SessionState_SESSION_STATE_SUSPENDED
}

type endedAt struct {
	why *sessionEndedError
	at  time.Time
}

// endedRecently is why a session may not take a run, if it ended (or was
// suspended and not resumed since) lately. Called with s.mu held.
func (s *Service) endedRecently(session string) *sessionEndedError {
	if e, ok := s.ended[session]; ok {
		return e.why
	}
	return nil
}

// sessionResumed forgets a suspension once the session runs again.
func (s *Service) sessionResumed(session string) {
	s.mu.Lock()
	if e, ok := s.ended[session]; ok && !endsFor(e.why.state) {
		delete(s.ended, session)
	}
	s.mu.Unlock()
}
