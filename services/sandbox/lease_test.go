package sandbox

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/deskgrid/deskgrid/proto/deskgrid/sandbox/v1"
	"github.com/deskgrid/deskgrid/services/platform/errinfo"
)

// Acts and launches are input: the node's fence (the display's input lease)
// decides, its refusal reaches the caller with its code and reason, and a
// negative token is refused before anything is asked.
func TestInputGoesThroughTheLeaseFence(t *testing.T) {
	ctx := context.Background()
	var asked []int64
	s := &Service{fence: func(_ context.Context, id string, token int64, act func() error) error {
		asked = append(asked, token)
		if token != 7 {
			return errinfo.Error(codes.FailedPrecondition, errinfo.StaleInputLease, "input to session "+id+" is leased")
		}
		return act()
	}}
	ran := 0
	act := func() error { ran++; return nil }
	if err := s.asInput(ctx, "s", 7, act); err != nil || ran != 1 {
		t.Fatalf("the holder: %v, ran %d", err, ran)
	}
	err := s.toStatus(ctx, "act", s.asInput(ctx, "s", 0, act))
	if status.Code(err) != codes.FailedPrecondition || errinfo.Reason(err) != errinfo.StaleInputLease || ran != 1 {
		t.Fatalf("another holder: %v (reason %q), ran %d", err, errinfo.Reason(err), ran)
	}
	if err := s.asInput(ctx, "s", -1, act); status.Code(s.toStatus(ctx, "act", err)) != codes.InvalidArgument || ran != 1 {
		t.Fatalf("a negative token: %v", err)
	}
	if _, err := s.actOnAccessible(ctx, &sandboxv1.ActOnAccessibleRequest{SessionId: "s", Id: ":1.5:/org/a11y/atspi/accessible/1", Operation: &sandboxv1.ActOnAccessibleRequest_Focus{Focus: true}, LeaseToken: -3}); status.Code(s.toStatus(ctx, "act", err)) != codes.InvalidArgument {
		t.Fatalf("an act with a negative token: %v", err)
	}
	if _, err := s.launchApplication(ctx, &sandboxv1.LaunchApplicationRequest{SessionId: "s", Application: "mousepad", LeaseToken: -3}); status.Code(s.toStatus(ctx, "launch", err)) != codes.InvalidArgument {
		t.Fatalf("a launch with a negative token: %v", err)
	}
	if _, err := s.open(ctx, &sandboxv1.OpenRequest{SessionId: "s", Target: "a.txt", LeaseToken: -3}); status.Code(s.toStatus(ctx, "open", err)) != codes.InvalidArgument {
		t.Fatalf("an open with a negative token: %v", err)
	}
	if len(asked) != 2 {
		t.Fatalf("the fence was asked %v, want for 7 and 0 only", asked)
	}
	// A node without a display holds no leases: input runs.
	if err := (&Service{}).asInput(ctx, "s", 0, act); err != nil || ran != 2 {
		t.Fatalf("no fence: %v, ran %d", err, ran)
	}
}
