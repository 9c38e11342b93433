// Package state is the session life cycle as a transition table.
//
// PENDING -> STARTING -> RUNNING <-> (SUSPENDING -> SUSPENDED -> RESUMING) ->
// STOPPING -> STOPPED, with FAILED and LOST as the other ends. FAILED and LOST
// sessions may still hold things on a node, so both may move to STOPPING for
// cleanup; only STOPPED has no way out.
package state

import (
	"fmt"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

type (
	// State is a session state.
	State = sessionv1.SessionState
)

const (
	Pending    = sessionv1.SessionState_SESSION_STATE_PENDING
	Starting   = sessionv1.SessionState_SESSION_STATE_STARTING
	Running    = sessionv1.SessionState_SESSION_STATE_RUNNING
	Suspending = sessionv1.SessionState_SESSION_STATE_SUSPENDING
	Suspended  = sessionv1.SessionState_SESSION_STATE_SUSPENDED
	Resuming   = sessionv1.SessionState_SESSION_STATE_RESUMING
	Stopping   = sessionv1.SessionState_SESSION_STATE_STOPPING
	Stopped    = sessionv1.SessionState_SESSION_STATE_STOPPED
	Failed     = sessionv1.SessionState_SESSION_STATE_FAILED
	Lost       = sessionv1.SessionState_SESSION_STATE_LOST
)

// transitions lists, for every state, the states it may move to.
var transitions = map[State][]State{
	Pending:  {Starting, Failed, Stopping},
	Starting: {Running, Failed, Stopping, Lost},
	Running:  {Suspending, Stopping, Failed, Lost},
	// Back to Running when the node could not suspend it and nothing changed.
	Suspending: {Suspended, Running, Failed, Lost},
	Suspended:  {Resuming, Stopping, Lost},
	Resuming:   {Running, Failed, Lost},
	Stopping:   {Stopped, Failed, Lost},
	Failed:     {Stopping},
	Lost:       {Stopping},
	Stopped:    nil,
}

// TransitionError says a move between two states is not allowed.
type TransitionError struct {
	From, To State
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("session cannot go from %s to %s", Name(e.From), Name(e.To))
}

// Check returns nil when a session may go from one state to the other, and a
// *TransitionError when it may not.
func Check(from, to State) error {
	for _, s := range transitions[from] {
		if s == to {
			return nil
		}
	}
	return &TransitionError{From: from, To: to}
}

// Next lists the states a session in s may move to.
func Next(s State) []State {
	return append([]State(nil), transitions[s]...)
}

// All lists every state a session can be in (UNSPECIFIED excluded).
func All() []State {
	return []State{Pending, Starting, Running, Suspending, Suspended, Resuming, Stopping, Stopped, Failed, Lost}
}

// IsTerminal reports whether nothing can follow s.
func IsTerminal(s State) bool { return s == Stopped }

// IsEnded reports whether a session in s no longer runs a desktop: STOPPED,
// FAILED or LOST. Watches end there.
func IsEnded(s State) bool { return s == Stopped || s == Failed || s == Lost }

// IsActive reports whether a session in s holds, or is getting, resources on
// its node.
func IsActive(s State) bool {
	switch s {
	case Pending, Starting, Running, Suspending, Suspended, Resuming, Stopping:
		return true
	}
	return false
}

// Name is the short upper-case name of s, such as "RUNNING".
func Name(s State) string {
	const prefix = "SESSION_STATE_"
	n := s.String()
	if len(n) > len(prefix) && n[:len(prefix)] == prefix {
		return n[len(prefix):]
	}
	return n
}
