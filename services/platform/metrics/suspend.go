package metrics

import (
	"context"
	"errors"
)

var (
	sessionSuspends = counter("deskgrid.session.suspends", "", "SuspendSession calls, by mode (freeze, hibernate) and outcome")
	sessionResumes  = counter("deskgrid.session.resumes", "", "ResumeSession calls, by the mode the session was suspended in and outcome")
)

// SessionSuspended counts a SuspendSession call in mode ("freeze",
// "hibernate", "unknown" for a mode deskgrid does not have) that returned
// err, a gRPC status error or nil.
func SessionSuspended(ctx context.Context, mode string, err error) {
	sessionSuspends.Add(context.WithoutCancel(ctx), 1, attrs("mode", mode, "outcome", callOutcome(ctx, err)))
}

// SessionResumed counts a ResumeSession call of a session suspended in mode
// ("freeze", "hibernate", or "none" when it was not suspended or not found)
// that returned err, a gRPC status error or nil.
func SessionResumed(ctx context.Context, mode string, err error) {
	sessionResumes.Add(context.WithoutCancel(ctx), 1, attrs("mode", mode, "outcome", callOutcome(ctx, err)))
}

func callOutcome(ctx context.Context, err error) string {
	if err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)) {
		return "cancelled"
	}
	return Outcome(err)
}
