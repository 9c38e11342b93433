package session

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/session/state"
	"github.com/deskgrid/deskgrid/services/session/store"
)

// watchBuffer is how many events a watch holds while its client is slow;
// beyond that NATS drops them and the periodic re-read catches up.
const watchBuffer = 256

// WatchSession streams the session as it is now and then every newer
// version, until it ends (STOPPED, FAILED or LOST) or the caller leaves;
// an autostart program that ends meanwhile comes as a message of its own,
// and so does the progress of the pull of its image while it starts.
func (s *Service) WatchSession(req *sessionv1.WatchSessionRequest, stream sessionv1.SessionService_WatchSessionServer) error {
	ctx := stream.Context()
	if err := s.watch(ctx, req.GetSessionId(), stream.Send); err != nil {
		return s.toStatus(ctx, err)
	}
	return nil
}

func (s *Service) watch(ctx context.Context, id string, send func(*sessionv1.WatchSessionResponse) error) error {
	if err := checkID(id); err != nil {
		return err
	}
	// Subscribe before reading, so a change between the read and the
	// subscription is not missed; older versions are skipped by generation.
	var msgs chan *nats.Msg
	if s.nc != nil {
		msgs = make(chan *nats.Msg, watchBuffer)
		sub, err := s.nc.ChanSubscribe(events.SessionSubject(id), msgs)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
		// The server has the subscription once the flush returns. A flush
		// needs a deadline, and a watch's own context usually has none.
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = s.nc.FlushWithContext(fctx)
		cancel()
		if err != nil {
			return err
		}
	}
	cur, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	if err := send(&sessionv1.WatchSessionResponse{Session: cur}); err != nil {
		return err
	}
	last := cur.GetGeneration()
	if state.IsEnded(cur.GetState()) {
		return nil
	}
	resync := time.NewTicker(s.cfg.WatchResync)
	defer resync.Stop()
	for {
		var next *sessionv1.Session
		select {
		case <-ctx.Done():
			return nil
		case <-s.done:
			return errClosing
		case m := <-msgs:
			if exit := decodeProcessExit(ctx, m); exit != nil {
				if err := send(&sessionv1.WatchSessionResponse{ProcessExited: exit}); err != nil {
					return err
				}
				continue
			}
			if pull := decodeImagePull(ctx, m); pull != nil {
				if err := send(&sessionv1.WatchSessionResponse{ImagePull: pull}); err != nil {
					return err
				}
				continue
			}
			next = decodeStateChange(ctx, m)
		case <-resync.C:
			next, err = s.store.Get(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "watch re-read", "session", id, "err", err)
				continue
			}
		}
		if next == nil || next.GetId() != id || next.GetGeneration() <= last {
			continue
		}
		if err := send(&sessionv1.WatchSessionResponse{Session: next}); err != nil {
			return err
		}
		last = next.GetGeneration()
		if state.IsEnded(next.GetState()) {
			return nil
		}
	}
}

// decodeStateChange returns the session carried by a state-change event, or
// nil for anything else.
func decodeStateChange(ctx context.Context, m *nats.Msg) *sessionv1.Session {
	_, ev, err := events.Decode(ctx, m.Data, m.Header)
	if err != nil || ev.GetType() != events.TypeSessionStateChanged || ev.GetPayload() == nil {
		return nil
	}
	var p eventsv1.SessionStateChanged
	if err := ev.GetPayload().UnmarshalTo(&p); err != nil {
		return nil
	}
	if p.GetSession() == nil {
		return nil
	}
	return proto.Clone(p.GetSession()).(*sessionv1.Session)
}

// decodeProcessExit returns the autostart program's end carried by a
// process-exited event, or nil for anything else.
func decodeProcessExit(ctx context.Context, m *nats.Msg) *sessionv1.ProcessExit {
	_, ev, err := events.Decode(ctx, m.Data, m.Header)
	if err != nil || ev.GetType() != TypeProcessExited || ev.GetPayload() == nil {
		return nil
	}
	var p eventsv1.ProcessExited
	if err := ev.GetPayload().UnmarshalTo(&p); err != nil {
		return nil
	}
	return &sessionv1.ProcessExit{
		ProcessId:  p.GetProcessId(),
		Command:    p.GetCommand(),
		ExitCode:   p.GetExitCode(),
		Signal:     p.GetSignal(),
		OutputTail: p.GetOutputTail(),
		Time:       ev.GetTime(),
	}
}

// decodeImagePull returns the progress carried by an image_pull event, or
// nil for anything else.
func decodeImagePull(ctx context.Context, m *nats.Msg) *sessionv1.ImagePull {
	_, ev, err := events.Decode(ctx, m.Data, m.Header)
	if err != nil || ev.GetType() != TypeImagePull || ev.GetPayload() == nil {
		return nil
	}
	var p sessionv1.ImagePull
	if err := ev.GetPayload().UnmarshalTo(&p); err != nil {
		return nil
	}
	return &p
}
