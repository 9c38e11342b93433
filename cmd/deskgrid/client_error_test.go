package main

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	deskgrid "github.com/deskgrid/deskgrid/sdk"
)

// A command's error reads the same whether it came as a gRPC status or
// through the SDK: the code in lower case and the server's message, with
// "deskgrid:" once (main adds it).
func TestRPCError(t *testing.T) {
	want := `notfound: session "s-1" offers no application "x"`
	for _, err := range []error{
		status.Error(codes.NotFound, `session "s-1" offers no application "x"`),
		&deskgrid.Error{Code: codes.NotFound, Message: `session "s-1" offers no application "x"`},
	} {
		if got := rpcError(err).Error(); got != want {
			t.Errorf("rpcError(%v) = %q, want %q", err, got, want)
		}
	}
	other := errors.New("chromium started (process p3) but no window of it appeared")
	if got := rpcError(other); got != other {
		t.Errorf("rpcError(%v) = %v, want it as it is", other, got)
	}
}
