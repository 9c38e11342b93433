package errinfo

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestReason(t *testing.T) {
	err := Error(codes.FailedPrecondition, StaleInputLease, "input to session s is leased")
	if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "input to session s is leased" {
		t.Fatalf("status = %v", err)
	}
	if got := Reason(err); got != StaleInputLease {
		t.Fatalf("Reason = %q", got)
	}
	// Through a status round trip (as a client receives it) and wrapped.
	back := status.FromProto(status.Convert(err).Proto()).Err()
	if got := Reason(fmt.Errorf("act: %w", back)); got != StaleInputLease {
		t.Fatalf("Reason after a round trip = %q", got)
	}
	for _, plain := range []error{nil, errors.New("stale input lease"), status.Error(codes.FailedPrecondition, "stale input lease")} {
		if got := Reason(plain); got != "" {
			t.Fatalf("Reason(%v) = %q: the wording must not count", plain, got)
		}
	}
}
