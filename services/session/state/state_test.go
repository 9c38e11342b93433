package state

import (
	"errors"
	"testing"

	sessionv1 "github.com/deskgrid/deskgrid/proto/deskgrid/session/v1"
)

func TestCheckEveryPair(t *testing.T) {
	// The allowed moves, written out independently of the table under test.
	allowed := map[[2]State]bool{
		{Pending, Starting}: true, {Pending, Failed}: true, {Pending, Stopping}: true,
		{Starting, Running}: true, {Starting, Failed}: true, {Starting, Stopping}: true, {Starting, Lost}: true,
		{Running, Suspending}: true, {Running, Stopping}: true, {Running, Failed}: true, {Running, Lost}: true,
		{Suspending, Suspended}: true, {Suspending, Running}: true, {Suspending, Failed}: true, {Suspending, Lost}: true,
		{Suspended, Resuming}: true, {Suspended, Stopping}: true, {Suspended, Lost}: true,
		{Resuming, Running}: true, {Resuming, Failed}: true, {Resuming, Lost}: true,
		{Stopping, Stopped}: true, {Stopping, Failed}: true, {Stopping, Lost}: true,
		{Failed, Stopping}: true,
		{Lost, Stopping}:   true,
	}
	states := append(All(), sessionv1.SessionState_SESSION_STATE_UNSPECIFIED)
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]State{from, to}]
			err := Check(from, to)
			if (err == nil) != want {
				t.Errorf("Check(%s, %s) = %v, want allowed=%v", Name(from), Name(to), err, want)
			}
			if err != nil {
				var te *TransitionError
				if !errors.As(err, &te) || te.From != from || te.To != to {
					t.Errorf("Check(%s, %s) error %v is not a matching *TransitionError", Name(from), Name(to), err)
				}
			}
		}
	}
}

func TestClassification(t *testing.T) {
	tests := []struct {
		s                       State
		terminal, ended, active bool
	}{
		{Pending, false, false, true},
		{Starting, false, false, true},
		{Running, false, false, true},
		{Suspending, false, false, true},
		{Suspended, false, false, true},
		{Resuming, false, false, true},
		{Stopping, false, false, true},
		{Stopped, true, true, false},
		{Failed, false, true, false},
		{Lost, false, true, false},
	}
	for _, tt := range tests {
		t.Run(Name(tt.s), func(t *testing.T) {
			if got := IsTerminal(tt.s); got != tt.terminal {
				t.Errorf("IsTerminal = %v", got)
			}
			if got := IsEnded(tt.s); got != tt.ended {
				t.Errorf("IsEnded = %v", got)
			}
			if got := IsActive(tt.s); got != tt.active {
				t.Errorf("IsActive = %v", got)
			}
			if IsTerminal(tt.s) != (len(Next(tt.s)) == 0) {
				t.Errorf("terminal states have no next state and only they")
			}
		})
	}
	if Name(Running) != "RUNNING" {
		t.Errorf("Name(Running) = %q", Name(Running))
	}
}
