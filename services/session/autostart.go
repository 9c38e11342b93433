package session

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventsv1 "github.com/deskgrid/deskgrid/proto/deskgrid/events/v1"
	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/events"
	"github.com/deskgrid/deskgrid/services/session/state"
)

// TypeProcessExited is the event type of an autostart program that ended
// while its session ran; it carries an eventsv1.ProcessExited.
const TypeProcessExited = "session.process_exited.v1"

// Autostart programs are looked at often at first, when one that cannot
// start ends, then less and less.
const (
	autostartFirstLook = 250 * time.Millisecond
	autostartMaxLook   = 10 * time.Second
)

// watchAutostart follows a session's autostart programs (process id to
// autostart line) until each has ended or the session's sandbox is gone.
// One that ends while the session runs is logged and published with its
// exit status and the end of its output, so the session's events and
// history say why the screen stayed empty.
func (s *Service) watchAutostart(sessionID, tenant string, sandboxes sandboxv1.SandboxServiceClient, started map[string]string) {
	if len(started) == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wait := autostartFirstLook
		for len(started) > 0 {
			select {
			case <-s.done:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, autostartMaxLook)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			list, err := sandboxes.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SessionId: sessionID})
			cancel()
			if status.Code(err) == codes.NotFound {
				return // the sandbox is gone with its programs
			}
			if err != nil {
				s.log.Debug("list autostart programs", "session", sessionID, "err", err)
				continue
			}
			for _, p := range list.GetProcesses() {
				prog, ok := started[p.GetProcessId()]
				if !ok || p.GetState() != sandboxv1.ProcessState_PROCESS_STATE_EXITED {
					continue
				}
				delete(started, p.GetProcessId())
				s.autostartExited(sessionID, tenant, prog, p)
			}
		}
	}()
}

// autostartExited records an autostart program's end, unless its session
// is on its way out (a stop ends every program).
func (s *Service) autostartExited(sessionID, tenant, prog string, p *sandboxv1.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if cur, err := s.store.Get(ctx, sessionID); err != nil || (cur.GetState() != state.Running && cur.GetState() != state.Starting) {
		return
	}
	ev := &eventsv1.ProcessExited{
		ProcessId:  p.GetProcessId(),
		Command:    prog,
		ExitCode:   p.GetExit().GetExitCode(),
		Signal:     p.GetExit().GetSignal(),
		OutputTail: p.GetOutputTail(),
	}
	s.log.WarnContext(ctx, "autostart program exited", "session", sessionID, "command", prog,
		"exit_code", ev.GetExitCode(), "signal", ev.GetSignal(), "output_tail", ev.GetOutputTail())
	if s.events == nil {
		return
	}
	if _, err := s.events.Publish(ctx, events.Meta{Type: TypeProcessExited, SessionID: sessionID, Tenant: tenant}, ev); err != nil {
		s.log.WarnContext(ctx, "publish autostart exit", "session", sessionID, "err", err)
	}
}
